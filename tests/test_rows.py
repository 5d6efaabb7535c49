"""``rtcagent.rows`` against the real database: a hand-written read gives the instances the
ORM's ``SELECT`` gives, field by field and type by type, and ``insert`` stores the row that
``objects.create`` would; a ``batched`` transaction keeps and fails what it would unbatched, in
fewer round trips."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from apps.rtc.models import Rtc
from apps.sessions.models import Message, Session
from apps.turns.models import Turn
from rtcagent.rows import (
    Columns,
    batched,
    insert,
    later,
    read,
    read_ahead,
    split,
    together,
)

pytestmark = pytest.mark.django_db


def _same(got: object, want: object, model: type) -> None:
    """Equal field by field, of the same type (a str enum member, as an instance's default
    holds it, counts as its string)."""
    for field in model._meta.concrete_fields:
        a, b = getattr(got, field.attname), getattr(want, field.attname)
        same_type = type(a) is type(b) or (isinstance(a, str) and isinstance(b, str))
        assert a == b and same_type, field.name


def test_insert_stores_what_create_would(make_user) -> None:
    user = make_user()
    session = Session.objects.create(user=user)
    turn = Turn.objects.create(session=session, user=user, status="running")
    before = timezone.now()
    rtc = Rtc(session_id=session.id, turn_id=turn.id, user_id=user.id, tool_call_id="c1",
              tool_name="read", parameters={"path": "/é", "n": [1, 2.5, None]},
              deadline=before + timedelta(minutes=5))
    insert(rtc)
    assert not rtc._state.adding
    assert before <= rtc.created_at <= rtc.updated_at  # the auto_now stamps, set on the object
    _same(rtc, Rtc.objects.get(pk=rtc.pk), Rtc)
    twin = Rtc.objects.create(session_id=session.id, turn_id=turn.id, user_id=user.id,
                              tool_call_id="c2", tool_name="read", parameters={"path": "/é"})
    _same(Rtc.objects.get(pk=twin.pk), twin, Rtc)

    msg = Message(id=uuid.uuid4(), session=session, user=user, client_id="k", global_offset=1,
                  role="tool", content={"type": "text", "data": "x"})
    insert(msg)
    _same(msg, Message.objects.get(pk=msg.pk), Message)
    with pytest.raises(IntegrityError), transaction.atomic():  # (user, client_id) is unique
        insert(Message(id=uuid.uuid4(), session=session, user=user, client_id="k",
                       global_offset=2, role="tool", content={}))
    with pytest.raises(ValueError, match="primary key"):
        insert(Turn(id=None, session=session, user=user))


def test_a_read_over_several_tables_gives_the_orms_instances(make_user) -> None:
    user = make_user()
    session = Session.objects.create(user=user, device_id="laptop", host_functions=[{"a": 1}])
    turn = Turn.objects.create(session=session, user=user, status="running",
                               started_at=timezone.now())
    lone = Turn.objects.create(session=Session.objects.create(user=user), user=user)
    parts = (Columns(Turn, "t"), Columns(Session, "s", ("id", "device_id")))
    sql = (f"SELECT {parts[0].sql()}, {parts[1].sql()} FROM turns_turn t "  # noqa: S608
           "LEFT JOIN agent_sessions_session s ON s.id = t.session_id AND s.device_id <> '' "
           "WHERE t.user_id = %s ORDER BY t.created_at")
    with connection.cursor() as cursor:
        cursor.execute(sql, [user.id])
        rows = [split(row, parts) for row in cursor.fetchall()]
    (got, got_session), (got_lone, no_session) = rows
    _same(got, Turn.objects.get(pk=turn.pk), Turn)
    _same(got_lone, Turn.objects.get(pk=lone.pk), Turn)
    assert no_session is None  # the outer join found none
    assert (got_session.id, got_session.device_id) == (session.id, "laptop")
    # the fields not read are deferred: they load on access
    assert got_session.get_deferred_fields() >= {"host_functions", "user_id"}
    assert got_session.host_functions == [{"a": 1}]



def _recorder(sent: list[str]) -> Any:
    """An execute wrapper that keeps each statement Django sends (its text)."""
    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)
    return record


def _message(session: Session, client_id: str, offset: int) -> Message:
    return Message(id=uuid.uuid4(), session=session, user_id=session.user_id,
                   client_id=client_id, global_offset=offset, role="user",
                   content={"type": "text", "data": f"50% {client_id}"})


@pytest.mark.django_db(transaction=True)
def test_a_batched_transaction_reads_and_updates_what_it_inserted(make_user) -> None:
    session = Session.objects.create(user=make_user())
    sent: list[str] = []
    record = _recorder(sent)

    with batched(), transaction.atomic(), connection.execute_wrapper(record):
        for n in range(3):
            insert(_message(session, f"k{n}", n + 1))
        # a read gets its own result, after the inserts before it
        assert Message.objects.filter(session=session).count() == 3
        # and an UPDATE's row count is its own
        assert Message.objects.filter(session=session).update(role="tool") == 3
        insert(_message(session, "k3", 4))
    assert sorted(Message.objects.filter(session=session).values_list("client_id", "role")) == [
        ("k0", "tool"), ("k1", "tool"), ("k2", "tool"), ("k3", "user")]
    assert Message.objects.get(client_id="k3").content["data"] == "50% k3"
    if connection.vendor == "postgresql":  # the BEGIN and the inserts went with the read
        assert len(sent) == 2 and sent[0].startswith("BEGIN; INSERT") and "COUNT" in sent[0]
        assert sent[1].startswith("UPDATE")  # the last insert: with the COMMIT


@pytest.mark.django_db(transaction=True)
def test_an_insert_failing_in_a_batched_transaction_fails_all_of_it(make_user) -> None:
    session = Session.objects.create(user=make_user())
    insert(_message(session, "taken", 1))
    went_on = False
    with pytest.raises(IntegrityError), batched(), transaction.atomic():
        insert(_message(session, "new", 2))
        insert(_message(session, "taken", 3))  # (user, client_id) is unique
        went_on = True  # PostgreSQL: the insert waits for the next statement
        insert(_message(session, "after", 4))
    # the error is Django's class, raised by the commit on PostgreSQL and by the insert itself
    # elsewhere; nothing of the transaction is kept, and the connection works on
    assert went_on is (connection.vendor == "postgresql")
    assert list(Message.objects.filter(session=session).values_list("client_id", flat=True)) == [
        "taken"]
    with batched(), transaction.atomic():
        insert(_message(session, "later", 5))
    assert Message.objects.filter(session=session).count() == 2


def test_a_batched_block_inside_a_callers_transaction_leaves_nothing_behind(make_user) -> None:
    """The test's own transaction is the caller's: inserts held at the block's end are sent
    then, and an inner savepoint's end carries them too."""
    session = Session.objects.create(user=make_user())
    with batched():
        insert(_message(session, "a", 1))
    with batched(), transaction.atomic():
        insert(_message(session, "b", 2))
    with pytest.raises(IntegrityError), batched(), transaction.atomic():
        insert(_message(session, "a", 3))
    assert sorted(Message.objects.filter(session=session).values_list("client_id", flat=True)
                  ) == ["a", "b"]


@pytest.mark.django_db(transaction=True)
def test_a_lock_goes_with_the_read_it_guards(make_user) -> None:
    user = make_user()
    sent: list[str] = []
    record = _recorder(sent)

    table = type(user)._meta.db_table
    lock = f"SELECT id FROM {table} WHERE id = %s"  # noqa: S608
    if connection.features.has_select_for_update:
        lock += " FOR UPDATE"
    with batched(), transaction.atomic(), connection.execute_wrapper(record):
        later(lock, [user.id])
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE id = %s", [user.id])  # noqa: S608
            assert cursor.fetchone() == (1,)
    later(f"SELECT id FROM {table} WHERE id = %s", [user.id])  # noqa: S608 - outside: at once
    if connection.vendor == "postgresql":
        assert len(sent) == 1 and "FOR UPDATE; SELECT COUNT" in sent[0]


@pytest.mark.django_db(transaction=True)
def test_inserts_held_before_a_many_statement_keep_their_order(make_user) -> None:
    session = Session.objects.create(user=make_user())
    table = Message._meta.db_table
    with batched(), transaction.atomic():
        insert(_message(session, "a", 1))  # held: sent before the executemany, not after it
        with connection.cursor() as cursor:
            cursor.executemany(f"UPDATE {table} SET role = %s WHERE client_id = %s",  # noqa: S608
                               [("tool", "a"), ("tool", "b")])
    assert Message.objects.get(client_id="a").role == "tool"


def _two_titles(make_user: Any) -> tuple[Session, Session, str]:
    """Two sessions titled "a" and "b", and the statement reading one's title by id."""
    user = make_user()
    a = Session.objects.create(user=user, title="a")
    b = Session.objects.create(user=user, title="b")
    return a, b, f"SELECT title FROM {Session._meta.db_table} WHERE id = %s"  # noqa: S608


def test_reads_sent_together_are_each_taken_by_their_reader(make_user) -> None:
    a, b, title = _two_titles(make_user)
    pk = Session._meta.pk.get_db_prep_value
    sent: list[str] = []
    record = _recorder(sent)

    with connection.execute_wrapper(record):
        with together([(title, [pk(a.id, connection)]), None, (title, [pk(b.id, connection)])]):
            Session.objects.filter(pk=a.pk).update(title="a, later")  # after the read: unseen
            assert read(title, [pk(a.id, connection)]) == [("a",)]
            assert read(title, [pk(b.id, connection)]) == [("b",)]
            assert read(title, [pk(a.id, connection)]) == [("a, later",)]  # taken: asked again
        assert read(title, [pk(b.id, connection)]) == [("b",)]  # the block's rows are gone
    if connection.vendor == "postgresql":  # both reads in one statement
        assert len(sent) == 4 and sent[0].count("SELECT title") == 2
    else:
        assert len(sent) == 5


def test_rows_read_ahead_stand_for_a_later_read_of_the_same_statements(make_user) -> None:
    """``read_ahead`` keeps rows as of its call; a later ``together`` naming the same
    statements uses them (sending only the others) and takes them: a second one reads."""
    a, b, title = _two_titles(make_user)
    pk = Session._meta.pk.get_db_prep_value
    first, second = (title, [pk(a.id, connection)]), (title, [pk(b.id, connection)])
    ahead = read_ahead([first])
    Session.objects.filter(pk=a.pk).update(title="a, later")
    sent: list[str] = []
    with connection.execute_wrapper(_recorder(sent)):
        with together([first, second], ahead=ahead):
            assert read(*first) == [("a",)]  # as read ahead
            assert read(*second) == [("b",)]
        assert sent == [title]  # only the statement not read ahead was sent
        assert ahead == {}  # taken
        with together([first], ahead=ahead):
            assert read(*first) == [("a, later",)]


@pytest.mark.django_db(transaction=True)
def test_a_failing_read_among_others_fails_only_its_reader(make_user) -> None:
    session = Session.objects.create(user=make_user(), title="kept")
    table = Session._meta.db_table
    good = (f"SELECT title FROM {table} WHERE id = %s",  # noqa: S608
            [Session._meta.pk.get_db_prep_value(session.id, connection)])
    broken = (f"SELECT no_such_column FROM {table}", [])  # noqa: S608
    # inside a transaction the error is the caller's at once
    with pytest.raises(DatabaseError), transaction.atomic(), together([good, broken]):
        pass
    with together([good, broken]):  # outside one: each reader asks again on its own
        assert read(*good) == [("kept",)]
        with pytest.raises(DatabaseError):
            read(*broken)


@pytest.mark.django_db(transaction=True)
def test_inserts_held_before_a_server_side_cursor_are_sent_first(make_user) -> None:
    """``iterator()`` on PostgreSQL reads through a named cursor, whose statement becomes a
    ``DECLARE``: the held BEGIN and inserts go before it, not inside it."""
    session = Session.objects.create(user=make_user())
    with batched(), transaction.atomic():
        insert(_message(session, "a", 1))
        insert(_message(session, "b", 2))
        found = list(Message.objects.filter(session=session).order_by("global_offset")
                     .values_list("client_id", flat=True).iterator(chunk_size=1))
    assert found == ["a", "b"]
    assert Message.objects.filter(session=session).count() == 2
