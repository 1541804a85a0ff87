"""Optional Django apps built on tool_calling's public HTTP API (add them to INSTALLED_APPS)."""
