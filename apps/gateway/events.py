"""Publishing: the one function that turns a state change into an Update on the user's topic.

Services call ``publish_update`` inside their ``transaction.atomic()`` block, after their writes.
It allocates the offset, stores the Update durably and schedules the publication for after
commit, then returns the Update for the RPC reply. If the transaction rolls back, nothing is
published and the offset becomes a ``gap`` (see ``apps.gateway.stream``).

``publish_live`` sends to ``live:u=<id>`` over Redis pub/sub (``apps.gateway.livebus``): at most
once, never for anything that must arrive (LLM chunks, whose final text always follows as a topic
Update).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from rtcagent import keys, layer

from . import livebus, stream

log = logging.getLogger(__name__)

ENTITIES = ("session", "turn", "message", "rtc", "file", "goal", "loop")
ACTIONS = ("created", "updated", "deleted")


def item(entity: str, action: str, entity_id: object) -> dict[str, str]:
    """One Update item ``{entity, action, entity_id}``."""
    if entity not in ENTITIES or action not in ACTIONS:
        raise ValueError(f"bad update item {entity}/{action}")
    return {"entity": entity, "action": action, "entity_id": str(entity_id)}


def publish_update(
    *, user_id: int, items: list[dict[str, Any]], data_list: list[dict[str, Any]],
    position: stream.Position | None = None,
) -> dict[str, Any]:
    """Record an Update on ``topic:u=<user_id>`` and publish it after commit (``position``:
    an offset ``stream.allocate_with`` reserved for it).

    Returns ``{id, items, data_list, offset}`` (the same object the topic delivers).
    """
    update: dict[str, Any] = {"id": str(uuid.uuid4()), "items": items, "data_list": data_list}
    stream.store(user_id, update, position)
    return update


def publish_live(user_id: int, data: dict[str, Any]) -> None:
    """Best-effort publication on ``live:u=<user_id>`` (dropped when nobody listens)."""
    try:
        livebus.publish(user_id, data)
    except Exception:
        log.exception("live publication failed for user %s", user_id)


def disconnect_user(
    user_id: int, *, reason: str, code: int | None = None, family_id: str | None = None
) -> None:
    """Close every open socket of the user (deactivated, deleted, tokens revoked), or with
    ``family_id`` only those opened with tokens of that login (refresh-token family): the
    user's other logins (another browser) keep theirs.

    The channel layer delivers at most once, so this is the fast path only: each connection
    also re-checks its token every ping interval (``apps.gateway.ticks``).
    """
    from .protocol import DISCONNECT_INVALID_TOKEN

    message: dict[str, Any] = {"type": "user.disconnect",
                               "code": code or DISCONNECT_INVALID_TOKEN, "reason": reason}
    if family_id:
        message["fid"] = family_id
    try:
        layer.group_send(keys.user_group(user_id), message)
    except Exception:
        log.exception("could not ring the disconnect of user %s", user_id)
