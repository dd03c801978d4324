"""The audit log: append-only records of security and admin events, chained by hashes."""
