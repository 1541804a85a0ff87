"""Stored conversations during a turn: the claim that serialises turns, and the turn's memory.

A turn claims its conversation (one conditional UPDATE) for as long as it runs, so two turns
never interleave their messages (R9). While it holds the claim, the turn is the only
writer of the conversation's messages, so its memory (:class:`TurnLog`) reads the window once,
keeps it, and appends each message with a single INSERT at the next sequence number; the
unique ``(conversation, sequence)`` constraint still guards against anyone writing past the
claim.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from tool_calling import models
from tool_calling._prepared import update_rows
from tool_calling.conf import settings as app_settings
from tool_calling.core.chat.advisors.base import (
    HIGHEST_PRECEDENCE,
    Advisor,
    AdvisorChain,
    ChatClientRequest,
    ChatClientResponse,
)
from tool_calling.core.chat.advisors.memory import MessageChatMemoryAdvisor
from tool_calling.core.chat.advisors.tool_calling import ToolCallingAdvisor
from tool_calling.core.chat.memory import ChatMemoryRepository, MessageWindowChatMemory
from tool_calling.core.chat.messages import AssistantMessage, Message
from tool_calling.exceptions import ToolCallingError
from tool_calling.repositories import (
    DjangoChatMemoryRepository,
    conversation_pk,
    message_from_columns,
    message_to_fields,
    stored_messages,
)

__all__ = [
    "ConversationBusyError",
    "ConversationTurnAdvisor",
    "TurnLog",
    "claim_conversation",
    "conversation_turn",
    "memory_advisor",
    "release_conversation",
]

logger = logging.getLogger("tool_calling.conversations")


class ConversationBusyError(ToolCallingError):
    """Another turn of the same conversation is running; retry when it has ended."""

    def __init__(self, conversation_id: object) -> None:
        super().__init__(
            f"Conversation {conversation_id} is already answering another message; "
            "send this one when that turn has ended."
        )
        self.conversation_id = conversation_id
        """The busy conversation."""


# -- the claim ----------------------------------------------------------------------------------


def claim_conversation(conversation_id: uuid.UUID | str) -> str:
    """Claim ``conversation_id`` for one turn and return the claim's token.

    The claim is one conditional UPDATE (atomic on SQLite and PostgreSQL). A claim older than
    ``CONVERSATION_TURN_TIMEOUT`` seconds is taken over: a crashed turn never blocks for good.
    A background run's claim is never taken over while the run is active: it may wait longer
    than that for an approval or its tool calls, and the sweeper keeps it moving.

    Raises:
        ConversationBusyError: another turn holds the conversation.
        Conversation.DoesNotExist: there is no such conversation.
    """
    token = uuid.uuid4().hex
    now = timezone.now()
    stale = now - datetime.timedelta(seconds=app_settings.CONVERSATION_TURN_TIMEOUT)
    held_by_a_run = models.Run.objects.filter(
        conversation_id=OuterRef("pk"),
        turn_token=OuterRef("turn_token"),
        status__in=models.RUN_ACTIVE_STATUSES,
    )
    claimed = (
        models.Conversation.objects.filter(pk=conversation_id)
        .filter(
            Q(turn_token="")
            | ((Q(turn_started_at__lt=stale) | Q(turn_started_at=None)) & ~Exists(held_by_a_run))
        )
        .update(turn_token=token, turn_started_at=now, updated_at=now)
    )
    if not claimed:
        if not models.Conversation.objects.filter(pk=conversation_id).exists():
            raise models.Conversation.DoesNotExist(f"No conversation {conversation_id}")
        raise ConversationBusyError(conversation_id)
    return token


def release_conversation(conversation_id: uuid.UUID | str, token: str) -> None:
    """End the claim ``token`` (nothing happens if another turn took the conversation over).

    Also records the end of the turn as the conversation's last activity (lists sort by it).
    """
    if token:
        # Every turn's: the UPDATE written once.
        update_rows(
            models.Conversation,
            {"pk": conversation_id, "turn_token": token},
            {"turn_token": "", "turn_started_at": None, "updated_at": timezone.now()},
        )


@contextmanager
def conversation_turn(conversation_id: uuid.UUID | str) -> Iterator[None]:
    """Hold ``conversation_id`` for one turn, so two turns never interleave their messages.

    See :func:`claim_conversation`; the claim ends with the block.

    Raises:
        ConversationBusyError: another turn holds the conversation.
    """
    token = claim_conversation(conversation_id)
    try:
        yield
    finally:
        release_conversation(conversation_id, token)


class ConversationTurnAdvisor(Advisor):
    """Outermost advisor of governed turns: holds the conversation for the whole turn.

    With the turn's ``log``, each turn starts it afresh once the claim is held, so a client
    used for several turns never serves one turn's memory to the next.
    """

    order = HIGHEST_PRECEDENCE

    def __init__(self, conversation_id: uuid.UUID | str, log: TurnLog | None = None) -> None:
        self.conversation_id = conversation_id
        self.log = log

    @contextmanager
    def _turn(self) -> Iterator[None]:
        with conversation_turn(self.conversation_id):
            if self.log is not None:
                self.log.reset()
            yield

    def advise_call(self, request: ChatClientRequest, chain: AdvisorChain) -> ChatClientResponse:
        """Run the turn while holding the conversation."""
        with self._turn():
            return chain.next_call(request)

    def advise_stream(
        self, request: ChatClientRequest, chain: AdvisorChain
    ) -> Iterator[ChatClientResponse]:
        """Stream the turn while holding the conversation (released when the stream ends)."""
        with self._turn():
            yield from chain.next_stream(request)


# -- the turn's memory --------------------------------------------------------------------------


class TurnLog(ChatMemoryRepository):
    """The messages of one conversation as one claimed turn reads and writes them.

    The first read loads the newest messages (the window) and keeps them with their sequence
    numbers; later reads of the turn are served from what it holds, and each append is one
    INSERT at the next sequence number. Should another writer have appended meanwhile (the
    claim was taken over), the INSERT breaks the unique sequence constraint and the log falls
    back to :class:`DjangoChatMemoryRepository`'s locking append, reading again afterwards.

    A log serves one conversation; :meth:`reset` it when a new turn starts (the
    ``ConversationTurnAdvisor`` given it does).
    """

    def __init__(self, conversation_id: uuid.UUID | str) -> None:
        self.conversation_id = conversation_pk(conversation_id)
        """The conversation this log reads and writes."""
        self.last_assistant_id: int | None = None
        """The ``Message`` id of the newest assistant message read or stored through this log."""
        self.last_sequence: int | None = None
        """The sequence number of the newest message stored through this log."""
        self._rows: list[tuple[int, int, Message]] | None = None
        self._stored: list[models.Message] = []
        self._loaded = 0
        self._complete = False
        self._end: int | None = None

    def reset(self) -> None:
        """Forget what was read: the next read loads the window again."""
        self._rows = None
        self._end = None
        self.last_assistant_id = None
        self.last_sequence = None

    def observe(self, rows: Sequence[models.Message]) -> None:
        """Take note of the conversation's newest rows, read by the caller (in order).

        Appends then need no read first. ``rows`` must end with the conversation's last
        message, as a turn that holds the claim sees it.
        """
        if rows:
            self._end = rows[-1].sequence
            for row in reversed(rows):
                if row.role == models.MessageRole.ASSISTANT:
                    self.last_assistant_id = row.pk
                    break

    def _check(self, conversation_id: str | uuid.UUID) -> None:
        if conversation_pk(conversation_id) != self.conversation_id:
            raise ValueError(
                f"This TurnLog holds conversation {self.conversation_id}, not {conversation_id}."
            )

    def _load(self, limit: int | None) -> list[tuple[int, int, Message]]:
        rows = models.Message.objects.filter(conversation_id=self.conversation_id)
        if limit:
            latest = list(stored_messages(rows.order_by("-sequence"), "pk", "sequence")[:limit])
            latest.reverse()
        else:
            latest = list(stored_messages(rows.order_by("sequence"), "pk", "sequence"))
        loaded = [(pk, sequence, message_from_columns(*rest)) for pk, sequence, *rest in latest]
        self._rows = loaded
        self._loaded = limit or 0
        self._complete = not limit or len(loaded) < limit
        # The newest rows end the conversation: their last sequence is its end (0 if empty).
        self._end = loaded[-1][1] if loaded else 0
        for pk, _, message in reversed(loaded):
            if isinstance(message, AssistantMessage):
                self.last_assistant_id = pk
                break
        return loaded

    def find_conversation_ids(self) -> list[str]:
        """The one conversation this log holds."""
        return [str(self.conversation_id)]

    def find_by_conversation_id(
        self, conversation_id: str, limit: int | None = None
    ) -> list[Message]:
        """The conversation's newest ``limit`` messages, read from the database once a turn."""
        self._check(conversation_id)
        rows = self._rows
        enough = rows is not None and (
            self._complete or (limit is not None and 0 < limit <= self._loaded)
        )
        if not enough:
            rows = self._load(limit)
        assert rows is not None
        selected = rows[-limit:] if limit else rows
        return [message for _, _, message in selected]

    def add(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Append ``messages``: one INSERT at the next sequence numbers."""
        self._check(conversation_id)
        if not messages:
            return
        end = self._end
        if end is None:
            # Where the conversation ends is not known yet: lock and append.
            self._locked_add(messages)
            return
        new = [
            models.Message(conversation_id=self.conversation_id, sequence=end + n, **fields)
            for n, fields in enumerate((message_to_fields(m) for m in messages), start=1)
        ]
        try:
            if transaction.get_connection().in_atomic_block:
                # A failed INSERT must not break the caller's transaction (PostgreSQL).
                with transaction.atomic():
                    created = models.Message.objects.bulk_create(new)
            elif len(new) == 1:
                # One row needs no transaction of its own: a single autocommitted INSERT.
                new[0].save(force_insert=True)
                created = new
            else:
                created = models.Message.objects.bulk_create(new)
        except IntegrityError:
            logger.warning(
                "Conversation %s gained messages outside its turn; appending with a lock",
                self.conversation_id,
            )
            self._locked_add(messages)
            return
        self._remember(created, messages)

    def _locked_add(self, messages: Sequence[Message]) -> None:
        created = DjangoChatMemoryRepository().append(self.conversation_id, messages)
        # Messages may have been appended by others since the window was read: read it again.
        self._rows = None
        self._remember(created, messages)

    def take_stored(self) -> list[models.Message]:
        """The rows stored through this log since the last call (in order), then forgets them."""
        stored, self._stored = self._stored, []
        return stored

    def _remember(self, created: Sequence[models.Message], messages: Sequence[Message]) -> None:
        self._stored.extend(created)
        for row, message in zip(created, messages, strict=True):
            if self._rows is not None:
                self._rows.append((row.pk, row.sequence, message))
            if isinstance(message, AssistantMessage):
                self.last_assistant_id = row.pk
            self.last_sequence = self._end = row.sequence

    def save_all(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Replace the conversation's messages (read again afterwards)."""
        self._check(conversation_id)
        DjangoChatMemoryRepository().save_all(conversation_id, messages)
        self.reset()

    def delete_by_conversation_id(self, conversation_id: str) -> None:
        """Delete the conversation's messages."""
        self._check(conversation_id)
        DjangoChatMemoryRepository().delete_by_conversation_id(conversation_id)
        self.reset()


def memory_advisor(log: TurnLog) -> MessageChatMemoryAdvisor:
    """The memory advisor of governed turns: inside the tool loop, so every step is stored."""
    return MessageChatMemoryAdvisor(
        MessageWindowChatMemory(log, max_messages=app_settings.MEMORY_MAX_MESSAGES),
        order=ToolCallingAdvisor.order + 1,
        conversation_id=str(log.conversation_id),
    )
