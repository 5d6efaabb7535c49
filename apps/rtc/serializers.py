"""Wire shape of a remote tool call (``docs/protocol.md`` §6.4) as an ``apps.gateway.wire``
schema."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway import wire
from apps.gateway.wire import Id, RefId, Timestamp, WireSerializer

from .models import Rtc, RtcStatus


@wire.entity("rtc")
class RtcSerializer(WireSerializer):
    """api.yaml's ``Rtc``, plus ``tool_call_id``, ``needs_approval``, ``deadline``, ``sent_at``
    and ``started_at``. ``message_id`` is the ``toolcall_input`` message, ``output_message_id``
    the ``toolcall_output`` one ("" until the turn recorded what the model was told)."""

    id = Id()
    client_id = serializers.CharField(allow_blank=True)
    session_id = Id()
    turn_id = Id()
    message_id = RefId()
    output_message_id = RefId()
    offset = serializers.IntegerField(min_value=0)
    tool_call_id = serializers.CharField(allow_blank=True)
    tool_name = serializers.CharField()
    parameters = wire.JSONObject()
    status = serializers.ChoiceField(choices=RtcStatus.choices)
    needs_approval = serializers.BooleanField()
    result = serializers.JSONField(allow_null=True)
    error_message = serializers.CharField(allow_blank=True)
    deadline = Timestamp(allow_null=True)
    created_at = Timestamp()
    updated_at = Timestamp()
    sent_at = Timestamp(allow_null=True)
    started_at = Timestamp(allow_null=True)
    completed_at = Timestamp(allow_null=True)
    deleted_at = Timestamp(allow_null=True)


def rtc_to_dict(rtc: Rtc) -> dict[str, Any]:
    return RtcSerializer.render(rtc)
