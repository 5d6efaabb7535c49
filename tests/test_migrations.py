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
