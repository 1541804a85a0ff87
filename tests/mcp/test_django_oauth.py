"""/mcp/ as an OAuth 2.1 resource server, with the example project as its authorization server.

The example project's ASGI app (``with_mcp``) under uvicorn on a thread, with
``MCP["RESOURCE"]`` set to its /mcp/ URL: the official SDK's ``OAuthClientProvider`` discovers
the protected resource metadata from the 401, then the authorization server's (RFC 8414), gets
a code for a pre-registered public client (a user logged in, the authorize form posted), trades
it with PKCE for a token bound to /mcp/ (RFC 8707), and lists and calls tools with it. A tool
that needs a further scope is not listed; calling it answers 403 ``insufficient_scope``, and the
SDK steps up. DRF tokens keep working beside OAuth.
"""

from __future__ import annotations

import datetime
import html
import re
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from oauth2_provider.models import AccessToken, Application
from rest_framework.authtoken.models import Token

from tests.django._tools import registered, tool_calling_settings
from tool_calling import models, tool
from tool_calling.asgi import get_asgi_application, with_mcp

from ._client import run, session
from ._servers import UvicornThread, free_port

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REDIRECT_URI = "http://127.0.0.1:9/callback"  # never reached: the test reads the redirect
PASSWORD = "correct horse battery staple"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def close_books(year: int) -> str:
    """Close the books of a year."""
    return f"closed {year}"


@pytest.fixture(autouse=True)
def _tools() -> Iterator[None]:
    with registered(add, close_books):
        yield


@pytest.fixture
def site() -> Iterator[str]:
    """The example project on a free port, /mcp/ its OAuth resource; yields the origin."""
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    mcp = {
        **tool_calling_settings().get("MCP", {}),
        "RESOURCE": f"{origin}/mcp/",
        "AUTHORIZATION_SERVERS": [origin],
        "TOOL_SCOPES": {"close_books": "mcp:books"},
    }
    oauth = {
        "PKCE_REQUIRED": True,
        "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
        "SCOPES": {"mcp": "Use tools over MCP", "mcp:books": "Close the books"},
        "DEFAULT_SCOPES": ["mcp"],
    }
    with override_settings(TOOL_CALLING=tool_calling_settings(MCP=mcp), OAUTH2_PROVIDER=oauth):
        with UvicornThread(with_mcp(get_asgi_application()), port=port):
            yield origin


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password=PASSWORD)


@pytest.fixture
def application(alice: User) -> Application:
    """A pre-registered public client (authorization code, PKCE), as an operator adds one."""
    return Application.objects.create(
        name="IDE",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=REDIRECT_URI,
        client_secret="",
        user=alice,
    )


class _Storage:
    """The client's token storage, with the pre-registered client's information."""

    def __init__(self, client_id: str) -> None:
        self.tokens: OAuthToken | None = None
        self.client = OAuthClientInformationFull(
            client_id=client_id,
            redirect_uris=[REDIRECT_URI],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        )

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def _hidden_fields(page: str) -> dict[str, str]:
    fields = {}
    for tag in re.findall(r"<input[^>]*>", page):
        name = re.search(r'name="([^"]*)"', tag)
        value = re.search(r'value="([^"]*)"', tag)
        if name and 'type="hidden"' in tag:
            fields[name.group(1)] = html.unescape(value.group(1)) if value else ""
    return fields


class _Browser:
    """The person at the authorization server: logs in, then posts each authorize form."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.codes: list[AuthorizationCodeResult] = []
        self.authorize_urls: list[str] = []

    async def redirect(self, authorization_url: str) -> None:
        self.authorize_urls.append(authorization_url)
        async with httpx.AsyncClient(base_url=self.origin, timeout=20) as browser:
            login = await browser.get("/login/")
            await browser.post(
                "/login/",
                data={
                    **_hidden_fields(login.text),
                    "username": "alice",
                    "password": PASSWORD,
                },
            )
            page = await browser.get(authorization_url)
            assert page.status_code == 200, page.text
            answer = await browser.post(
                urlsplit(authorization_url).path, data={**_hidden_fields(page.text), "allow": "1"}
            )
        assert answer.status_code == 302, answer.text
        location = answer.headers["location"]
        assert location.startswith(REDIRECT_URI + "?"), location
        query = parse_qs(urlsplit(location).query)
        self.codes.append(
            AuthorizationCodeResult(
                code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0]
            )
        )

    async def callback(self) -> AuthorizationCodeResult:
        return self.codes[-1]


def _provider(origin: str, storage: _Storage, browser: _Browser) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=f"{origin}/mcp/",
        client_metadata=OAuthClientMetadata(
            redirect_uris=[REDIRECT_URI],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )


async def _with_oauth(origin: str, storage: _Storage, browser: _Browser, use: Any) -> Any:
    provider = _provider(origin, storage, browser)
    async with httpx2.AsyncClient(auth=provider, timeout=20) as http:
        async with streamable_http_client(f"{origin}/mcp/", http_client=http) as (read, write):
            async with ClientSession(read, write) as opened:
                await opened.initialize()
                return await use(opened)


def post(url: str, token: str | None = None, message: dict[str, Any] = INITIALIZE) -> Any:
    headers = {**MCP_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(url, json=message, headers=headers, timeout=20)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}


def access_token(user: User, app: Application, resource: list[str], scope: str = "mcp") -> str:
    key = secrets.token_urlsafe(24)
    AccessToken.objects.create(
        user=user,
        application=app,
        token=key,
        scope=scope,
        resource=resource,
        expires=timezone.now() + datetime.timedelta(hours=1),
    )
    return key


def test_the_sdks_oauth_client_logs_in_with_pkce_and_lists_and_calls_tools(
    site: str, application: Application
) -> None:
    storage, browser = _Storage(application.client_id), _Browser(site)

    async def use(opened: ClientSession) -> tuple[list[str], Any]:
        names = [t.name for t in (await opened.list_tools()).tools]
        return names, await opened.call_tool("add", {"a": 2, "b": 3})

    names, result = run(_with_oauth(site, storage, browser, use), timeout=60)
    # close_books needs mcp:books, which the token lacks.
    assert "add" in names and "close_books" not in names
    assert (result.content[0].text, result.is_error) == ("5", False)
    # The code was asked for with PKCE (S256) and the resource, and the token is bound to it.
    asked = parse_qs(urlsplit(browser.authorize_urls[0]).query)
    assert asked["code_challenge_method"] == ["S256"]
    assert asked["resource"] == [f"{site}/mcp/"]
    assert asked["scope"] == ["mcp"]
    token = AccessToken.objects.get()
    assert (token.resource, token.scope, token.user.username) == ([f"{site}/mcp/"], "mcp", "alice")
    execution = models.ToolExecution.objects.get(tool_name="add")
    assert execution.user.username == "alice"


def test_a_tool_needing_another_scope_answers_403_and_the_sdk_steps_up(
    site: str, application: Application, alice: User
) -> None:
    token = access_token(alice, application, [f"{site}/mcp/"])
    refused = post(f"{site}/mcp/", token, call("close_books", year=2025))
    assert refused.status_code == 403
    assert refused.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", '
        f'resource_metadata="{site}/.well-known/oauth-protected-resource/mcp/", '
        'scope="mcp:books"'
    )
    assert not models.ToolExecution.objects.exists()

    storage, browser = _Storage(application.client_id), _Browser(site)

    async def use(opened: ClientSession) -> Any:
        return await opened.call_tool("close_books", {"year": 2025})

    result = run(_with_oauth(site, storage, browser, use), timeout=60)
    assert (result.content[0].text, result.is_error) == ("closed 2025", False)
    # First the endpoint's scope, then, on the 403, both: the SDK asked again for more.
    scopes = [parse_qs(urlsplit(url).query)["scope"] for url in browser.authorize_urls]
    assert scopes == [["mcp"], ["mcp mcp:books"]]
    assert storage.tokens is not None and set(storage.tokens.scope.split()) == {"mcp", "mcp:books"}


def test_no_token_gets_401_naming_the_resource_metadata_and_the_scope(site: str) -> None:
    response = post(f"{site}/mcp/")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{site}/.well-known/oauth-protected-resource/mcp/", scope="mcp"'
    )
    expected = {
        "resource": f"{site}/mcp/",
        "authorization_servers": [site],
        "scopes_supported": ["mcp", "mcp:books"],
        "bearer_methods_supported": ["header"],
    }
    for path in (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp/",
    ):
        document = httpx.get(site + path, timeout=20)
        assert document.status_code == 200, path
        assert document.json() == expected


def test_the_authorization_servers_metadata_requires_pkce_with_s256(
    site: str, application: Application
) -> None:
    metadata = httpx.get(f"{site}/.well-known/oauth-authorization-server", timeout=20).json()
    assert metadata["issuer"] == site
    assert metadata["authorization_endpoint"] == f"{site}/o/authorize/"
    assert metadata["token_endpoint"] == f"{site}/o/token/"
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["scopes_supported"] == ["mcp", "mcp:books"]
    # Without a code challenge the authorization server refuses to issue a code.
    with httpx.Client(base_url=site, timeout=20) as browser:
        login = browser.get("/login/")
        browser.post(
            "/login/",
            data={**_hidden_fields(login.text), "username": "alice", "password": PASSWORD},
        )
        params = {
            "response_type": "code",
            "client_id": application.client_id,
            "redirect_uri": REDIRECT_URI,
            "scope": "mcp",
            "state": "s",
        }
        answer = browser.get("/o/authorize/", params=params)
    assert answer.status_code == 302
    assert parse_qs(urlsplit(answer.headers["location"]).query)["error"] == ["invalid_request"]


def test_a_token_for_another_resource_or_for_any_resource_gets_401(
    site: str, application: Application, alice: User
) -> None:
    challenge = (
        'Bearer error="invalid_token", '
        f'resource_metadata="{site}/.well-known/oauth-protected-resource/mcp/", scope="mcp"'
    )
    for resource in ([f"{site}/other/"], ["https://elsewhere.example/mcp/"], []):
        token = access_token(alice, application, resource)
        response = post(f"{site}/mcp/", token)
        assert response.status_code == 401, resource
        assert response.headers["www-authenticate"] == challenge
    good = access_token(alice, application, [f"{site}/mcp/", f"{site}/other/"])
    assert post(f"{site}/mcp/", good).status_code == 200
    AccessToken.objects.filter(token=good).update(expires=timezone.now())
    assert post(f"{site}/mcp/", good).status_code == 401
    AccessToken.objects.filter(token=good).update(
        expires=timezone.now() + datetime.timedelta(hours=1)
    )
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert post(f"{site}/mcp/", good).status_code == 401


def test_a_token_without_the_endpoints_scope_gets_403(
    site: str, application: Application, alice: User
) -> None:
    token = access_token(alice, application, [f"{site}/mcp/"], scope="mcp:books")
    response = post(f"{site}/mcp/", token)
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", '
        f'resource_metadata="{site}/.well-known/oauth-protected-resource/mcp/", scope="mcp"'
    )


def test_drf_tokens_keep_working_and_are_not_limited_by_scopes(site: str, alice: User) -> None:
    key = Token.objects.create(user=alice).key
    assert post(f"{site}/mcp/", key).status_code == 200

    async def use(opened: ClientSession) -> tuple[list[str], Any]:
        names = [t.name for t in (await opened.list_tools()).tools]
        return names, await opened.call_tool("close_books", {"year": 2024})

    names, result = run(session(f"{site}/mcp/", key, use))
    assert "add" in names and "close_books" in names
    assert (result.content[0].text, result.is_error) == ("closed 2024", False)


def test_without_a_resource_access_tokens_are_unknown_and_drf_tokens_unlimited(
    application: Application, alice: User
) -> None:
    from tool_calling.mcp.serving import authenticate, insufficient_scope

    resource = "http://testserver/mcp/"
    key = access_token(alice, application, [resource])
    header = {"authorization": f"Bearer {key}"}
    mcp = {"RESOURCE": resource, "AUTHORIZATION_SERVERS": ["http://testserver"]}
    with override_settings(TOOL_CALLING=tool_calling_settings(MCP=mcp)):
        principal = authenticate(header)
        assert principal is not None
        assert (principal.user, principal.scopes) == (alice, frozenset({"mcp"}))
        assert insufficient_scope(principal, call("add", a=1, b=2)) == []
    with override_settings(TOOL_CALLING=tool_calling_settings(MCP={})):
        assert authenticate(header) is None
    drf = authenticate({"authorization": f"Bearer {Token.objects.create(user=alice).key}"})
    assert drf is not None and drf.scopes is None
    assert insufficient_scope(drf, call("close_books", year=1)) == []
