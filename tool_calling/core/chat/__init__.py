"""Chat types, the chat model interface, the client and its advisors."""
