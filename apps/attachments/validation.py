"""Send-time checks of a user message's ``files`` (the original's ``FileAttachment``).

Called by ``v1.message.send`` (and fork) before anything is written: a refusal is
``InvalidRequest`` and leaves no message, no session, no Update and no queue item. The object
itself is not read here (a missing one is found when the worker processes the message, and is
skipped with a warning the user sees).
"""

from __future__ import annotations

from typing import Any

from apps.storage.base import InvalidKey
from apps.storage.credentials import check_key, user_prefix
from rtcagent.conf import rtc_setting
from rtcagent.errors import InvalidRequest

__all__ = ["files_validate", "key_problem", "user_prefix"]


def key_problem(key: Any, *, user_id: object) -> str | None:
    """Why ``key`` may not name one of this user's files, or None when it may."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty string"
    if "%2e%2e" in key.lower():  # refused anywhere, not only as a whole segment
        return "the key contains an encoded .. (%2e%2e)"
    try:
        check_key(key)  # the /s3/ endpoint's rule: the store's, also once percent-decoded
    except InvalidKey as exc:
        return str(exc)
    prefix = user_prefix(user_id)
    if not key.startswith(prefix) or key == prefix:
        return f"must be an object under your prefix {prefix}"
    return None


def files_validate(*, user_id: object, files: Any) -> list[dict[str, Any]]:
    """``files`` if every entry is ``{fileid, mimetype?, extra?}`` naming one of the caller's
    objects, at most ``ATTACH_MAX_FILES`` of them; ``InvalidRequest`` naming the entry
    otherwise."""
    where = "content_data.data.files"
    if not isinstance(files, list):
        raise InvalidRequest(f"{where}: must be a list")
    limit = int(rtc_setting("ATTACH_MAX_FILES"))
    if len(files) > limit:
        raise InvalidRequest(f"{where}: at most {limit} files per message, got {len(files)}",
                             details={"max": limit})
    for i, entry in enumerate(files):
        here = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise InvalidRequest(f"{here}: must be an object with fileid, mimetype and extra")
        problem = key_problem(entry.get("fileid"), user_id=user_id)
        if problem:
            raise InvalidRequest(f"{here}.fileid: {problem}")
        if not isinstance(entry.get("mimetype", ""), str):
            raise InvalidRequest(f"{here}.mimetype: must be a string")
        extra = entry.get("extra", {})
        if extra is not None and not isinstance(extra, dict):
            raise InvalidRequest(f"{here}.extra: must be an object")
        name = (extra or {}).get("name", "")
        if not isinstance(name, str):
            raise InvalidRequest(f"{here}.extra.name: must be a string")
    return files
