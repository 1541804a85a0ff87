"""Executing tool calls: the manager, limits, resolvers, exception processing and executors."""
