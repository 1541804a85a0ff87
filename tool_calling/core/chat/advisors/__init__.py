"""Advisors around the model call: the tool loop, memory, and the chain they run in."""
