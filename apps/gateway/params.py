"""Validation of RPC params with DRF serializers, mapped to ``InvalidRequest``."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from rtcagent.errors import InvalidRequest
from rtcagent.jsonsafety import check_json


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        out: list[str] = []
        for key, value in detail.items():
            name = key if key != "non_field_errors" else ""
            out += _flatten(value, f"{prefix}{name}." if name else prefix)
        return out
    if isinstance(detail, list):
        return [m for item in detail for m in _flatten(item, prefix)]
    return [f"{prefix.rstrip('.')}: {detail}" if prefix else str(detail)]


def validate(serializer_class: type[serializers.Serializer], params: Any) -> dict[str, Any]:
    """Return the validated data of ``params`` or raise ``InvalidRequest`` naming each field.

    Every RPC's params pass ``check_json`` first (depth and NUL), so nothing that could not be
    stored or sent back out reaches a service.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequest("params must be a JSON object")
    check_json(params, what="params")
    ser = serializer_class(data=params)
    if not ser.is_valid():
        raise InvalidRequest("; ".join(_flatten(ser.errors)))
    return dict(ser.validated_data)
