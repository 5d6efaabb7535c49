"""The session's todo list (``Session.todo_list``), written whole by the agent's todoWrite.

Items are api.yaml's ``TodoItem`` ``{content, status, active_form}`` with ``status`` one of
``pending``, ``in_progress``, ``completed``. A write that changes the list publishes the
``session`` entity (``updated``) in the same transaction; an identical list publishes nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.gateway.events import item, publish_update
from apps.sessions.models import Session
from apps.sessions.selectors import session_get
from apps.sessions.serializers import session_to_dict
from rtcagent.errors import InvalidRequest

from .limits import task_setting

TODO_STATUSES = ("pending", "in_progress", "completed")


@dataclass(frozen=True)
class TodoChange:
    items: list[dict[str, str]]
    updates: list[dict[str, Any]] = field(default_factory=list)


def check_todos(todos: Any) -> list[dict[str, str]]:
    """The list as stored: each item's text stripped and ``active_form`` defaulting to its
    content; ``InvalidRequest`` naming the first bad item otherwise."""
    most = int(task_setting("TODO_MAX_ITEMS"))
    chars = int(task_setting("TODO_ITEM_MAX_CHARS"))
    if not isinstance(todos, list):
        raise InvalidRequest("todos: must be a list")
    if len(todos) > most:
        raise InvalidRequest(f"todos: at most {most} items ({len(todos)} given)")
    out: list[dict[str, str]] = []
    for n, entry in enumerate(todos):
        where = f"todos[{n}]"
        if not isinstance(entry, dict):
            raise InvalidRequest(f"{where}: must be an object")
        unknown = sorted(set(entry) - {"content", "status", "active_form"})
        if unknown:
            raise InvalidRequest(f"{where}: unknown field(s) {', '.join(unknown)}")
        content, status = entry.get("content"), entry.get("status")
        active = entry.get("active_form", "")
        if not isinstance(content, str) or not content.strip():
            raise InvalidRequest(f"{where}.content: required")
        if status not in TODO_STATUSES:
            raise InvalidRequest(f"{where}.status: must be one of {', '.join(TODO_STATUSES)}")
        if not isinstance(active, str):
            raise InvalidRequest(f"{where}.active_form: must be a string")
        content, active = content.strip(), active.strip()
        for name, text in (("content", content), ("active_form", active)):
            if len(text) > chars:
                raise InvalidRequest(f"{where}.{name}: at most {chars} characters")
        out.append({"content": content, "status": status, "active_form": active or content})
    return out


def todo_write(*, user_id: int, session_id: uuid.UUID | str, todos: Any) -> TodoChange:
    """Replace the caller's session's todo list with ``todos`` (``[]`` clears it).

    ``InvalidRequest`` for a bad list, ``NotFound('session')`` for a session that is not the
    caller's; a refusal changes nothing."""
    items = check_todos(todos)
    with transaction.atomic():
        session = session_get(user_id=user_id, session_id=session_id)
        if session.todo_list == items:
            return TodoChange(items=items)
        Session.objects.filter(pk=session.pk).update(todo_list=items, updated_at=timezone.now())
        # Locked until commit, as the runner does: a concurrent session Update waits, so the
        # newest snapshot of the session always gets the later offset.
        session = Session.objects.select_for_update().get(pk=session.pk)
        update = publish_update(user_id=user_id, items=[item("session", "updated", session.id)],
                                data_list=[session_to_dict(session)])
        return TodoChange(items=items, updates=[update])
