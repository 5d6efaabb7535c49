"""Every read and update RPC over the socket with the official client, and ownership."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import sync_to_async
from centrifuge import ReplyError

from apps.accounts.tokens import issue_access_token
from tests.gateway.conftest import make_client

pytestmark = [pytest.mark.django_db(transaction=True)]


def _seed(user) -> dict[str, str]:
    """A session with a message, its turn (completed, the session idle again) and an RTC, made
    through the services."""
    from apps.rtc.models import Rtc
    from apps.sessions.models import Session
    from apps.sessions.services import message_send
    from apps.turns.models import Turn
    from apps.turns.services import turn_transition

    sent = message_send(
        user_id=user.id, device_id="dev-1", client_id=str(uuid.uuid4()),
        content={"type": "user_message", "data": {"text": "hello"}},
    )
    assert sent.turn is not None  # created with the message: nothing was ahead of it
    for status in ("running", "completed"):
        turn_transition(turn_id=sent.turn.id, to=status)
    Session.objects.filter(pk=sent.session.id).update(status="idle")
    turn = Turn.objects.get(pk=sent.turn.id)
    rtc = Rtc.objects.create(session=sent.session, turn=turn, user=user, tool_call_id="c1",
                             tool_name="ls", parameters={}, status="completed", result="x")
    return {"session": str(sent.session.id), "message": str(sent.message.id),
            "turn": str(turn.id), "rtc": str(rtc.id)}


seed = sync_to_async(_seed)


async def test_every_rpc_over_the_socket(gateway, make_user) -> None:
    user = await sync_to_async(make_user)()
    ids = await seed(user)
    client, _ = make_client(gateway, issue_access_token(user))
    await client.connect()
    try:
        async def call(method: str, data: dict) -> dict:
            return (await client.rpc(method, data)).data

        sessions = await call("v1.session.list", {"limit": 5})
        assert [s["id"] for s in sessions["items"]] == [ids["session"]]
        assert (await call("v1.session.get", {"session_id": ids["session"]}))["item"]["id"] \
            == ids["session"]
        closed = await call("v1.session.close", {"session_id": ids["session"]})
        assert closed["updates"][0]["data_list"][0]["status"] == "closed"
        opened = await call("v1.session.open", {"session_id": ids["session"]})
        assert opened["updates"][0]["data_list"][0]["status"] == "idle"
        renamed = await call("v1.session.update", {"session_id": ids["session"], "title": "T"})
        assert renamed["updates"][0]["data_list"][0]["title"] == "T"
        msgs = await call("v1.message.list", {"session_id": ids["session"]})
        assert [m["id"] for m in msgs["items"]] == [ids["message"]]
        assert (await call("v1.message.get", {"message_id": ids["message"]}))["item"]["content"] \
            == {"type": "user_message", "data": {"text": "hello"}}
        turns = await call("v1.turn.list", {"session_id": ids["session"]})
        assert [t["id"] for t in turns["items"]] == [ids["turn"]]
        assert (await call("v1.turn.get", {"turn_id": ids["turn"]}))["item"]["status"] \
            == "completed"
        rtcs = await call("v1.rtc.list", {"session_id": ids["session"]})
        assert [r["id"] for r in rtcs["items"]] == [ids["rtc"]]
        assert (await call("v1.rtc.get", {"rtc_id": ids["rtc"]}))["item"]["result"] == "x"
        fork = await call("v1.session.fork", {
            "old_server_session_id": ids["session"], "old_server_message_id": ids["message"],
            "new_client_session_id": "fork-1", "new_client_message_id": str(uuid.uuid4()),
            "content_data": {"type": "user_message", "data": {"text": "again"}},
        })
        assert fork["result"]["turn_id"] == "" and len(fork["result"]["message_ids"]) == 1
        with pytest.raises(ReplyError) as err:
            await call("v1.session.get", {"session_id": "not-a-uuid"})
        assert err.value.code == 400 and err.value.message.startswith("invalid_request")
    finally:
        await client.disconnect()


@pytest.mark.parametrize(("method", "params"), [
    ("v1.session.get", lambda ids: {"session_id": ids["session"]}),
    ("v1.session.close", lambda ids: {"session_id": ids["session"]}),
    ("v1.session.update", lambda ids: {"session_id": ids["session"], "title": "mine now"}),
    ("v1.message.list", lambda ids: {"session_id": ids["session"]}),
    ("v1.message.get", lambda ids: {"message_id": ids["message"]}),
    ("v1.turn.list", lambda ids: {"session_id": ids["session"]}),
    ("v1.turn.get", lambda ids: {"turn_id": ids["turn"]}),
    ("v1.turn.stop", lambda ids: {"session_id": ids["session"]}),
    ("v1.rtc.list", lambda ids: {"session_id": ids["session"]}),
    ("v1.rtc.get", lambda ids: {"rtc_id": ids["rtc"]}),
    ("v1.rtc.submit_result", lambda ids: {"rtc_id": ids["rtc"], "success": True, "result": "y"}),
    ("v1.message.send", lambda ids: {
        "server_session_id": ids["session"], "client_id": "intruder",
        "content_data": {"type": "text", "data": "hi"}}),
])
async def test_another_users_resources_do_not_exist(gateway, make_user, method, params) -> None:
    owner, intruder = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    ids = await seed(owner)
    client, _ = make_client(gateway, issue_access_token(intruder))
    await client.connect()
    try:
        with pytest.raises(ReplyError) as err:
            await client.rpc(method, params(ids))
        assert err.value.code == 404 and ".not_found:" in err.value.message
    finally:
        await client.disconnect()

    def unchanged() -> None:
        from apps.gateway.models import TopicEvent
        from apps.rtc.models import Rtc
        from apps.sessions.models import Message, Session

        session = Session.objects.get(pk=ids["session"])
        assert (session.status, session.title) == ("idle", "hello")
        assert Message.objects.filter(session=session).count() == 1
        assert Rtc.objects.get(pk=ids["rtc"]).result == "x"
        assert not TopicEvent.objects.filter(user=intruder).exists()

    await sync_to_async(unchanged)()
