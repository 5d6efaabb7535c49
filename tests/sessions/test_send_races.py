"""``message_send`` on the real database: one statement finds, changes and reads the session;
a reused ``client_id`` fails the insert. What a sender would notice: one message per client id
however the sends race, contiguous offsets, a closed or foreign session refused with nothing
written."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, Session, SessionStatus
from apps.sessions.services import message_send
from rtcagent.errors import ClientIdConflict, InvalidState, NotFound

pytestmark = pytest.mark.django_db(transaction=True)


def _send(user: Any, client_id: str, session: Any = None, device_id: str = "") -> Any:
    return message_send(user_id=user.pk, device_id=device_id,
                        content={"type": "text", "data": client_id}, client_id=client_id,
                        server_session_id=session and session.id)


def test_racing_sends_of_one_client_id_store_one_message_and_tell_the_others_its_ids(
        make_user) -> None:
    user = make_user()
    session = _send(user, "first").session
    outcomes: list[Any] = []
    go = threading.Barrier(4)

    def sender() -> None:
        try:
            go.wait()
            outcomes.append(_send(user, "same", session))
        except Exception as exc:
            outcomes.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sender) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    won = [o for o in outcomes if not isinstance(o, Exception)]
    lost = [o for o in outcomes if isinstance(o, Exception)]
    assert len(won) == 1 and len(lost) == 3
    (sent,) = won
    for exc in lost:
        assert isinstance(exc, ClientIdConflict)
        assert exc.details == {"session_id": str(session.id), "message_id": str(sent.message.id)}
    assert Message.objects.filter(user=user, client_id="same").count() == 1
    # the losers' offsets were rolled back with them: the next send takes the next one
    third = _send(user, "third", session)
    assert [sent.message.global_offset, third.message.global_offset] == [2, 3]
    assert Session.objects.get(pk=session.pk).last_message_offset == 3
    assert third.session.last_message_offset == 3  # the snapshot the Update carried


def test_concurrent_sends_to_one_session_get_contiguous_offsets(make_user) -> None:
    user = make_user()
    session = _send(user, "seed").session
    go = threading.Barrier(6)
    errors: list[Exception] = []

    def sender(n: int) -> None:
        try:
            go.wait()
            _send(user, f"m-{n}", session, device_id=f"device-{n}")
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    offsets = sorted(Message.objects.filter(session=session).values_list("global_offset",
                                                                            flat=True))
    assert offsets == list(range(1, 8))
    fresh = Session.objects.get(pk=session.pk)
    assert fresh.last_message_offset == 7 and fresh.device_id.startswith("device-")


def test_a_closed_or_foreign_session_is_refused_and_nothing_is_written(make_user) -> None:
    user, other = make_user(), make_user()
    session = _send(user, "seed").session
    Session.objects.filter(pk=session.pk).update(status=SessionStatus.CLOSED)
    before = (Message.objects.count(), TopicEvent.objects.filter(user=user).count(),
              Session.objects.get(pk=session.pk).last_message_offset)
    with pytest.raises(InvalidState, match="closed"):
        _send(user, "late", session)
    with pytest.raises(NotFound):
        _send(other, "intruder", session)
    assert (Message.objects.count(), TopicEvent.objects.filter(user=user).count(),
            Session.objects.get(pk=session.pk).last_message_offset) == before
