"""Sessions and their messages.

Invariants kept by the database, not by callers:

* ``Message.global_offset`` is unique within a session; offsets are handed out by
  ``services.session_allocate_offsets`` with one conditional ``UPDATE`` on
  ``Session.last_message_offset``, so concurrent writers never collide.
* ``(user, client_id)`` is unique for messages with a non-empty ``client_id``: the client's
  idempotency key is data, and a second ``message.send`` with the same key cannot insert.
* ``Session.status`` only moves along ``SESSION_TRANSITIONS`` (see ``services.session_transition``).
* Soft deletion sets ``deleted_at``; such sessions are invisible to every selector.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class SessionStatus(models.TextChoices):
    ACTIVE = "active"
    IDLE = "idle"
    CLOSED = "closed"


class WorkMode(models.TextChoices):
    MANUAL = "manual"
    EDIT = "edit"
    PLAN = "plan"
    AUTO = "auto"
    BYPASS = "bypass"


# active <-> idle (a turn starts / ends), either -> closed (archive), closed -> idle (reopen).
SESSION_TRANSITIONS: dict[str, frozenset[str]] = {
    SessionStatus.ACTIVE: frozenset({SessionStatus.IDLE, SessionStatus.CLOSED}),
    SessionStatus.IDLE: frozenset({SessionStatus.ACTIVE, SessionStatus.CLOSED}),
    SessionStatus.CLOSED: frozenset({SessionStatus.IDLE}),
}


class Session(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions"
    )
    client_session_id = models.CharField(max_length=128, blank=True, default="")
    title = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(
        max_length=16, choices=SessionStatus.choices, default=SessionStatus.IDLE
    )
    work_mode = models.CharField(max_length=16, choices=WorkMode.choices, default=WorkMode.EDIT)
    device_id = models.CharField(max_length=128, blank=True, default="")
    agent_prompt = models.TextField(blank=True, default="")
    todo_list = models.JSONField(default=list, blank=True)
    # Functions of the embedding page ({name, description, parameters, class}), offered to the
    # model next to the built-in browser tools; refreshed by every message.send that names them.
    host_functions = models.JSONField(default=list, blank=True)

    # Sub-agent lineage: all empty for a root session.
    parent_session = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    root_session = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    sub_agent_parent_message = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    # Highest global_offset handed out so far (the next message gets this + 1).
    last_message_offset = models.PositiveIntegerField(default=0)

    # Token accounting (totals over the session's life).
    total_input_tokens = models.BigIntegerField(default=0)
    total_output_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    total_cached_read_tokens = models.BigIntegerField(default=0)
    total_cached_write_tokens = models.BigIntegerField(default=0)
    total_reasoning_tokens = models.BigIntegerField(default=0)
    total_cost_usd = models.FloatField(default=0.0)
    last_token_update_at = models.DateTimeField(null=True, blank=True)

    # Context compression (written by the engine after each round and each compaction).
    current_context_tokens = models.BigIntegerField(default=0)
    compression_threshold = models.BigIntegerField(default=0)
    compression_progress = models.FloatField(default=0.0)
    rounds_until_compression = models.IntegerField(default=0)
    estimated_next_round_tokens = models.BigIntegerField(default=0)

    closed_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # session.list: newest first, keyset on (updated_at, id).
            models.Index(fields=["user", "-updated_at", "-id"], name="session_user_recent"),
            models.Index(fields=["user", "client_session_id"], name="session_user_client"),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class ContentType(models.TextChoices):
    MARKDOWN = "markdown"
    TEXT = "text"
    THINKING = "thinking"
    SUMMARY = "summary"
    TOOLCALL_INPUT = "toolcall_input"
    TOOLCALL_OUTPUT = "toolcall_output"
    USER_MESSAGE = "user_message"
    ERROR = "error"
    PROMPT = "prompt"


class StreamingStatus(models.TextChoices):
    PENDING = "pending"
    STREAMING = "streaming"
    COMPLETED = "completed"
    FAILED = "failed"


class Message(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_messages"
    )
    client_id = models.CharField(max_length=128, blank=True, default="")
    global_offset = models.PositiveIntegerField()
    turn = models.ForeignKey(
        "turns.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    turn_offset = models.PositiveIntegerField(default=0)
    parent_message = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    # {"type": ContentType, "data": ...}; shape checked by services.validate_content.
    content = models.JSONField(default=dict)
    streaming_status = models.CharField(
        max_length=16, choices=StreamingStatus.choices, default=StreamingStatus.COMPLETED
    )
    input_tokens = models.IntegerField(default=0)
    output_tokens = models.IntegerField(default=0)
    total_tokens = models.IntegerField(default=0)
    cached_tokens = models.IntegerField(default=0)
    reasoning_tokens = models.IntegerField(default=0)
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "global_offset"], name="message_session_offset"
            ),
            models.UniqueConstraint(
                fields=["user", "client_id"],
                condition=~Q(client_id=""),
                name="message_user_client_id",
            ),
        ]
        indexes = [
            models.Index(fields=["turn", "turn_offset"], name="message_turn_offset"),
            # the latest summary of a session, where a prompt starts (``conversation.load``)
            models.Index(fields=["session", "global_offset"], name="message_summary",
                         condition=Q(content__type="summary")),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.global_offset} {self.role}"

    @property
    def content_type(self) -> str:
        return str((self.content or {}).get("type", ""))
