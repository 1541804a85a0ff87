"""The production setup on this machine: what docker/compose.yml and the Dockerfile run, with the
environment they give the web service.

Docker is not needed: the image's ``collectstatic`` step, the web service's command (collectstatic,
migrate, the superuser, uvicorn serving ``project.asgi``) and its health check run here as they
would in the container, with the compose file's variables and their defaults. Only the
addresses change: SQLite for the PostgreSQL service, a port nothing listens on for Redis (nothing
here needs it), a free port for the web server, and a temporary ``DJANGO_STATIC_ROOT``. The
deployer's own values are those docs/operations.md names: the public host, an
origin of their portal, the MCP host and an MCP client's origin.

A client here talks to the server as the TLS proxy in front of it does: plain HTTP with
``X-Forwarded-Proto: https``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path

import django
import httpx
import pytest

from tests._compose import dockerfile_env, dockerfile_runs, load, service_environment
from tests._processes import stop
from tests.integration._project import free_port, project_env, run, uvicorn

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECRET_KEY = "tests-only-" + "k" * 50
PASSWORD = "production-test-password"
PROXY = {"X-Forwarded-Proto": "https"}
CHAT_JS = ROOT / "tool_calling" / "contrib" / "chat" / "static" / "tool_calling_chat" / "chat.js"
ADMIN_CSS = Path(django.__file__).parent / "contrib" / "admin" / "static" / "admin" / "css"
ADMIN_CSS /= "base.css"

# What the deployer sets (docs/operations.md), on top of compose's defaults.
DEPLOYER = {
    "DJANGO_SECRET_KEY": SECRET_KEY,
    "DJANGO_ALLOWED_HOSTS": "public.example,127.0.0.1,localhost",
    "DJANGO_SUPERUSER_USERNAME": "admin",
    "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://portal.example",
    "TOOL_CALLING_MCP_ALLOWED_HOSTS": "mcp.example,127.0.0.1",
    "TOOL_CALLING_MCP_ALLOWED_ORIGINS": "https://ide.example",
}


def machine_env() -> dict[str, str]:
    """This machine's environment without the project's variables; this .venv's python first."""
    own = ("DJANGO_", "TOOL_CALLING_", "DATABASE_URL", "REDIS_URL", "OPENAI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(own)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return env


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Deployment:
    url: str
    port: int
    static_root: Path
    log: Path


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[Deployment]:
    """The web service's command, run with its environment; yields once uvicorn answers."""
    tmp = tmp_path_factory.mktemp("production")
    port = free_port()
    env = {
        **machine_env(),
        **dockerfile_env(),
        **service_environment("web", DEPLOYER),
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{closed_port()}/0",
        "DJANGO_STATIC_ROOT": str(tmp / "static"),
    }
    (shell, option, script) = shlex.split(load()["services"]["web"]["command"])
    assert (shell, option) == ("sh", "-c")
    served = "--host 0.0.0.0 --port 8000"
    assert script.endswith(served)
    script = script.removesuffix(served) + f"--host 127.0.0.1 --port {port}"
    log = tmp / "web.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["sh", "-c", script],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the web service did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield Deployment(f"http://127.0.0.1:{port}", port, tmp / "static", log)
    finally:
        stop(process)


def test_check_deploy_finds_nothing_with_the_compose_defaults():
    """The compose environment as it is (PostgreSQL and Redis URLs: checks connect to neither)."""
    env = {**machine_env(), **dockerfile_env()}
    env |= service_environment("web", {"DJANGO_SECRET_KEY": SECRET_KEY})
    result = run(env, "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    # One check is silenced, on purpose: the OAuth toolkit's warning about http redirect URIs,
    # which MCP desktop clients' loopback redirects need (project/settings.py says why).
    assert result.stdout.strip() == "System check identified no issues (1 silenced)."
    silenced = run(
        env,
        "manage.py",
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SILENCED_SYSTEM_CHECKS)",
    )
    assert silenced.stdout.strip().splitlines()[-1] == "['oauth2_provider.W008']"


def test_without_the_proxy_variables_check_deploy_names_what_they_fix():
    """The four deployment warnings, each fixed by one of the DJANGO_SECURE_* variables."""
    env = {**machine_env(), **dockerfile_env()}
    env |= service_environment("web", {"DJANGO_SECRET_KEY": SECRET_KEY})
    for name in (
        "DJANGO_SECURE_SSL_REDIRECT",
        "DJANGO_SECURE_COOKIES",
        "DJANGO_SECURE_HSTS_SECONDS",
        "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "DJANGO_SECURE_HSTS_PRELOAD",
    ):
        del env[name]
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 1
    found = sorted(set(re.findall(r"\(security\.(W\d+)\)", result.stderr)))
    assert found == ["W004", "W008", "W012", "W016"]


def test_the_image_build_collects_the_static_files(tmp_path):
    """The Dockerfile's RUN line, with only the image's ENV (no compose variables at build)."""
    (collect,) = [line for line in dockerfile_runs() if "collectstatic" in line]
    env = {**machine_env(), **dockerfile_env(), "DJANGO_STATIC_ROOT": str(tmp_path)}
    run(env, "-c", f"import subprocess, sys; sys.exit(subprocess.call({collect!r}, shell=True))")
    assert (tmp_path / "tool_calling_chat" / "chat.js").read_bytes() == CHAT_JS.read_bytes()
    assert (tmp_path / "admin" / "css" / "base.css").is_file()


def test_the_web_service_collected_the_static_files(deployment):
    assert (deployment.static_root / "tool_calling_chat" / "chat.js").is_file()
    assert (deployment.static_root / "admin" / "css" / "base.css").is_file()


def test_the_compose_health_check_passes(deployment):
    (kind, *argv) = load()["services"]["web"]["healthcheck"]["test"]
    assert kind == "CMD" and argv[:2] == ["python", "-c"]
    code = argv[2].replace("http://127.0.0.1:8000/", f"{deployment.url}/")
    assert code != argv[2]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr


def test_plain_http_is_redirected_to_https(deployment):
    response = httpx.get(f"{deployment.url}/login/")
    assert response.status_code == 301
    assert response.headers["location"] == f"https://127.0.0.1:{deployment.port}/login/"


def cookies(response: httpx.Response) -> dict[str, SimpleCookie]:
    """Each Set-Cookie header of ``response``, parsed, by cookie name."""
    found = {}
    for header in response.headers.get_list("set-cookie"):
        cookie = SimpleCookie()
        cookie.load(header)
        (name,) = cookie.keys()
        found[name] = cookie
    return found


def login_form(deployment: Deployment) -> tuple[str, str]:
    """GET the login page as the proxy forwards it: the CSRF cookie and the form's token."""
    page = httpx.get(f"{deployment.url}/login/", headers=PROXY)
    assert page.status_code == 200
    csrf = cookies(page)["csrftoken"]["csrftoken"]
    assert csrf["secure"] is True
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token is not None
    return csrf.value, token.group(1)


def log_in(deployment: Deployment, origin: str) -> httpx.Response:
    cookie, token = login_form(deployment)
    return httpx.post(
        f"{deployment.url}/login/",
        data={"csrfmiddlewaretoken": token, "username": "admin", "password": PASSWORD},
        headers={
            **PROXY,
            # A browser sends its Secure cookie, over HTTPS, to the proxy; the proxy passes it on.
            "Cookie": f"csrftoken={cookie}",
            "Origin": origin,
            "Referer": f"{origin}/login/",
        },
    )


def test_login_behind_the_proxy_gives_a_secure_session_cookie_and_hsts(deployment):
    response = log_in(deployment, f"https://127.0.0.1:{deployment.port}")
    assert response.status_code == 302, response.text[:500]
    assert response.headers["location"] == "/"
    session = cookies(response)["sessionid"]["sessionid"]
    assert (session["secure"], session["httponly"]) == (True, True)
    assert response.headers["strict-transport-security"] == (
        "max-age=3600; includeSubDomains; preload"
    )
    page = httpx.get(
        f"{deployment.url}/", headers={**PROXY, "Cookie": f"sessionid={session.value}"}
    )
    assert page.status_code == 200
    assert "/static/tool_calling_chat/chat.js" in page.text


def test_csrf_trusted_origins_admit_the_deployers_other_origin(deployment):
    assert log_in(deployment, "https://portal.example").status_code == 302
    refused = log_in(deployment, "https://evil.example")
    assert refused.status_code == 403
    assert "CSRF verification failed" in refused.text


@pytest.mark.parametrize(
    ("path", "content_type", "source"),
    [
        ("/static/tool_calling_chat/chat.js", 'text/javascript; charset="utf-8"', CHAT_JS),
        ("/static/admin/css/base.css", 'text/css; charset="utf-8"', ADMIN_CSS),
    ],
)
def test_static_files_are_served_with_debug_off(deployment, path, content_type, source):
    response = httpx.get(f"{deployment.url}{path}", headers=PROXY)
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    assert response.content == source.read_bytes()


def test_with_debug_on_static_files_come_from_the_apps_uncollected(tmp_path):
    """The development setup (scripts/run.sh): nothing collected, WhiteNoise finds them."""
    env = project_env(
        tmp_path / "db.sqlite3",
        DJANGO_DEBUG="true",
        DJANGO_STATIC_ROOT=str(tmp_path / "never-collected"),
    )
    with uvicorn(env, tmp_path / "web.log") as url:
        for path, source in (
            ("/static/tool_calling_chat/chat.js", CHAT_JS),
            ("/static/admin/css/base.css", ADMIN_CSS),
        ):
            response = httpx.get(url + path)
            assert (response.status_code, response.content) == (200, source.read_bytes())
    assert not (tmp_path / "never-collected").exists()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "mcp.example"}, 401),  # a host of TOOL_CALLING_MCP_ALLOWED_HOSTS: on to auth
        ({"Host": "public.example"}, 421),  # Django's host, not one of the MCP endpoint's
        ({"Origin": "https://ide.example"}, 401),  # TOOL_CALLING_MCP_ALLOWED_ORIGINS
        ({"Origin": "http://127.0.0.1"}, 403),  # the hosts' own origins no longer pass
    ],
)
def test_the_mcp_endpoint_takes_its_hosts_and_origins_from_the_environment(
    deployment, headers, status
):
    response = httpx.post(
        f"{deployment.url}/mcp/",
        content=json.dumps(INITIALIZE),
        headers={
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            **headers,
        },
    )
    assert response.status_code == status, response.text
