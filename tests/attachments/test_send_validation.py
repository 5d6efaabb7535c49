"""``files`` of ``v1.message.send`` (and fork) are checked before anything is written: another
user's key, unsafe keys and too many files are a clear ``invalid_request``, and the refusal
leaves no message, no session, no Update, no queue item and no object read or written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, Session
from rtcagent.errors import InvalidRequest
from tests.sessions.factories import call

pytestmark = pytest.mark.django_db


def _send(user: Any, files: Any, **extra: Any) -> Any:
    return call("v1.message.send", user, {
        "content_data": {"type": "user_message", "data": {"text": "see", "files": files}},
        "client_id": str(uuid.uuid4()), **extra,
    })


def _entry(key: Any) -> dict[str, Any]:
    return {"fileid": key, "mimetype": "image/png", "extra": {"name": "x.png", "size": 1}}


def _nothing_written(user: Any, redis_client: Any) -> None:
    assert not Message.objects.filter(user=user).exists()
    assert not Session.objects.filter(user=user).exists()
    assert not TopicEvent.objects.filter(user=user).exists()
    assert not [k for k in redis_client.keys("*") if "queue" in k or "ready" in k]


def test_a_valid_file_list_is_stored_as_sent(make_user) -> None:
    user = make_user()
    files = [_entry(f"user-{user.id}/photos/my photo+1 é.png"),
             _entry(f"user-{user.id}/100% done.txt")]
    reply = _send(user, files)
    message = Message.objects.get(pk=reply["result"]["message_id"])
    assert message.content["data"]["files"] == files


@pytest.mark.parametrize(("key", "problem"), [
    ("user-{other}/secret.png", "must be an object under your prefix user-{me}/"),
    ("{me}/x.png", "must be an object under your prefix"),
    ("user-{me}/", "must be an object under your prefix"),
    ("users-{me}/x.png", "must be an object under your prefix"),
    ("user-{me}/../user-{other}/secret.png", "the key contains a .. segment"),
    ("user-{me}/a/%2e%2e/%2e%2e/user-{other}/s.png", "encoded .. (%2e%2e)"),
    ("user-{me}/a/%2E%2e/b", "encoded .. (%2e%2e)"),
    ("user-{me}/a/.%2e/b", "the key contains a .. segment once percent-decoded"),
    ("user-{me}/a%5c..%5cb", "the key contains a backslash once percent-decoded"),
    ("user-{me}\\..\\x.png", "the key contains a backslash"),
    ("user-{me}/x\x00.png", "NUL character"),  # refused with every NUL in params
    ("user-{me}/x%00.png", "the key contains a control character once percent-decoded"),
    ("user-{me}/line\nbreak.png", "control character"),
    ("/user-{me}/x.png", "the key starts with /"),
    ("user-{me}/" + "é" * 600, "longer than 1024 bytes"),
    ("", "must be a non-empty string"),
    (7, "must be a non-empty string"),
    (None, "must be a non-empty string"),
])
def test_unsafe_or_foreign_keys_are_refused(make_user, redis_client, key, problem) -> None:
    user, other = make_user(), make_user()
    if isinstance(key, str):
        key = key.format(me=user.id, other=other.id)
    with pytest.raises(InvalidRequest) as refused:
        _send(user, [_entry(f"user-{user.id}/fine.png"), _entry(key)])
    assert "content_data.data.files[1].fileid" in refused.value.message
    assert problem.format(me=user.id) in refused.value.message
    _nothing_written(user, redis_client)


def test_too_many_files_are_refused(make_user, redis_client, settings) -> None:
    user = make_user()
    with pytest.raises(InvalidRequest, match="at most 10 files per message, got 11"):
        _send(user, [_entry(f"user-{user.id}/{n}.png") for n in range(11)])
    settings.RTCAGENT = {**settings.RTCAGENT, "ATTACH_MAX_FILES": 2}
    with pytest.raises(InvalidRequest, match="at most 2 files per message, got 3"):
        _send(user, [_entry(f"user-{user.id}/{n}.png") for n in range(3)])
    _nothing_written(user, redis_client)


@pytest.mark.parametrize(("files", "problem"), [
    ({"fileid": "x"}, "files: must be a list"),
    (None, "files: must be a list"),
    (["user-x/a.png"], "files[0]: must be an object"),
    ([{"fileid": "user-{me}/a.png", "mimetype": 5}], "files[0].mimetype: must be a string"),
    ([{"fileid": "user-{me}/a.png", "extra": []}], "files[0].extra: must be an object"),
    ([{"fileid": "user-{me}/a.png", "extra": {"name": 1}}], "files[0].extra.name: must be a"),
])
def test_malformed_entries_are_refused(make_user, redis_client, files, problem) -> None:
    user = make_user()
    if isinstance(files, list) and isinstance(files[0], dict):
        files = [{**files[0], "fileid": files[0]["fileid"].format(me=user.id)}]
    with pytest.raises(InvalidRequest, match=problem.replace("[", r"\[").replace("]", r"\]")):
        _send(user, files)
    _nothing_written(user, redis_client)


def test_a_fork_checks_its_files_too(make_user) -> None:
    user, other = make_user(), make_user()
    sent = _send(user, [])
    before = Message.objects.filter(user=user).count()
    with pytest.raises(InvalidRequest, match="must be an object under your prefix"):
        call("v1.session.fork", user, {
            "old_server_session_id": sent["result"]["session_id"],
            "old_server_message_id": sent["result"]["message_id"],
            "new_client_session_id": "fork", "new_client_message_id": str(uuid.uuid4()),
            "content_data": {"type": "user_message",
                             "data": {"text": "x", "files": [_entry(f"user-{other.id}/a")]}},
        })
    assert Message.objects.filter(user=user).count() == before
