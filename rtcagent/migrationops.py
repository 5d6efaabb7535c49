"""Migration operations that keep a live deployment writing while they run.

``AddIndexOnline``: on PostgreSQL ``CREATE INDEX CONCURRENTLY`` (Django's
``AddIndexConcurrently``), which builds the index without the ``SHARE`` lock a plain
``CREATE INDEX`` holds for the whole scan, so the running web processes and workers go on
inserting messages while a release migrates a large table. Elsewhere (SQLite, the embedded
default: one machine, no concurrent release) a plain ``AddIndex``. A migration using it sets
``atomic = False``. A concurrent build that fails (or is stopped) leaves an invalid index of
that name behind; the migration is then not recorded, and the next ``migrate`` drops that
index before it builds it again.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class AddIndexOnline(AddIndexConcurrently):
    def describe(self) -> str:
        return f"{super().describe()} (on PostgreSQL; a plain index elsewhere)"

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            self._ensure_not_in_transaction(schema_editor)
            name = schema_editor.quote_name(self.index.name)
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")  # a failed try's
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state,
                                                  to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state,
                                                   to_state)
