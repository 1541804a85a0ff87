"""McpServer's validation: what each transport needs, and never a secret in the database."""

import pytest
from django.core.exceptions import ValidationError

from tool_calling import models

pytestmark = pytest.mark.django_db


def errors(**fields):
    server = models.McpServer(alias=fields.pop("alias", "srv"), **fields)
    with pytest.raises(ValidationError) as raised:
        server.full_clean()
    return raised.value.message_dict


def test_a_stdio_server_needs_its_command_and_takes_no_url_or_headers():
    assert errors(url="https://mcp.example.com/mcp", headers={"X": "Y"}) == {
        "command": ["A stdio server needs the command that starts it."],
        "url": ["A stdio server has no URL; clear it or choose Streamable HTTP."],
        "headers": ["Headers are for Streamable HTTP servers; clear them."],
    }


def test_a_streamable_http_server_needs_its_url_and_takes_no_command():
    assert errors(transport="streamable_http", command="node", args=["x"]) == {
        "url": ["A Streamable HTTP server needs its MCP endpoint URL."],
        "command": ["Command, arguments and environment are for stdio servers; clear them."],
    }
    assert errors(transport="streamable_http", url="https://bob:hunter2@mcp.example.com/mcp") == {
        "url": [
            "The URL carries a password: put credentials in a header instead, named by an "
            'environment variable ({"Authorization": "MCP_TOKEN"}).'
        ]
    }


@pytest.mark.parametrize(
    "value", ["ghp_16C7e42F292c6912E7710c838347Ae178B4a", "Bearer abc", "", 42, "mcp_token"]
)
def test_environment_and_headers_name_variables_never_values(value):
    message = (
        "'TOKEN' must name an environment variable (upper-case letters, digits and '_', e.g. "
        "MCP_TOKEN), not give its value: secrets are never stored here, only the name of the "
        "variable that holds them."
    )
    assert errors(command="node", env={"TOKEN": value}) == {"env": [message]}
    http = {"transport": "streamable_http", "url": "https://mcp.example.com/mcp"}
    assert errors(**http, headers={"TOKEN": value}) == {"headers": [message]}


def test_arguments_and_context_keys_are_lists_of_strings():
    assert errors(command="node", args="--local", context_keys="user_id") == {
        "args": ['The arguments must be a JSON list of strings, e.g. ["--local"].'],
        "context_keys": [
            'The context keys must be a JSON list of key names, e.g. ["conversation_id"].'
        ],
    }


def test_aliases_and_prefixes_start_tool_names():
    problems = errors(alias="my server", command="node", name_prefix="-x")
    assert problems == {
        "alias": [
            "An alias is 1-32 letters, digits, '_', '.' or '-', starting with a letter or a digit."
        ],
        "name_prefix": [
            "A name prefix is 1-32 letters, digits, '_', '.' or '-', starting with a letter or "
            "a digit."
        ],
    }


def test_a_valid_server_passes_and_names_its_tools():
    server = models.McpServer(
        alias="github",
        command="npx",
        args=["-y", "@modelcontextprotocol/server-github"],
        env={"GITHUB_PERSONAL_ACCESS_TOKEN": "MCP_GITHUB_TOKEN"},
        context_keys=["conversation_id"],
    )
    server.full_clean()
    assert (server.prefix, server.source) == ("github", "mcp:github")
    server.name_prefix = "gh"
    assert server.prefix == "gh"
