"""Full-text search on user memories, per database (``apps.memory.search`` queries them).

* PostgreSQL: a GIN index on the ``tsvector`` of the content (``simple`` configuration, URL and
  path punctuation turned into spaces). No column: the expression is the index's, and a query
  written with the same expression is served by it.
* SQLite: an FTS5 table with the content and an ``owner`` token (``u<user id>``), kept in step
  by triggers, so every path that writes the table (services, admin, cascades, flush) keeps it.

SQLite drops a table's triggers when Django rebuilds the table (most ``AlterField`` operations
do): a later migration that alters ``memory_usermemory`` must create them again (``_TRIGGERS``).
``tests/memory/test_search.py`` fails when they are missing.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

# Frozen copies of ``apps.memory.search.pg_vector()`` and its punctuation (a migration must not
# change when the code does; the tests check that the two still agree).
_PG_VECTOR = (
    "to_tsvector('simple'::regconfig, translate(content, '@./:_~+=?&#<>\\-', "
    "'               '))"
)
_PG_FORWARD = [
    f"CREATE INDEX memory_usermemory_fts ON memory_usermemory USING gin ({_PG_VECTOR})",
]
_PG_BACKWARD = ["DROP INDEX IF EXISTS memory_usermemory_fts"]

_TRIGGERS = [
    """CREATE TRIGGER memory_usermemory_fts_ai AFTER INSERT ON memory_usermemory BEGIN
         INSERT INTO memory_usermemory_fts(rowid, content, owner)
         VALUES (new.id, new.content, 'u' || new.user_id);
       END""",
    """CREATE TRIGGER memory_usermemory_fts_ad AFTER DELETE ON memory_usermemory BEGIN
         DELETE FROM memory_usermemory_fts WHERE rowid = old.id;
       END""",
    """CREATE TRIGGER memory_usermemory_fts_au AFTER UPDATE OF content, user_id
       ON memory_usermemory BEGIN
         UPDATE memory_usermemory_fts SET content = new.content, owner = 'u' || new.user_id
         WHERE rowid = old.id;
       END""",
]
_SQLITE_FORWARD = [
    # unicode61 without diacritics removal: "cafe" finds "cafe" only, as on PostgreSQL.
    "CREATE VIRTUAL TABLE memory_usermemory_fts USING fts5("
    "content, owner, tokenize = 'unicode61 remove_diacritics 0')",
    *_TRIGGERS,
    "INSERT INTO memory_usermemory_fts(rowid, content, owner) "
    "SELECT id, content, 'u' || user_id FROM memory_usermemory",
]
_SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS memory_usermemory_fts_ai",
    "DROP TRIGGER IF EXISTS memory_usermemory_fts_ad",
    "DROP TRIGGER IF EXISTS memory_usermemory_fts_au",
    "DROP TABLE IF EXISTS memory_usermemory_fts",
]


def _run(statements: dict[str, list[str]]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):

    dependencies = [("memory", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": _PG_FORWARD, "sqlite": _SQLITE_FORWARD}),
            _run({"postgresql": _PG_BACKWARD, "sqlite": _SQLITE_BACKWARD}),
        ),
    ]
