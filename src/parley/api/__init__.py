"""The HTTP edge: app factory, dependencies, routes, error mapping."""
