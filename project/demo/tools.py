"""Tools of the demo app, found by tool_calling's autodiscovery like an admin.py."""
