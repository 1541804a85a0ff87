"""Management commands of tool_calling."""
