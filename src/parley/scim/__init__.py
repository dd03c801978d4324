"""SCIM 2.0 provisioning (``/scim/v2``): identity providers create, change and remove
accounts and groups."""
