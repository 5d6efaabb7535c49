"""The durable topic stream: one row per publication on ``topic:u=<id>``.

PostgreSQL is the source of truth for history; Redis only allocates offsets and rings the bell.
``(user, epoch, offset)`` is unique: a rolled-back allocation is later filled with a ``gap`` row,
and the unique index is what makes that fill wait for (and lose to) a transaction that is still
committing the real row.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class TopicEvent(models.Model):
    class Kind(models.TextChoices):
        UPDATE = "update"
        GAP = "gap"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    epoch = models.CharField(max_length=32)
    offset = models.BigIntegerField()
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.UPDATE)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "epoch", "offset"], name="topic_event_position")
        ]

    def __str__(self) -> str:
        return f"topic:u={self.user_id} {self.epoch}/{self.offset} {self.kind}"

    def publication(self) -> dict:
        """The Centrifuge publication ``data`` for this row."""
        if self.kind == self.Kind.GAP:
            return {"type": "gap", "data": {}}
        return self.data
