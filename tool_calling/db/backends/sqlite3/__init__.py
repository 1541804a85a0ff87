"""SQLite for many threads: ``"ENGINE": "tool_calling.db.backends.sqlite3"`` (see ``base``)."""
