"""Session memory and user memory.

* ``UserMemory``: what the agent keeps about a user across sessions (categories user, feedback,
  project, reference; importance low to critical). Saved, changed and deleted by the agent's
  memory tools, by the user (``/api/memories``) and by operators (the admin). Found by full-text
  search: a GIN index on ``to_tsvector('simple', content)`` on PostgreSQL, an FTS5 table kept in
  step by triggers on SQLite (migration ``0002_fulltext``; ``search.py`` queries both).
* ``SessionMemory``: notes about one session (decision, context, progress, issue, learnings),
  written by the background extraction pass and by the agent; at most ``SESSION_MAX_ENTRIES``
  and ``SESSION_MAX_TOKENS`` per session, the oldest evicted (``services.session_memory_add``).
* ``ExtractionState``: where the last extraction of a session stopped (the last message it saw
  and the context size then), so the trigger measures growth since then.

Integer ids: the model names memories in tool calls (``deleteMemory {"id": 42}``), and short
numbers are what it copies back reliably; ownership is checked on every access.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class UserCategory(models.TextChoices):
    USER = "user"  # who the user is: role, expertise, preferences
    FEEDBACK = "feedback"  # how the user wants the agent to work
    PROJECT = "project"  # ongoing work, goals, constraints
    REFERENCE = "reference"  # pointers to outside resources


class Importance(models.TextChoices):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


# Retrieval weights (the original's): a match's score is its matched words times this.
IMPORTANCE_WEIGHT: dict[str, float] = {
    Importance.CRITICAL: 1.5,
    Importance.HIGH: 1.3,
    Importance.MEDIUM: 1.0,
    Importance.LOW: 0.7,
}
# Eviction order (lowest first) and the pinned set (always in the prompt).
IMPORTANCE_RANK: dict[str, int] = {
    Importance.LOW: 0, Importance.MEDIUM: 1, Importance.HIGH: 2, Importance.CRITICAL: 3,
}
PINNED_IMPORTANCE = (Importance.CRITICAL, Importance.HIGH)


class SessionCategory(models.TextChoices):
    DECISION = "decision"
    CONTEXT = "context"
    PROGRESS = "progress"
    ISSUE = "issue"
    LEARNINGS = "learnings"


class MemorySource(models.TextChoices):
    AGENT = "agent"  # a memory tool call
    EXTRACTION = "extraction"  # the background pass
    USER = "user"  # the user, through the API
    OPERATOR = "operator"  # the admin


class UserMemory(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories"
    )
    category = models.CharField(max_length=16, choices=UserCategory.choices)
    importance = models.CharField(
        max_length=16, choices=Importance.choices, default=Importance.MEDIUM
    )
    content = models.TextField()
    # The session it was saved in (kept when that session is deleted: the memory outlives it).
    session = models.ForeignKey(
        "agent_sessions.Session", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    source = models.CharField(max_length=16, choices=MemorySource.choices,
                              default=MemorySource.AGENT)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "user memory"
        verbose_name_plural = "user memories"
        indexes = [
            # The API's list (newest change first, keyset on (updated_at, id)).
            models.Index(fields=["user", "-updated_at", "-id"], name="memory_user_recent"),
            # The pinned block (critical and high) and eviction (lowest importance first).
            models.Index(fields=["user", "importance", "created_at"], name="memory_user_imp"),
        ]

    def __str__(self) -> str:
        return f"{self.importance}/{self.category}: {self.content[:60]}"


class SessionMemory(models.Model):
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="memories"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="session_memories"
    )
    category = models.CharField(max_length=16, choices=SessionCategory.choices)
    content = models.TextField()
    tokens = models.PositiveIntegerField(default=0)  # of ``content``, for the budgets
    source = models.CharField(max_length=16, choices=MemorySource.choices,
                              default=MemorySource.AGENT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "session memory"
        verbose_name_plural = "session memories"
        indexes = [models.Index(fields=["session", "id"], name="memory_session_order")]

    def __str__(self) -> str:
        return f"{self.category}: {self.content[:60]}"


class ExtractionState(models.Model):
    """The background extraction's bookmark in one session."""

    session = models.OneToOneField(
        "agent_sessions.Session", on_delete=models.CASCADE, primary_key=True,
        related_name="+",
    )
    last_offset = models.PositiveIntegerField(default=0)  # last message global_offset seen
    last_tokens = models.BigIntegerField(default=0)  # context size at the last extraction
    runs = models.PositiveIntegerField(default=0)
    # A failed call is retried after this (the next trigger before it is ignored).
    retry_after = models.DateTimeField(null=True, blank=True)
    extracted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"extraction of {self.session_id}"
