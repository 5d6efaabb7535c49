"""Full-text search of user memories, on whichever database the run uses (PostgreSQL's text
search or SQLite's FTS5): word-level OR, prefixes, ranking by importance weight then recency,
and the index kept in step with every write."""

from __future__ import annotations

import pytest
from django.db import connection

from apps.memory import search
from apps.memory.models import UserMemory
from apps.memory.selectors import user_memory_search
from apps.memory.services import user_memory_delete, user_memory_save, user_memory_update

pytestmark = pytest.mark.django_db


def _ids(user, query: str, **kw) -> list[int]:
    return [f.memory.pk for f in user_memory_search(user_id=user.id, query=query, **kw)]


def test_ranking_is_matched_words_times_importance_then_recency(make_user, remember) -> None:
    user = make_user()
    both_low = remember(user, "Deploy to staging first", importance="low", age=50)  # 2 x 0.7
    one_critical = remember(user, "Never deploy on Fridays", importance="critical", age=60)
    both_medium = remember(user, "The staging deploy uses blue/green", age=70)  # 2 x 1.0
    one_high = remember(user, "Staging is at staging.example.com", importance="high", age=40)
    one_old = remember(user, "Deploy keys live in the vault", age=30)  # 1 x 1.0, older
    one_new = remember(user, "Deploy with make release", age=20)  # 1 x 1.0, newer
    remember(user, "Unrelated: the user likes tea")
    found = user_memory_search(user_id=user.id, query="deploy staging", limit=10)
    assert [f.memory.pk for f in found] == [
        both_medium.pk, one_critical.pk, both_low.pk, one_high.pk, one_new.pk, one_old.pk]
    assert [f.score for f in found] == [2.0, 1.5, 1.4, 1.3, 1.0, 1.0]
    assert _ids(user, "deploy staging") == [f.memory.pk for f in found[:5]]  # top 5 by default


def test_a_change_makes_a_memory_recent_again(make_user, remember) -> None:
    user = make_user()
    older = remember(user, "Build with make", age=100)
    newer = remember(user, "Build with bazel", age=10)
    assert _ids(user, "build") == [newer.pk, older.pk]
    user_memory_update(user_id=user.id, memory_id=older.pk, content="Build with make -j8")
    assert _ids(user, "build") == [older.pk, newer.pk]


@pytest.mark.parametrize(("content", "query"), [
    ("Uses PostgreSQL for everything", "postgresql"),  # case-insensitive
    ("The deployment pipeline is slow", "deploy"),  # a prefix of 4+ characters
    ("Tickets are tracked at https://linear.app/acme/issue-12", "linear"),  # URLs are split
    ("Reach the team at ops@example.com", "example"),  # so are e-mail addresses
    ("Config lives in /etc/rtc/agent.toml", "agent"),  # and paths
    ("Call save_memory_entry for that", "memory"),  # and snake_case
    ("Prefers saveMemory over manual notes", "savememory"),
    ("The user writes 数据库设计 docs", "数据库"),  # a prefix of non-Latin words too
    ("Works on v2 of the API", "v2"),
])
def test_words_are_found_across_punctuation_and_as_prefixes(make_user, remember, content,
                                                            query) -> None:
    user = make_user()
    m = remember(user, content)
    assert _ids(user, query) == [m.pk]


@pytest.mark.parametrize("query", [
    "the and of", "", "  ?!  ", "a", "dep",  # stop words only, nothing, a short non-prefix
])
def test_queries_without_a_searchable_word_find_nothing(make_user, remember, query) -> None:
    user = make_user()
    remember(user, "The deployment of the app and a dependency")
    assert _ids(user, query) == []


def test_short_words_match_whole_words_only(make_user, remember) -> None:
    user = make_user()
    go = remember(user, "Writes Go services")
    remember(user, "Good tests matter")
    assert _ids(user, "go") == [go.pk]


def test_another_users_memories_are_never_found(make_user, remember) -> None:
    me, other = make_user(), make_user()
    mine = remember(me, "Kubernetes cluster in eu-west")
    remember(other, "Kubernetes cluster in us-east", importance="critical")
    assert _ids(me, "kubernetes cluster") == [mine.pk]
    assert search.matches(me.id, ["kubernetes"]) == {mine.pk: 1}


def test_filters_narrow_the_search(make_user, remember) -> None:
    user = make_user()
    fb = remember(user, "Prefers short answers", category="feedback", importance="high")
    pr = remember(user, "Short release cycles", category="project")
    assert _ids(user, "short") == [fb.pk, pr.pk]
    assert _ids(user, "short", category="project") == [pr.pk]
    assert _ids(user, "short", importance="high") == [fb.pk]
    assert _ids(user, "short", exclude_importance=["high", "critical"]) == [pr.pk]


def test_the_index_follows_every_write(make_user, remember, make_session) -> None:
    user = make_user()
    saved = user_memory_save(user_id=user.id, content="Uses Terraform", category="project")
    m = saved.memory
    assert _ids(user, "terraform") == [m.pk]
    user_memory_update(user_id=user.id, memory_id=m.pk, content="Uses Pulumi now")
    assert _ids(user, "terraform") == [] and _ids(user, "pulumi") == [m.pk]
    UserMemory.objects.filter(pk=m.pk).update(content="Uses Ansible")  # a bulk update too
    assert _ids(user, "pulumi") == [] and _ids(user, "ansible") == [m.pk]
    user_memory_delete(user_id=user.id, memory_id=m.pk)
    assert _ids(user, "ansible") == [] and search.matches(user.id, ["ansible"]) == {}
    gone = remember(user, "Kept until the user goes")
    user.delete()  # the cascade removes it from the index as well
    assert search.matches(gone.user_id, ["kept"]) == {}


def test_query_terms_are_distinct_lowercase_words_without_stop_words() -> None:
    assert search.query_terms("Fix THE Login bug, the login BUG!") == ["fix", "login", "bug"]
    assert search.query_terms("snake_case and a-b c") == ["snake", "case"]
    assert len(search.query_terms(" ".join(f"w{i}" for i in range(40)))) == search.MAX_TERMS


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's index")
def test_postgresql_serves_searches_from_the_gin_index(make_user, remember) -> None:
    from importlib import import_module

    migration = import_module("apps.memory.migrations.0002_fulltext")
    assert migration._PG_VECTOR == search.pg_vector()  # the frozen copy still agrees
    user = make_user()
    remember(user, "Uses Terraform")
    # The search's own expression, alone (with the user filter the planner may prefer the
    # user's btree index on a small table): it must be the indexed one.
    sql = (f"SELECT id FROM memory_usermemory WHERE {search.pg_vector()} @@ "  # noqa: S608
           "to_tsquery('simple'::regconfig, %s)")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, ["terraform"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on memory_usermemory_fts" in plan
    assert search.matches(user.id, ["terraform"])


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's FTS5 table")
def test_sqlite_keeps_an_fts5_table_with_its_triggers() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                       "AND tbl_name = 'memory_usermemory' ORDER BY name")
        triggers = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_usermemory_fts'")
        (ddl,) = cursor.fetchone()
    assert triggers == ["memory_usermemory_fts_ad", "memory_usermemory_fts_ai",
                        "memory_usermemory_fts_au"]
    assert "fts5" in ddl.lower()


@pytest.mark.parametrize("query", [
    "'; DROP TABLE memory_usermemory; --", 'NEAR(alpha beta) OR "x"', "a:* | !b & (c)",
    "über x² ٣٤ 🙂 \u202ealpha", "owner : u1", "AND OR NOT", "\\ % _ ' \"", "alpha" * 300,
])
def test_hostile_queries_are_only_words(make_user, remember, query) -> None:
    user = make_user()
    m = remember(user, "alpha beta über")
    other = remember(make_user(), "alpha beta")
    found = _ids(user, query)
    assert other.pk not in found and set(found) <= {m.pk}
    assert UserMemory.objects.count() == 2
