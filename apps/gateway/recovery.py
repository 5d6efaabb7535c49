"""Where a (re)connecting client's topic subscription starts, and what it missed.

Synchronous (Redis + ORM); the consumer calls these through one thread hop each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from rtcagent.conf import rtc_setting

from . import stream


@dataclass
class TopicStart:
    """The subscribe result for ``topic:u=<id>`` and the offset live delivery continues from."""

    epoch: str
    last: int
    was_recovering: bool = False
    recovered: bool = False
    publications: list[dict[str, Any]] = field(default_factory=list)

    def as_subscribe_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "recoverable": True,
            "positioned": True,
            "epoch": self.epoch,
            "offset": self.last,
            "was_recovering": self.was_recovering,
            "recovered": self.recovered,
        }
        if self.recovered and self.publications:
            result["publications"] = self.publications
        return result


def _hint_position(hint: Any) -> tuple[int, str] | None:
    """``(offset, epoch)`` from a client's ``subs[channel]``, or None when it asks nothing."""
    if not isinstance(hint, dict) or not hint.get("recover"):
        return None
    offset = hint.get("offset", 0)
    epoch = hint.get("epoch", "")
    if isinstance(offset, bool) or not isinstance(offset, int) or not isinstance(epoch, str):
        return (-1, "")
    return (offset, epoch)


def topic_start(user_id: int, hint: Any, *, after: Callable[[Any], None] | None = None
                ) -> TopicStart:
    """Decide recovery for the user's topic (Centrifuge semantics, see docs/protocol.md §3).

    Recovered only when the epoch matches (an empty or ``_`` epoch never does) and every
    publication after the client's offset up to the watermark is still stored and within
    ``RECOVERY_LIMIT``; otherwise ``recovered: false`` and the client reloads its state.
    ``after``: commands sent ahead of the position read (``stream.position``).
    """
    pos = stream.position(user_id, after=after)
    if pos.watermark < pos.offset:  # allocations in flight: settle the stale ones first
        stream.fill_gaps(user_id)
        pos = stream.position(user_id)
    start = TopicStart(epoch=pos.epoch, last=pos.watermark)
    asked = _hint_position(hint)
    if asked is None:
        return start
    start.was_recovering = True
    offset, epoch = asked
    if epoch != pos.epoch or offset < 0 or offset > pos.offset:
        return start
    if offset >= pos.watermark:
        # Everything up to the client's offset was delivered; newer offsets are in flight.
        start.last, start.recovered = offset, True
        return start
    if pos.watermark - offset > rtc_setting("RECOVERY_LIMIT"):
        return start
    rows = stream.read_raw(user_id, pos.epoch, offset, pos.watermark)
    if len(rows) != pos.watermark - offset:
        return start  # history was pruned or lost
    publications = _within_bytes(rows)
    if len(publications) != len(rows):
        return start  # too large for one connect reply: the client reloads instead
    start.recovered = True
    start.publications = publications
    return start


def _within_bytes(rows: list[tuple[int, str]]) -> list[dict[str, Any]]:
    """The leading publications whose encoded size stays within ``RECOVERY_MAX_BYTES`` (at least
    one): a reply is one WebSocket message, and both the server and the clients bound those. Each
    ``data`` is the stored JSON text as an ``orjson.Fragment``: sent on as it is."""
    cap = int(rtc_setting("RECOVERY_MAX_BYTES"))
    total, out = 0, []
    for offset, raw in rows:
        total += len(raw) + 32  # the text (characters: close enough) and the pub's own keys
        if out and total > cap:
            break
        out.append({"data": orjson.Fragment(raw), "offset": offset})
    return out


def history(user_id: int, *, since: tuple[int, str] | None, limit: int) -> dict[str, Any]:
    """The ``history`` command on the user's topic: position, and publications after ``since``.

    Raises ``LookupError`` when ``since`` names another epoch (the reply is error 112).
    """
    pos = stream.position(user_id)
    result: dict[str, Any] = {"epoch": pos.epoch, "offset": pos.watermark, "publications": []}
    if limit == 0:
        return result
    after = 0
    if since is not None:
        after, epoch = since
        if epoch != pos.epoch:
            raise LookupError("unrecoverable position")
    cap = rtc_setting("HISTORY_MAX_LIMIT")
    limit = cap if limit < 0 else min(limit, cap)
    rows = stream.read_raw(user_id, pos.epoch, after, pos.watermark, limit)
    # A page cut short by size is fine: the client asks again from its last offset.
    result["publications"] = _within_bytes(rows)
    return result
