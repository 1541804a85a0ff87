"""Defining tools: the decorator, schemas, definitions, callbacks and result conversion."""
