"""The ``goal`` and ``loop`` entities of the Updates (``docs/tasks.md``), as wire schemas.

``goal {id, session_id, condition, status, rounds, max_rounds, created_at, updated_at}`` and
``loop {id, session_id, prompt, interval_seconds, max_runs, runs, status, next_run_at,
created_at, updated_at}`` (``next_run_at`` is ``null`` once the loop ended). RPC replies carry
the same shapes.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway import wire
from apps.gateway.wire import Id, Timestamp, WireSerializer

from .models import Goal, GoalStatus, Loop, LoopStatus

__all__ = ["GoalSerializer", "LoopSerializer", "goal_to_dict", "loop_to_dict"]


@wire.entity("goal")
class GoalSerializer(WireSerializer):
    """A session's goal: the condition the agent works towards, and how far it got."""

    id = Id()
    session_id = Id()
    condition = serializers.CharField()
    status = serializers.ChoiceField(choices=GoalStatus.choices)
    rounds = serializers.IntegerField(min_value=0)
    max_rounds = serializers.IntegerField(min_value=1)
    created_at = Timestamp()
    updated_at = Timestamp()


@wire.entity("loop")
class LoopSerializer(WireSerializer):
    """A recurring prompt of a session."""

    id = Id()
    session_id = Id()
    prompt = serializers.CharField()
    interval_seconds = serializers.IntegerField(min_value=1)
    max_runs = serializers.IntegerField(min_value=1)
    runs = serializers.IntegerField(min_value=0)
    status = serializers.ChoiceField(choices=LoopStatus.choices)
    next_run_at = Timestamp(allow_null=True)
    created_at = Timestamp()
    updated_at = Timestamp()


def goal_to_dict(goal: Goal) -> dict[str, Any]:
    return GoalSerializer.render(goal)


def loop_to_dict(loop: Loop) -> dict[str, Any]:
    return LoopSerializer.render(loop)
