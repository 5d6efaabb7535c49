"""Wire shape of a turn (``docs/protocol.md`` §6.3) as an ``apps.gateway.wire`` schema."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway import wire
from apps.gateway.wire import Id, RefId, Timestamp, WireSerializer

from .models import Turn, TurnStatus


@wire.entity("turn")
class TurnSerializer(WireSerializer):
    """api.yaml's ``Turn``, plus its trigger message, token usage and ``updated_at``."""

    id = Id()
    client_id = serializers.CharField(allow_blank=True)
    session_id = Id()
    status = serializers.ChoiceField(choices=TurnStatus.choices)
    trigger_message_id = RefId()
    error_message = serializers.CharField(allow_blank=True)
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField()
    reasoning_tokens = serializers.IntegerField()
    created_at = Timestamp()
    updated_at = Timestamp()
    started_at = Timestamp(allow_null=True)
    completed_at = Timestamp(allow_null=True)
    deleted_at = Timestamp(allow_null=True)


def turn_to_dict(turn: Turn) -> dict[str, Any]:
    return TurnSerializer.render(turn)
