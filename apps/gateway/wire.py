"""Wire schemas: the shape of every RPC reply and every Update, written once as DRF serializers.

The same classes are used twice, so the code and its contract cannot drift apart:

* **to render.** Entities are rendered by their serializers (``apps/*/serializers.py``) and each
  RPC handler's return value by its reply schema (``@replies``), so a reply has exactly the
  schema's keys: a missing one raises, an unknown one is never sent.
* **to check.** ``check(schema, value)`` validates decoded JSON strictly: every declared field is
  present (unless declared ``required=False``), no other key, JSON types without coercion
  (``"5"`` is no integer, ``1`` no boolean), timestamps ISO 8601 in UTC with ``Z``, ids canonical
  UUID strings. ``tests/test_wire_schemas.py`` checks every method's reply and every Update of a
  real turn with it; the engine checks the content it writes (``WireSerializer.make``).

Polymorphic values (an Update's ``data_list``, a message's ``content.data``) are dispatched by a
serializer's ``check_value`` hook. Field classes: ``Id`` (UUID), ``RefId`` (UUID or ``""`` for
"none"), ``Timestamp`` (``null`` only with ``allow_null``), ``Derived`` (computed from the object)
and DRF's own ``CharField``, ``IntegerField``, ``FloatField``, ``BooleanField``, ``ChoiceField``,
``JSONField``, ``ListField`` and nested serializers.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers

_UTC_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")


class WireError(ValueError):
    """A value does not match its wire schema; ``path`` names the offending place."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC, ``Z`` suffix; ``None`` stays ``None``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _is_uuid(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False


class Id(serializers.UUIDField):
    """A UUID, as its canonical lower-case string."""


class RefId(serializers.CharField):
    """A reference to another entity: its UUID, or ``""`` when there is none (never ``null``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, **kwargs)

    def get_attribute(self, instance: Any) -> Any:
        value = super().get_attribute(instance)
        return "" if value is None else str(value)


class Timestamp(serializers.DateTimeField):
    """A datetime as ISO 8601 in UTC with ``Z`` (``null`` only with ``allow_null``)."""

    def to_representation(self, value: Any) -> str | None:
        return iso(value)


class Derived(serializers.Field):
    """A field computed from the whole object by ``fn``; checked like the field ``like``."""

    def __init__(self, fn: Callable[[Any], Any], *, like: serializers.Field) -> None:
        super().__init__(source="*", read_only=True)
        self.fn, self.like = fn, like

    def to_representation(self, value: Any) -> Any:
        return self.fn(value)


class JSONObject(serializers.JSONField):
    """Any JSON object (its keys are not part of the schema)."""


class WireSerializer(serializers.Serializer):
    """A wire shape. ``open`` schemas accept keys they do not declare (content stored as given)."""

    open = False

    @classmethod
    def shared(cls) -> WireSerializer:
        """One shared instance (DRF copies the declared fields for every new instance)."""
        inst = cls.__dict__.get("_shared")
        if inst is None:
            inst = cls()
            cls._shared = inst
        return inst

    @classmethod
    def render(cls, value: Any) -> dict[str, Any]:
        return cls.shared().to_representation(value)

    @classmethod
    def make(cls, **values: Any) -> dict[str, Any]:
        """``values`` as a dict after a strict check (for data the server writes itself)."""
        check(cls, values)
        return values

    def check_value(self, value: dict[str, Any], path: str) -> None:
        """Checks beyond the fields (hook for polymorphic values)."""


def shape(name: str, **fields: serializers.Field) -> WireSerializer:
    """An anonymous wire shape with these fields (an instance)."""
    return type(name, (WireSerializer,), dict(fields))()


def _optional(field: serializers.Field) -> bool:
    return not field.read_only and not field.required


def check(schema: Any, value: Any, path: str = "$") -> None:
    """Raise ``WireError`` unless ``value`` (decoded JSON) matches ``schema`` exactly."""
    if isinstance(schema, type):
        schema = schema.shared() if issubclass(schema, WireSerializer) else schema()
    if isinstance(schema, Derived):
        return check(schema.like, value, path)
    if value is None:
        if getattr(schema, "allow_null", False) or isinstance(schema, serializers.JSONField):
            return
        raise WireError(path, "null is not allowed")
    if isinstance(schema, serializers.ListSerializer | serializers.ListField):
        if not isinstance(value, list):
            raise WireError(path, f"expected an array, got {type(value).__name__}")
        for i, v in enumerate(value):
            check(schema.child, v, f"{path}[{i}]")
    elif isinstance(schema, serializers.Serializer):
        if not isinstance(value, dict):
            raise WireError(path, f"expected an object, got {type(value).__name__}")
        fields = schema.fields
        unknown = sorted(set(value) - set(fields))
        if unknown and not getattr(schema, "open", False):
            raise WireError(path, f"unknown field(s) {', '.join(unknown)}")
        for name, field in fields.items():
            if name in value:
                check(field, value[name], f"{path}.{name}")
            elif not _optional(field):
                raise WireError(path, f"missing field {name}")
        schema.check_value(value, path)
    else:
        _check_scalar(schema, value, path)


def _check_scalar(field: serializers.Field, value: Any, path: str) -> None:
    def fail(expected: str) -> None:
        raise WireError(path, f"expected {expected}, got {value!r}"[:300])

    if isinstance(field, JSONObject):
        if not isinstance(value, dict):
            fail("an object")
    elif isinstance(field, serializers.JSONField):
        _check_json(value, path)
    elif isinstance(field, serializers.BooleanField):
        if not isinstance(value, bool):
            fail("a boolean")
    elif isinstance(field, serializers.ChoiceField):
        if not isinstance(value, str) or value not in field.choices:
            fail(f"one of {sorted(field.choices)}")
    elif isinstance(field, Timestamp):
        if not isinstance(value, str) or not _UTC_ISO.match(value):
            fail("an ISO 8601 UTC time ending in Z")
    elif isinstance(field, serializers.UUIDField):
        if not _is_uuid(value):
            fail("a UUID")
    elif isinstance(field, RefId):
        if value != "" and not _is_uuid(value):
            fail('a UUID or ""')
    elif isinstance(field, serializers.IntegerField):
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
        if field.min_value is not None and value < field.min_value:
            fail(f"an integer >= {field.min_value}")
    elif isinstance(field, serializers.FloatField):
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail("a number")
    elif isinstance(field, serializers.CharField):
        if not isinstance(value, str):
            fail("a string")
        if value == "" and not field.allow_blank:
            fail("a non-empty string")
    else:
        raise TypeError(f"{path}: no wire check for {type(field).__name__}")


def _check_json(value: Any, path: str) -> None:
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_json(v, f"{path}[{i}]")
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        for k, v in value.items():
            _check_json(v, f"{path}.{k}")
    else:
        raise WireError(path, f"not JSON: {type(value).__name__}")


# --- Updates ----------------------------------------------------------------------------------

ENTITY_SCHEMAS: dict[str, type[WireSerializer]] = {}


def entity(name: str) -> Callable[[type[WireSerializer]], type[WireSerializer]]:
    """Register the schema of the Update entity ``name`` (``data_list`` items are checked by it)."""

    def register(cls: type[WireSerializer]) -> type[WireSerializer]:
        ENTITY_SCHEMAS[name] = cls
        return cls

    return register


class UpdateItem(WireSerializer):
    entity = serializers.ChoiceField(
        choices=["session", "turn", "message", "rtc", "file", "goal", "loop"]
    )
    action = serializers.ChoiceField(choices=["created", "updated", "deleted"])
    entity_id = Id()


class Update(WireSerializer):
    """``{id, items, data_list, offset}``: ``data_list[i]`` is the full entity of ``items[i]``."""

    id = Id()
    items = UpdateItem(many=True)
    data_list = serializers.ListField(child=serializers.JSONField())
    offset = serializers.IntegerField(min_value=1)

    def check_value(self, value: dict[str, Any], path: str) -> None:
        items, data = value["items"], value["data_list"]
        if not items or len(items) != len(data):
            raise WireError(path, "items and data_list must be non-empty and of equal length")
        for i, (it, entity_data) in enumerate(zip(items, data, strict=True)):
            check(ENTITY_SCHEMAS[it["entity"]], entity_data, f"{path}.data_list[{i}]")
            if entity_data["id"] != it["entity_id"]:
                raise WireError(f"{path}.data_list[{i}].id", "differs from items[i].entity_id")


class Gap(WireSerializer):
    """The filler of an offset whose transaction rolled back: ``{"type": "gap", "data": {}}``."""

    type = serializers.ChoiceField(choices=["gap"])
    data = shape("GapData")


def check_publication(value: Any, path: str = "$") -> None:
    """A topic publication's ``data``: an Update or a gap."""
    if isinstance(value, dict) and value.get("type") == "gap":
        check(Gap, value, path)
    else:
        check(Update, value, path)


# --- RPC replies ------------------------------------------------------------------------------


def page(item: type[WireSerializer], cursor: serializers.Field) -> WireSerializer:
    """A query's list reply ``{items, next_cursor}``."""
    return shape(f"{item.__name__}Page", items=item(many=True), next_cursor=cursor)


def one(item: type[WireSerializer]) -> WireSerializer:
    """A query's single reply ``{item}``."""
    return shape(f"{item.__name__}Item", item=item())


def success() -> serializers.BooleanField:
    """api.yaml's ``success`` in action results: always ``true`` (a failure is an error reply)."""
    return serializers.BooleanField()


def action(name: str, **result: serializers.Field) -> WireSerializer:
    """An action's reply ``{result: {...}, updates: [Update]}``."""
    return shape(f"{name}Reply", result=shape(f"{name}Result", **result),
                 updates=Update(many=True))


Handler = Callable[..., Any]


def replies(schema: WireSerializer) -> Callable[[Handler], Handler]:
    """Render the handler's return value with ``schema`` (kept as ``handler.reply_schema``).

    Put it under ``@rpc(...)``. The handler returns the reply with model instances where the
    schema has entities; what leaves the wrapper is plain JSON-ready data.
    """

    def decorate(func: Handler) -> Handler:
        @functools.wraps(func)
        def handler(ctx: Any, params: Any) -> Any:
            return schema.to_representation(func(ctx, params))

        handler.reply_schema = schema  # type: ignore[attr-defined]
        return handler

    return decorate
