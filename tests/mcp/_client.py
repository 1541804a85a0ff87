"""The official MCP client against a streamable-HTTP endpoint, for the tests of our servers.

:func:`session` opens a session with the initialize handshake (protocol 2025-11-25, the older
revision); :func:`client` uses the SDK's ``Client`` as users' code does, at its default
(``mode="auto"``): the sessionless 2026-07-28 revision, where every request stands alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

T = TypeVar("T")


def run(coroutine: Awaitable[T], timeout: float = 30) -> T:
    """Run ``coroutine`` to its end, within ``timeout`` seconds."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))  # type: ignore[arg-type]


async def session(
    url: str,
    token: str | None,
    use: Callable[[ClientSession], Awaitable[T]],
    *,
    timeout: float = 20,
) -> T:
    """Open an MCP session with ``token``, run ``use`` on it (its exception raised as is, not in
    a group)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    outcome: list[Any] = []
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as opened:
                await opened.initialize()
                try:
                    outcome.append(await use(opened))
                except Exception as exc:
                    outcome.append(exc)
    if isinstance(outcome[0], Exception):
        raise outcome[0]
    return outcome[0]  # type: ignore[no-any-return]


async def client(
    url: str,
    token: str | None,
    use: Callable[[Client], Awaitable[T]],
    *,
    timeout: float = 20,
    **options: Any,
) -> T:
    """Run ``use`` on the SDK's ``Client`` at its default revision, with ``token``.

    ``options`` go to ``Client`` (its callbacks: ``elicitation_callback``, ...).
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with Client(streamable_http_client(url, http_client=http), **options) as opened:
            return await use(opened)


def tool_names(url: str, token: str) -> list[str]:
    """The names ``tools/list`` gives the holder of ``token``."""

    async def names(opened: ClientSession) -> list[str]:
        return [t.name for t in (await opened.list_tools()).tools]

    return run(session(url, token, names))
