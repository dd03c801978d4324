"""Persistence: the schema, the database handle, migrations and queries scoped by user."""
