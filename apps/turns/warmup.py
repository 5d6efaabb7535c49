"""A new PostgreSQL connection is warmed before its first turn uses it.

A new backend knows nothing of the tables yet: the first statements on each table load its
catalog entries (columns, indexes, statistics), which cost a turn's first reads on that
connection 3-4 ms more than on a warm one (five of the turn path's statements: 3.6-5.5 ms on a
new connection, 1.0-1.3 ms on the next round). Each worker thread and each web thread has a
connection of its own, opened while the worker thread waits for work
(``worker._connection_ready``), so without this every thread's first turn paid it, after
every start and every ``CONN_MAX_AGE``. One query string that reads no row from each table of
the turn path (``SELECT * FROM t LIMIT 0``) loads most of it, about 2.5 ms once per
connection, in a worker while it waits. A database without those tables yet (a test database
being created, a migration's first connection) is left as it is.
"""

from __future__ import annotations

import logging
from typing import Any

from django.apps import apps
from django.db import DatabaseError

log = logging.getLogger(__name__)

# the tables every turn reads or writes, from its message to its last Update
HOT_MODELS = (
    "accounts.User", "agent_sessions.Session", "agent_sessions.Message", "turns.Turn",
    "turns.TurnCheckpoint", "turns.LLMCall", "rtc.Rtc", "gateway.TopicEvent", "ops.ModelPrice",
    "memory.UserMemory", "memory.SessionMemory", "tasks.Goal", "tasks.SubAgent",
)


def warm_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: load the hot tables' catalog entries on a new PostgreSQL
    connection (one round trip)."""
    if connection.vendor != "postgresql":
        return
    quote = connection.ops.quote_name
    sql = "; ".join(f"SELECT * FROM {quote(apps.get_model(label)._meta.db_table)} LIMIT 0"  # noqa: S608
                    for label in HOT_MODELS)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
    except DatabaseError as exc:  # no such tables yet
        log.debug("connection not warmed: %s", exc)
