"""ToolResult: a tool's answer with content blocks or structured data, still text for the model.

A tool that returns only text returns a ``str``. One that has more to give (an image, audio, an
embedded resource, a JSON value for a program to read) returns a :class:`ToolResult`. It *is* a
``str`` (the text the model sees, as ``django.utils.safestring.SafeString`` is a ``str`` that
carries one more fact), so every path that handles a tool's text (limits, audit, memory, the
model) keeps working unchanged, while an MCP client gets the blocks and the structured value.

What survives where: the blocks travel with the value in the process that ran the tool; a
copy of the text (truncated, stored, sent to a Celery worker and back) is plain text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

__all__ = [
    "AudioBlock",
    "ContentBlock",
    "ImageBlock",
    "InputRequired",
    "ResourceBlock",
    "TextBlock",
    "ToolResult",
]


@dataclass(frozen=True)
class TextBlock:
    """A piece of text."""

    text: str
    """The text."""

    def model_text(self) -> str:
        """What the model reads for this block: the text itself."""
        return self.text


@dataclass(frozen=True)
class _EncodedBlock:
    """Bytes carried base64-encoded, with their media type (an image's or a sound's)."""

    data: str
    """The bytes, base64-encoded."""
    mime_type: str
    """Their media type (``image/png``, ``audio/wav``, ...)."""

    _kind = ""
    """What the model is told the bytes are."""

    @classmethod
    def from_bytes(cls: type[_B], raw: bytes, mime_type: str) -> _B:
        """A block of ``raw`` bytes."""
        return cls(base64.b64encode(raw).decode("ascii"), mime_type)

    def model_text(self) -> str:
        """What the model reads for this block: a short note, never the bytes."""
        return f"[{self._kind} {self.mime_type}, {_decoded_size(self.data)} bytes]"


_B = TypeVar("_B", bound=_EncodedBlock)


@dataclass(frozen=True)
class ImageBlock(_EncodedBlock):
    """An image, base64-encoded."""

    _kind = "image"


@dataclass(frozen=True)
class AudioBlock(_EncodedBlock):
    """A sound, base64-encoded."""

    _kind = "audio"


@dataclass(frozen=True)
class ResourceBlock:
    """A resource embedded in the result: its URI and either its text or its bytes."""

    uri: str
    """The resource's URI."""
    mime_type: str | None = None
    """Its media type, if known."""
    text: str | None = None
    """Its content, when it is text."""
    blob: str | None = None
    """Its content, base64-encoded, when it is binary."""

    def __post_init__(self) -> None:
        if (self.text is None) == (self.blob is None):
            raise ValueError(
                f"ResourceBlock {self.uri!r}: give exactly one of text and blob, not "
                f"{'both' if self.text is not None else 'neither'}."
            )

    def model_text(self) -> str:
        """What the model reads for this block: the text, or a note for binary content."""
        if self.text is not None:
            return self.text
        assert self.blob is not None
        kind = self.mime_type or "binary"
        return f"[resource {self.uri} ({kind}, {_decoded_size(self.blob)} bytes)]"


ContentBlock = TextBlock | ImageBlock | AudioBlock | ResourceBlock
"""One block of a :class:`ToolResult`."""


def _decoded_size(data: str) -> int:
    padding = data[-2:].count("=") if data else 0
    return len(data) * 3 // 4 - padding


class ToolResult(str):
    """A tool's answer: the text the model sees, plus content blocks and structured data.

    The string value is what the model reads: the blocks' texts joined by newlines (a binary
    block as a short note such as ``[image image/png, 68 bytes]``, never its bytes), or, with
    no block, the structured value as compact JSON. An MCP client gets the blocks as
    ``content`` and the structured value as ``structuredContent``.

    Args:
        *content: The blocks, in order (a ``str`` is a :class:`TextBlock`).
        structured: A JSON value for programs (MCP's ``structuredContent``).
        text: The model's text instead of the one derived from the blocks.

    Raises:
        TypeError: a block is not a content block, or ``structured`` is not JSON.
    """

    content: tuple[ContentBlock, ...]
    """The content blocks, in order."""
    structured: Any
    """The structured value (``None``: none)."""

    def __new__(
        cls,
        *content: ContentBlock | str,
        structured: Any = None,
        text: str | None = None,
    ) -> ToolResult:
        """Build the result (see the class docstring)."""
        blocks = tuple(TextBlock(b) if isinstance(b, str) else b for b in content)
        for block in blocks:
            if not isinstance(block, (TextBlock, ImageBlock, AudioBlock, ResourceBlock)):
                raise TypeError(
                    f"ToolResult content must be TextBlock, ImageBlock, AudioBlock, "
                    f"ResourceBlock or str, got {type(block).__name__}."
                )
        encoded = None
        if structured is not None:
            try:
                encoded = json.dumps(structured, separators=(",", ":"), ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"ToolResult structured must be a JSON value: {exc}") from exc
        if text is None:
            if blocks:
                text = "\n".join(block.model_text() for block in blocks)
            else:
                text = encoded or ""
        self = super().__new__(cls, text)
        self.content = blocks
        self.structured = structured
        return self

    def __reduce__(self) -> Any:
        return (_rebuild, (str(self), self.content, self.structured))

    def __repr__(self) -> str:
        return (
            f"ToolResult({str(self)!r}, content={list(self.content)!r}, "
            f"structured={self.structured!r})"
        )


def _rebuild(text: str, content: tuple[ContentBlock, ...], structured: Any) -> ToolResult:
    return ToolResult(*content, structured=structured, text=text)


_NEEDS = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


class InputRequired(ToolResult):
    """A tool's answer that it cannot finish before the client's user gives some input.

    Over MCP (revision 2026-07-28) the client gets an ``input_required`` result with these
    requests, gathers the answers (a form the user fills in, a completion of its model, its
    roots) and calls the tool again with them, readable through
    :attr:`ToolContext.input_responses`. ``request_state`` comes back with them
    (:attr:`ToolContext.request_state`), sealed by the server on the way out and checked on
    the way in, so the client can neither read nor change it. A model's turn cannot ask
    anyone: the model reads the text, which says what was needed.

    Args:
        input_requests: Key -> request, as MCP writes them: build them with
            :meth:`elicitation`, :meth:`sampling` and :meth:`roots`.
        request_state: Text the tool wants back with the answers (its progress so far).

    Raises:
        ValueError: no request, or a request whose method is not one of the three.
    """

    input_requests: dict[str, dict[str, Any]]
    """The requests, by the key their answers come back under."""
    request_state: str | None
    """What the tool wants back with the answers."""

    def __new__(
        cls,
        input_requests: Mapping[str, Mapping[str, Any]],
        *,
        request_state: str | None = None,
    ) -> InputRequired:
        """Build the answer (see the class docstring)."""
        requests = {key: dict(request) for key, request in input_requests.items()}
        if not requests:
            raise ValueError("InputRequired needs at least one input request.")
        for key, request in requests.items():
            if request.get("method") not in _NEEDS:
                raise ValueError(
                    f"InputRequired request {key!r}: method must be one of "
                    f"{sorted(_NEEDS)}, got {request.get('method')!r}."
                )
        wanted = "; ".join(_describe(request) for request in requests.values())
        text = f"The tool needs input before it can finish: {wanted}"
        self = cast("InputRequired", super().__new__(cls, text=text))
        self.input_requests = requests
        self.request_state = request_state
        return self

    @staticmethod
    def elicitation(message: str, requested_schema: Mapping[str, Any]) -> dict[str, Any]:
        """A request for the user to fill in a form (``requested_schema``: flat JSON Schema)."""
        return {
            "method": "elicitation/create",
            "params": {"message": message, "requestedSchema": dict(requested_schema)},
        }

    @staticmethod
    def sampling(prompt: str, max_tokens: int) -> dict[str, Any]:
        """A request for a completion of ``prompt`` by the client's model."""
        return {
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                "maxTokens": max_tokens,
            },
        }

    @staticmethod
    def roots() -> dict[str, Any]:
        """A request for the client's roots (the folders it lets servers see)."""
        return {"method": "roots/list", "params": {}}

    @staticmethod
    def capability(request: Mapping[str, Any]) -> str:
        """The client capability ``request`` needs (``elicitation``, ``sampling``, ``roots``)."""
        return _NEEDS[request["method"]]

    def __reduce__(self) -> Any:
        return (_rebuild_input_required, (self.input_requests, self.request_state))

    def __repr__(self) -> str:
        return f"InputRequired({self.input_requests!r}, request_state={self.request_state!r})"


def _describe(request: Mapping[str, Any]) -> str:
    params = request.get("params") or {}
    if request["method"] == "elicitation/create":
        return str(params.get("message") or "a form for the user")
    if request["method"] == "sampling/createMessage":
        return "a completion by the client's model"
    return "the client's roots"


def _rebuild_input_required(
    input_requests: dict[str, dict[str, Any]], request_state: str | None
) -> InputRequired:
    return InputRequired(input_requests, request_state=request_state)
