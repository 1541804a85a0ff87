"""Management commands live in tool_calling.management.commands."""
