"""The API's errors are valid HTTP on a real socket (R12), with DEBUG on and off.

``JSONErrorMiddleware`` replaces the body of the error pages Django answers under ``/api/``.
Django's test client never checks ``Content-Length`` against the body; uvicorn does, and sent
fewer bytes than it had announced (httpx: ``RemoteProtocolError``, ``http.client``:
``IncompleteRead``). Here uvicorn serves ``project.asgi:application`` in a process of its own,
and each answer is read twice: by a raw socket that counts the bytes until the server closes the
connection (the oracle: ``Content-Length`` must equal them), and by httpx, as a client would.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration._project import project_env, run, uvicorn

pytestmark = pytest.mark.integration

UPLOAD_LIMIT = 2621440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, which the project keeps
SERVER_ERROR = "Server error: the request failed; the server logged what happened."
CSRF_FAILED = (
    "CSRF verification failed: send the CSRF token (the X-CSRFToken header, from the "
    "csrftoken cookie) with session-authenticated requests."
)

# A user with a DRF token and a conversation, for the 413 of the API's own message endpoint.
SETUP = """
import json
import django
django.setup()
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from tool_calling import models
user = User.objects.create_user("alice", password="pw")
token = Token.objects.create(user=user)
conversation = models.Conversation.objects.create(owner=user)
print(json.dumps({"token": token.key, "conversation": str(conversation.pk)}))
"""


@dataclass
class Server:
    url: str
    token: str
    conversation: str


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    directory = tmp_path_factory.mktemp("http-errors")
    env = project_env(directory / "db.sqlite3")
    run(env, "manage.py", "migrate", "--noinput", "-v0")
    return directory, json.loads(run(env, "-c", SETUP).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["true", "false"], ids=["debug-on", "debug-off"])
def server(request, database) -> Iterator[Server]:
    directory, created = database
    env = project_env(
        directory / "db.sqlite3",
        DJANGO_SETTINGS_MODULE="tests.settings_http_errors",
        DJANGO_DEBUG=request.param,
    )
    with uvicorn(env, directory / f"uvicorn-debug-{request.param}.log") as url:
        yield Server(url, created["token"], created["conversation"])


def exchange(
    server: Server, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> Answer:
    """Send one request on a fresh connection; read everything until the server closes it."""
    address = urlsplit(server.url)
    fields = {"Host": address.netloc, "Connection": "close", **headers}
    lines = [f"{method} {path} HTTP/1.1", *(f"{name}: {value}" for name, value in fields.items())]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, content = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return Answer(int(status_line.split()[1]), parsed, content)


def assert_valid_json_error(
    server: Server,
    method: str,
    path: str,
    status: int,
    detail: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> Answer:
    """The answer declares the bytes it sends, and they are the whole ``{"detail": ...}``."""
    headers = headers or {}
    answer = exchange(server, method, path, headers, body)
    assert answer.status == status, answer.body[:300]
    assert answer.headers["content-type"] == "application/json"
    assert int(answer.headers["content-length"]) == len(answer.body), (
        f"declared {answer.headers['content-length']} bytes, sent {len(answer.body)}"
    )
    assert json.loads(answer.body) == {"detail": detail}
    # The same request from httpx, which refuses a body shorter or longer than declared.
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.request(method, path, headers=headers, content=body or None)
    assert response.status_code == status
    assert response.headers["content-length"] == str(len(response.content))
    assert response.json() == {"detail": detail}
    return answer


def test_r12_a_404_declares_the_length_it_sends(server):
    assert_valid_json_error(
        server, "GET", "/api/no-such-thing/", 404, "Not found: '/api/no-such-thing/'."
    )
    # Longer than DEBUG-off's HTML page (179 bytes): the server sent nothing of it before.
    long_path = "/api/" + "x" * 300 + "/"
    assert_valid_json_error(server, "GET", long_path, 404, f"Not found: {long_path!r}.")


def test_r12_a_405_declares_the_length_it_sends_and_keeps_allow(server):
    # OPTIONS: a safe method, so that the CSRF check (403) does not answer first.
    answer = assert_valid_json_error(
        server, "OPTIONS", "/api/_test/only-get/", 405, "Method 'OPTIONS' not allowed."
    )
    assert answer.headers["allow"] == "GET"


def test_r12_a_413_declares_the_length_it_sends(server):
    body = json.dumps({"text": "x" * (UPLOAD_LIMIT + 1)}).encode()
    assert_valid_json_error(
        server,
        "POST",
        f"/api/conversations/{server.conversation}/messages/",
        413,
        f"The request body is larger than the {UPLOAD_LIMIT} bytes this server accepts.",
        headers={"Authorization": f"Token {server.token}", "Content-Type": "application/json"},
        body=body,
    )


def test_r12_a_500_declares_the_length_it_sends(server):
    answer = assert_valid_json_error(server, "GET", "/api/_test/broken/", 500, SERVER_ERROR)
    assert b"hunter2" not in answer.body


def test_r12_a_csrf_403_declares_the_length_it_sends(server):
    assert_valid_json_error(
        server,
        "POST",
        "/api/_test/form/",
        403,
        CSRF_FAILED,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        body=b"a=b",
    )


def test_r12_the_other_rewritten_errors_declare_the_length_they_send(server):
    """400 (a host not allowed, a suspicious request) and a plain view's 403."""
    assert_valid_json_error(
        server, "GET", "/api/tools/", 400, "Bad request.", headers={"Host": "evil.example"}
    )
    assert_valid_json_error(server, "GET", "/api/_test/suspicious/", 400, "Bad request.")
    assert_valid_json_error(server, "GET", "/api/_test/forbidden/", 403, "Forbidden.")
