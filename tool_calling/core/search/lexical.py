"""LexicalToolIndex: BM25F ranking over a tool's name, description, parameters and tags."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from tool_calling.core.search._fields import tool_fields
from tool_calling.core.search._text import light_stem, name_words, synonym_table, terms, words
from tool_calling.core.search.base import Tags, ToolIndex, check_max_results, check_unique
from tool_calling.core.tools.definition import ToolDefinition

__all__ = ["DEFAULT_FIELD_WEIGHTS", "LexicalToolIndex"]

DEFAULT_FIELD_WEIGHTS: Mapping[str, float] = {
    "name": 3.0,
    "description": 1.0,
    "parameters": 0.5,
    "tags": 2.0,
}
"""How much a word counts in each field (chosen on the benchmark's labelled requests)."""


class LexicalToolIndex(ToolIndex):
    """The default tool index: BM25F over words, in process, no network, no model.

    Tool names are split at ``_``, ``.``, ``-`` and camelCase (``github__createIssue`` reads as
    *github create issue*); descriptions, parameter names and descriptions, enum values and tags
    are split into words; stop words are dropped and English inflections stripped, so *issues*
    finds *issue*. Each field has its own weight and length normalisation (BM25F). A query that
    is exactly a tool name finds that tool first.

    Args:
        field_weights: Weight of each field (``name``, ``description``, ``parameters``,
            ``tags``); missing fields keep their default weight.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation (0 = none, 1 = full).
    """

    def __init__(
        self,
        *,
        field_weights: Mapping[str, float] | None = None,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        weights = dict(DEFAULT_FIELD_WEIGHTS)
        for field, weight in (field_weights or {}).items():
            if field not in weights:
                raise ValueError(
                    f"Unknown field {field!r} in field_weights; the fields are "
                    f"{', '.join(sorted(weights))}."
                )
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
                raise ValueError(f"The weight of field {field!r} must be >= 0, got {weight!r}")
            weights[field] = float(weight)
        if not 0 <= b <= 1:
            raise ValueError(f"b must be between 0 and 1, got {b!r}")
        if k1 <= 0:
            raise ValueError(f"k1 must be positive, got {k1!r}")
        self.field_weights: Mapping[str, float] = weights
        """The weight of each field."""
        self.k1 = k1
        """BM25 term-frequency saturation."""
        self.b = b
        """BM25 length normalisation."""
        self._stem: Callable[[str], str] | None = light_stem
        self._synonym_weight = 0.5
        self._synonyms: dict[str, tuple[str, ...]] = synonym_table(light_stem)
        self._names: list[str] = []
        self._by_name: dict[str, int] = {}
        self._postings: dict[str, list[tuple[int, float]]] = {}

    def _field_terms(self, field: str, text: str) -> list[str]:
        split = name_words(text) if field == "name" else words(text)
        return terms(split, self._stem)

    def _query_terms(self, query: str) -> list[str]:
        return terms(words(query), self._stem)

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        """Index ``definitions`` (replacing the previous tools); see :class:`ToolIndex`."""
        check_unique(definitions)
        tags = tags or {}
        fields = list(self.field_weights)
        documents: list[dict[str, Counter[str]]] = []
        lengths: dict[str, list[int]] = {f: [] for f in fields}
        for definition in definitions:
            texts = tool_fields(definition, tags.get(definition.name, ()))
            document = {f: Counter(self._field_terms(f, texts[f])) for f in fields}
            documents.append(document)
            for f in fields:
                lengths[f].append(sum(document[f].values()))
        count = len(documents)
        average = {f: (sum(lengths[f]) / count if count else 0.0) or 1.0 for f in fields}
        # Query-independent part of BM25F, per term and document: the query only sums these.
        weighted: dict[str, dict[int, float]] = {}
        for position, document in enumerate(documents):
            for f in fields:
                weight = self.field_weights[f]
                if not weight:
                    continue
                norm = 1 - self.b + self.b * lengths[f][position] / average[f]
                for term, frequency in document[f].items():
                    row = weighted.setdefault(term, {})
                    row[position] = row.get(position, 0.0) + weight * frequency / norm
        postings: dict[str, list[tuple[int, float]]] = {}
        k1 = self.k1
        for term, row in weighted.items():
            idf = math.log(1 + (count - len(row) + 0.5) / (len(row) + 0.5))
            postings[term] = [(doc, idf * tf / (k1 + tf)) for doc, tf in row.items()]
        self._names = [d.name for d in definitions]
        self._by_name = {name: i for i, name in enumerate(self._names)}
        self._postings = postings

    def search(self, query: str, max_results: int = 5) -> list[str]:
        """Return the best-scoring tool names for ``query``; see :class:`ToolIndex`."""
        check_max_results(max_results)
        exact = self._by_name.get(query.strip())
        scores: dict[int, float] = {}
        postings = self._postings
        query_terms = dict.fromkeys(self._query_terms(query))
        for term in query_terms:
            for doc, score in postings.get(term, ()):
                scores[doc] = scores.get(doc, 0.0) + score
        weight = self._synonym_weight
        if weight:
            expanded: dict[str, None] = {}
            for term in query_terms:
                for other in self._synonyms.get(term, ()):
                    if other not in query_terms:
                        expanded[other] = None
            for term in expanded:
                for doc, score in postings.get(term, ()):
                    scores[doc] = scores.get(doc, 0.0) + weight * score
        if exact is not None:
            scores[exact] = math.inf
        # Ties keep the order the tools were indexed in.
        best = heapq.nlargest(max_results, scores, key=lambda doc: (scores[doc], -doc))
        names = self._names
        return [names[doc] for doc in best]

    def clear(self) -> None:
        """Forget every indexed tool."""
        self._names = []
        self._by_name = {}
        self._postings = {}

    def __repr__(self) -> str:
        return f"<LexicalToolIndex: {len(self._names)} tools>"
