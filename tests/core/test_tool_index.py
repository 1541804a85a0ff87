"""Tool indexes: LexicalToolIndex (BM25F), RegexToolIndex, and the ToolIndex contract."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tool_calling import LexicalToolIndex, RegexToolIndex, ToolDefinition, ToolIndex
from tool_calling.core.search._text import STEM_MARK, light_stem, name_words, terms, words
from tool_calling.exceptions import ToolSearchQueryError


def definition(name: str, description: str, **properties: Any) -> ToolDefinition:
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return ToolDefinition(name, description, schema)


TOOLS = [
    definition("github__create_issue", "Create a new issue in a GitHub repository."),
    definition("gitlab__create_issue", "Create a new issue in a GitLab project."),
    definition("getWeatherForecast", "Weather for the next days.", city={"type": "string"}),
    definition(
        "mail.send-message",
        "Deliver a message.",
        to={"type": "string", "description": "Recipient email address"},
    ),
    definition(
        "list_orders",
        "List a customer's orders.",
        status={"type": "string", "enum": ["pending", "shipped"]},
    ),
    definition("get_order", "Get one order by its number."),
    definition("lock_door", "Lock a smart lock."),
]


def test_names_split_at_underscores_dots_dashes_and_camel_case() -> None:
    assert name_words("github__createIssue") == ["github", "create", "issue"]
    assert name_words("mail.send-message") == ["mail", "send", "message"]
    assert name_words("getHTTPResponse") == ["get", "http", "response"]
    assert words("List PRs and URLs") == ["list", "prs", "and", "urls"]


def test_the_light_stemmer_gives_the_forms_of_a_word_one_stem() -> None:
    assert {light_stem(w) for w in ("create", "created", "creating", "creates")} == {"creat"}
    assert light_stem("repositories") == light_stem("repository") == "repository"
    assert light_stem("branches") == "branch"
    assert light_stem("running") == "run"
    assert light_stem("added") == "add"
    assert light_stem("ids") == "id"
    assert light_stem("string") == "string"  # no vowel before -ing: not a suffix
    assert light_stem("status") == "status"


def test_terms_drop_stop_words_and_keep_the_word_beside_its_stem() -> None:
    assert terms(["please", "list", "the", "issues"]) == [
        "list",
        STEM_MARK + "list",
        "issues",
        STEM_MARK + "issu",
    ]
    assert terms(["the", "issues"], stem=None) == ["issues"]


@pytest.fixture
def lexical() -> LexicalToolIndex:
    index = LexicalToolIndex()
    index.index(TOOLS)
    return index


def test_lexical_finds_by_name_parts_and_description(lexical: LexicalToolIndex) -> None:
    assert lexical.search("gitlab issue", 1) == ["gitlab__create_issue"]
    assert lexical.search("open a new github issue", 2) == [
        "github__create_issue",
        "gitlab__create_issue",
    ]
    assert lexical.search("weather forecast", 1) == ["getWeatherForecast"]


def test_lexical_finds_by_parameter_names_descriptions_and_enum_values(
    lexical: LexicalToolIndex,
) -> None:
    assert lexical.search("recipient email address", 1) == ["mail.send-message"]
    assert lexical.search("shipped", 1) == ["list_orders"]


def test_lexical_stems_and_synonyms_find_other_forms_and_words(
    lexical: LexicalToolIndex,
) -> None:
    assert lexical.search("creating issues", 2) == [
        "github__create_issue",
        "gitlab__create_issue",
    ]
    assert lexical.search("send an email", 1) == ["mail.send-message"]  # email ~ mail


def test_plural_words_prefer_the_tool_that_says_the_plural(lexical: LexicalToolIndex) -> None:
    assert lexical.search("orders", 2) == ["list_orders", "get_order"]
    assert lexical.search("order", 2) == ["get_order", "list_orders"]


def test_a_query_that_is_a_tool_name_finds_that_tool_first(lexical: LexicalToolIndex) -> None:
    assert lexical.search("gitlab__create_issue", 1) == ["gitlab__create_issue"]
    assert lexical.search("  lock_door ", 3)[0] == "lock_door"


def test_tags_are_searched() -> None:
    index = LexicalToolIndex()
    index.index(TOOLS, tags={"lock_door": ["security", "entrance"], "unknown_tool": ["x"]})
    assert index.search("entrance security", 1) == ["lock_door"]
    assert index.search("x", 5) == []


def test_field_weights_change_the_ranking() -> None:
    tools = [
        definition("alpha", "Sends a report."),
        definition("report", "Does something else."),
    ]
    by_name = LexicalToolIndex()
    by_name.index(tools)
    assert by_name.search("reports", 2) == ["report", "alpha"]
    by_description = LexicalToolIndex(field_weights={"name": 0.1, "description": 5})
    by_description.index(tools)
    assert by_description.search("reports", 2) == ["alpha", "report"]


def test_nothing_matches_gives_an_empty_list(lexical: LexicalToolIndex) -> None:
    assert lexical.search("zebra xylophone", 5) == []
    assert lexical.search("", 5) == []
    assert lexical.search("the of and", 5) == []


def test_index_replaces_and_clear_forgets(lexical: LexicalToolIndex) -> None:
    lexical.index([definition("lock_door", "Lock a smart lock.")])
    assert lexical.search("github issue", 5) == []
    assert lexical.search("lock", 5) == ["lock_door"]
    lexical.clear()
    assert lexical.search("lock", 5) == []
    assert repr(lexical) == "<LexicalToolIndex: 0 tools>"


def test_lexical_options_are_checked() -> None:
    with pytest.raises(ValueError, match=re.escape("Unknown field 'names' in field_weights")):
        LexicalToolIndex(field_weights={"names": 1.0})
    with pytest.raises(ValueError, match=re.escape("The weight of field 'name' must be >= 0")):
        LexicalToolIndex(field_weights={"name": -1})
    with pytest.raises(ValueError, match="b must be between 0 and 1, got 2"):
        LexicalToolIndex(b=2)
    with pytest.raises(ValueError, match="k1 must be positive, got 0"):
        LexicalToolIndex(k1=0)


# -- the regex index -------------------------------------------------------------------------


@pytest.fixture
def regex() -> RegexToolIndex:
    index = RegexToolIndex()
    index.index(TOOLS, tags={"lock_door": ["entrance"]})
    return index


def test_regex_name_matches_come_before_description_and_tag_matches(
    regex: RegexToolIndex,
) -> None:
    assert regex.search("issue", 5) == ["github__create_issue", "gitlab__create_issue"]
    assert regex.search("^git(hub|lab)__", 5) == ["github__create_issue", "gitlab__create_issue"]
    assert regex.search("order", 5) == ["list_orders", "get_order"]
    assert regex.search("GITHUB", 5) == ["github__create_issue"]  # case-insensitive
    assert regex.search("deliver|entrance", 5) == ["mail.send-message", "lock_door"]
    assert regex.search("order|message", 2) == ["mail.send-message", "list_orders"]


def test_an_invalid_pattern_raises_a_query_error_for_the_model(regex: RegexToolIndex) -> None:
    with pytest.raises(ToolSearchQueryError) as caught:
        regex.search("create_(issue", 5)
    assert str(caught.value) == (
        "Invalid regular expression 'create_(issue': missing ), unterminated subpattern at "
        "position 7. Send a valid Python regular expression, for example 'github.*issue'."
    )
    assert isinstance(caught.value, ValueError)


def test_patterns_that_could_run_for_minutes_or_are_too_long_are_refused(
    regex: RegexToolIndex,
) -> None:
    for pattern in ("(a+)+$", r"(\w*)*x", "(ab{2,})+"):
        with pytest.raises(ToolSearchQueryError, match="repeats a group that itself repeats"):
            regex.search(pattern, 5)
    assert regex.search("(issue)+", 5) == ["github__create_issue", "gitlab__create_issue"]
    with pytest.raises(ToolSearchQueryError) as caught:
        regex.search("a" * 201, 5)
    assert str(caught.value) == "The pattern is too long (201 characters); send at most 200."


# -- the contract, for every index -------------------------------------------------------------


@pytest.fixture(params=[LexicalToolIndex, RegexToolIndex])
def any_index(request: pytest.FixtureRequest) -> ToolIndex:
    index: ToolIndex = request.param()
    index.index(TOOLS)
    return index


@pytest.mark.parametrize("query", ["issue", "order", "create", "e", "lock_door"])
def test_results_are_indexed_names_at_most_max_results_without_repeats(
    any_index: ToolIndex, query: str
) -> None:
    names = {t.name for t in TOOLS}
    for max_results in (1, 2, 5):
        found = any_index.search(query, max_results)
        assert len(found) <= max_results
        assert len(set(found)) == len(found)
        assert set(found) <= names


def test_max_results_must_be_a_positive_integer(any_index: ToolIndex) -> None:
    for bad in (0, -1, True, 2.5, "3"):
        with pytest.raises(ValueError, match="max_results must be a positive integer"):
            any_index.search("issue", bad)  # type: ignore[arg-type]


def test_duplicate_names_are_refused(any_index: ToolIndex) -> None:
    with pytest.raises(ValueError) as caught:
        any_index.index([TOOLS[0], TOOLS[0]])
    assert str(caught.value) == (
        "Tool 'github__create_issue' appears twice in the tools to index; "
        "tool names must be unique."
    )


def test_an_empty_index_finds_nothing() -> None:
    for index in (LexicalToolIndex(), RegexToolIndex()):
        assert index.search("issue", 5) == []
        index.index([])
        assert index.search("issue", 5) == []


def test_the_abstract_index_needs_its_three_methods() -> None:
    with pytest.raises(TypeError, match="abstract"):
        ToolIndex()  # type: ignore[abstract]


def test_abbreviations_and_noun_suffixes_are_read_as_their_words() -> None:
    assert terms(["pr"], stem=None) == ["pull", "request"]
    assert light_stem("translation") == light_stem("translate") == "translat"
    assert light_stem("pollutant") == light_stem("pollution") == "pollut"
    assert light_stem("station") == "station"  # too short to be a noun of a verb
    index = LexicalToolIndex()
    index.index(
        [
            definition("get_pull_request_files", "List the files a pull request changes."),
            definition("list_commits", "List commits."),
        ]
    )
    assert index.search("files of PR 12", 1) == ["get_pull_request_files"]
