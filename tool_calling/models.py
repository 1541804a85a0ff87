"""Models of tool_calling: tool governance, conversations and the execution audit."""
