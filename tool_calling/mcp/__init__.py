"""MCP in the Django layer: servers' tools governed like local tools, and our tools served.

``clients`` keeps this process's sessions with the configured servers and builds the callbacks
of their approved tools (used by ``resolvers``); ``mirror`` syncs a server's tool list into
``Tool`` rows, pinned by hash; ``serving`` offers the governed tools to MCP clients (the
``/mcp/`` endpoint of ``tool_calling.asgi`` and ``manage.py mcp_serve``).
"""
