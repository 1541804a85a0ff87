"""Helpers of the API tests: an authenticated client, and URLs by name."""

from django.urls import reverse
from rest_framework.test import APIClient


def client_for(user) -> APIClient:
    """An API client authenticated as ``user`` (no token or session needed)."""
    client = APIClient()
    client.force_authenticate(user)
    return client


def url(name: str, pk=None) -> str:
    """The path of the API's URL ``tool_calling:<name>``."""
    return reverse(f"tool_calling:{name}", kwargs=None if pk is None else {"pk": pk})
