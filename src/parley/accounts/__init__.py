"""Accounts: passwords, credentials (sessions and API keys), login throttling."""
