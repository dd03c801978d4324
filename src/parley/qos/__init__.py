"""Quality of service: tiers, token budgets, admission."""
