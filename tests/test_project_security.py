"""The example project's security, proxy and static variables: each read, each changes something.

Each case runs the project's own settings (``project.settings``, DEBUG off) in a process of its
own with some of the variables set, asks its login page through Django's test client as the TLS
proxy would (``X-Forwarded-Proto: https``) and prints what came back. The whole deployment over
a socket is tests/integration/test_production.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json
import django
django.setup()
from django.conf import settings
from django.test import Client
from tool_calling.conf import settings as tool_calling
page = Client(HTTP_HOST="localhost").get("/login/", HTTP_X_FORWARDED_PROTO="https")
csrf = page.cookies.get("csrftoken")
print(json.dumps({
    "status": page.status_code,
    "location": page.get("Location"),
    "hsts": page.get("Strict-Transport-Security"),
    "csrf_cookie_secure": bool(csrf["secure"]) if csrf else None,
    "session_cookie_secure": settings.SESSION_COOKIE_SECURE,
    "csrf_trusted_origins": settings.CSRF_TRUSTED_ORIGINS,
    "static_root": str(settings.STATIC_ROOT),
    "mcp_hosts": tool_calling.MCP["ALLOWED_HOSTS"],
    "mcp_origins": tool_calling.MCP["ALLOWED_ORIGINS"],
    "mcp_resource": tool_calling.MCP["RESOURCE"],
    "mcp_authorization_servers": tool_calling.MCP["AUTHORIZATION_SERVERS"],
}))
"""


def probe(tmp_path, **variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TOOL_CALLING_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY="tests-only-not-a-secret",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PYTHONPATH=str(ROOT),
        **variables,
    )
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def answer(tmp_path, **variables):
    result = probe(tmp_path, **variables)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


DEFAULTS = {
    "status": 200,
    "location": None,
    "hsts": None,
    "csrf_cookie_secure": False,
    "session_cookie_secure": False,
    "csrf_trusted_origins": [],
    "static_root": str(ROOT / "var" / "static"),
    "mcp_hosts": ["127.0.0.1", "localhost", "[::1]"],
    "mcp_origins": None,
    "mcp_resource": None,
    "mcp_authorization_servers": [],
}


def test_by_default_nothing_assumes_https(tmp_path):
    """Development over plain HTTP: no redirect, no HSTS, cookies over HTTP too."""
    assert answer(tmp_path) == DEFAULTS


@pytest.mark.parametrize(
    ("variables", "changed"),
    [
        # Not trusted, the header is ignored: the request is plain HTTP, redirected (no page, no
        # CSRF cookie).
        (
            {"DJANGO_SECURE_SSL_REDIRECT": "true"},
            {"status": 301, "location": "https://localhost/login/", "csrf_cookie_secure": None},
        ),
        # Trusted, the same request is HTTPS: no redirect.
        ({"DJANGO_SECURE_SSL_REDIRECT": "true", "DJANGO_SECURE_PROXY_SSL_HEADER": "true"}, {}),
        (
            {"DJANGO_SECURE_COOKIES": "true"},
            {"csrf_cookie_secure": True, "session_cookie_secure": True},
        ),
        # HSTS goes out on HTTPS requests only: the proxy header must be trusted.
        ({"DJANGO_SECURE_HSTS_SECONDS": "60"}, {}),
        (
            {"DJANGO_SECURE_HSTS_SECONDS": "60", "DJANGO_SECURE_PROXY_SSL_HEADER": "true"},
            {"hsts": "max-age=60"},
        ),
        (
            {
                "DJANGO_SECURE_HSTS_SECONDS": "60",
                "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
                "DJANGO_SECURE_HSTS_PRELOAD": "true",
                "DJANGO_SECURE_PROXY_SSL_HEADER": "true",
            },
            {"hsts": "max-age=60; includeSubDomains; preload"},
        ),
        (
            {"DJANGO_CSRF_TRUSTED_ORIGINS": "https://portal.example, https://b.example,"},
            {"csrf_trusted_origins": ["https://portal.example", "https://b.example"]},
        ),
        ({"DJANGO_STATIC_ROOT": "/srv/static"}, {"static_root": "/srv/static"}),
        (
            {"TOOL_CALLING_MCP_ALLOWED_HOSTS": "mcp.example, 127.0.0.1"},
            {"mcp_hosts": ["mcp.example", "127.0.0.1"]},
        ),
        (
            {"TOOL_CALLING_MCP_ALLOWED_ORIGINS": "https://ide.example"},
            {"mcp_origins": ["https://ide.example"]},
        ),
        # OAuth on /mcp/: the project is its own authorization server, at the URL's origin.
        (
            {"TOOL_CALLING_MCP_RESOURCE": "https://mcp.example:8443/mcp/"},
            {
                "mcp_resource": "https://mcp.example:8443/mcp/",
                "mcp_authorization_servers": ["https://mcp.example:8443"],
            },
        ),
        # Empty is unset (compose passes ${X:-}).
        (
            {
                "TOOL_CALLING_MCP_ALLOWED_HOSTS": "",
                "DJANGO_CSRF_TRUSTED_ORIGINS": "",
                "TOOL_CALLING_MCP_RESOURCE": "",
            },
            {},
        ),
    ],
    ids=[
        "redirect",
        "redirect-behind-trusted-proxy",
        "secure-cookies",
        "hsts-over-http",
        "hsts",
        "hsts-subdomains-preload",
        "csrf-trusted-origins",
        "static-root",
        "mcp-hosts",
        "mcp-origins",
        "mcp-resource",
        "empty-is-unset",
    ],
)
def test_each_variable_changes_what_it_names(tmp_path, variables, changed):
    assert answer(tmp_path, **variables) == {**DEFAULTS, **changed}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "DJANGO_SECURE_HSTS_SECONDS",
            "an hour",
            "The environment variable DJANGO_SECURE_HSTS_SECONDS must be a number of seconds (0 or "
            "more): 'an hour'.",
        ),
        (
            "DJANGO_SECURE_HSTS_SECONDS",
            "-1",
            "The environment variable DJANGO_SECURE_HSTS_SECONDS must be a number of seconds (0 or "
            "more): '-1'.",
        ),
        (
            "DJANGO_SECURE_COOKIES",
            "maybe",
            "The environment variable DJANGO_SECURE_COOKIES must be true or false: 'maybe'.",
        ),
        (
            "DJANGO_SECURE_PROXY_SSL_HEADER",
            "X-Forwarded-Proto",
            "The environment variable DJANGO_SECURE_PROXY_SSL_HEADER must be true or false: "
            "'X-Forwarded-Proto'.",
        ),
    ],
)
def test_a_value_that_is_not_one_refuses_to_start_naming_the_variable(
    tmp_path, name, value, message
):
    result = probe(tmp_path, **{name: value})
    assert result.returncode != 0
    assert f"django.core.exceptions.ImproperlyConfigured: {message}" in result.stderr
