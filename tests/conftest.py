"""Shared fixtures of the test suite (pytest-django configures Django from tests.settings)."""
