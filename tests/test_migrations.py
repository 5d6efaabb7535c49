"""The migrations match the models, and an index on the messages table is built without
stopping its writers on PostgreSQL."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection


@pytest.mark.django_db
def test_the_models_need_no_migration_that_is_not_written() -> None:
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)  # SystemExit(1) if not
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db(transaction=True)  # sqlmigrate refuses it inside a transaction
def test_the_summary_index_is_built_concurrently_on_postgresql() -> None:
    out = StringIO()
    call_command("sqlmigrate", "agent_sessions", "0005", stdout=out)
    sql = out.getvalue()
    assert '"message_summary" ON "agent_sessions_message"' in sql
    if connection.vendor == "postgresql":
        assert 'CREATE INDEX CONCURRENTLY "message_summary"' in sql
        assert "BEGIN" not in sql  # CONCURRENTLY cannot run inside a transaction
    else:
        assert "CONCURRENTLY" not in sql


@pytest.mark.django_db(transaction=True)
def test_a_failed_concurrent_build_is_replaced_by_the_next_migrate() -> None:
    """A concurrent build that failed leaves an (invalid) index of its name and the migration
    unapplied; the next migrate drops that index and builds the real one."""
    if connection.vendor != "postgresql":
        pytest.skip("CONCURRENTLY is PostgreSQL's")
    call_command("migrate", "agent_sessions", "0004", verbosity=0)
    try:
        with connection.cursor() as cursor:  # stands for what the failed build left
            cursor.execute('CREATE INDEX "message_summary" ON agent_sessions_message (id)')
        call_command("migrate", "agent_sessions", verbosity=0)
    finally:
        call_command("migrate", "agent_sessions", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'message_summary'")
        (definition,) = cursor.fetchone()
    assert "(session_id, global_offset)" in definition and "summary" in definition
