"""Session management in the widget: rename, archive and restore, delete, fork from a user
message, and Retry after a failed turn; checked on screen and in the database."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Dialogs:
    """Answers the widget's prompt()/confirm() dialogs from a queue (then dismisses)."""

    def __init__(self) -> None:
        self.answers: list[str | bool] = []
        self.seen: list[tuple[str, str]] = []

    def __call__(self, dialog: Any) -> None:
        self.seen.append((dialog.type, dialog.message))
        answer = self.answers.pop(0) if self.answers else False
        if answer is False:
            dialog.dismiss()
        elif answer is True:
            dialog.accept()
        else:
            dialog.accept(answer)


@pytest.fixture
def dialogs() -> Dialogs:
    return Dialogs()


@pytest.fixture
def page(context: Any, dialogs: Dialogs) -> Iterator[Any]:
    """Like conftest's page, but dialogs are answered by ``dialogs`` instead of dismissed."""
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on("dialog", dialogs)
    yield page


def _agent_state(page: Any, expr: str) -> Any:
    return page.evaluate(f"(() => {{ const s = document.querySelector('rtc-agent').agent.store"
                         f".state; return {expr}; }})()")


def _session(session_id: str) -> Any:
    from apps.sessions.models import Session

    return Session.objects.get(pk=session_id)


def _texts(session_id: str) -> list[tuple[str, str]]:
    from apps.sessions.models import Message

    rows = Message.objects.filter(session_id=session_id, deleted_at__isnull=True)
    out = []
    for m in rows.order_by("global_offset"):
        data = m.content.get("data")
        text = data.get("text", "") if isinstance(data, dict) else str(data or "")
        out.append((m.content.get("type"), text))
    return out


def _ask(page: Any, text: str, answer: str) -> str:
    send(page, text)
    expect(page.locator("rtc-message-list .md").last).to_have_text(answer, timeout=20000)
    return _agent_state(page, "s.currentSession")


# Between the press and the release of every click, an Update arrives (as one can at any moment):
# the session of the pressed row gets new context figures. A list that rebuilt its buttons on
# that change would lose the click: chromium fires no click when the pressed element is gone.
CHANGE_ON_PRESS = """() => document.addEventListener('mousedown', (e) => {
  const store = document.querySelector('rtc-agent').agent.store;
  const li = e.composedPath().find((n) => n.localName === 'li' && n.dataset.id);
  const s = li && store.state.sessions[li.dataset.id];
  const more = { current_context_tokens: (s && s.current_context_tokens || 0) + 1000 };
  if (s) store.upsert('sessions', { ...s, ...more });
  else store.changed();
}, true)"""


def test_rename_archive_restore_and_delete(page: Any, dialogs: Dialogs, web: Any, worker: Any,
                                          model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "milk"}, {"content": "Buy milk."})
    model.add_rule({"last_user_contains": "bread"}, {"content": "Buy bread."})
    login(page, web_user)
    first = _ask(page, "what about milk?", "Buy milk.")
    page.click("rtc-session-list [data-act=new]")
    expect(page.locator("rtc-message-list .empty")).to_be_visible()
    second = _ask(page, "what about bread?", "Buy bread.")
    assert first != second
    items = page.locator("rtc-session-list li")
    expect(items).to_have_count(2)
    current = page.locator(f"rtc-session-list li[data-id='{second}']")
    expect(current).to_have_attribute("aria-current", "true")
    page.evaluate(CHANGE_ON_PRESS)

    # rename
    dialogs.answers.append("Bread run")
    current.locator("[data-act=rename]").click()
    expect(current.locator(".title")).to_have_text("Bread run")
    assert dialogs.seen[-1] == ("prompt", "Rename session")
    assert _session(second).title == "Bread run"

    # archive (close) and restore (open)
    page.wait_for_function(f"""() => document.querySelector('rtc-agent').agent.store.state
        .sessions['{second}'].status === 'idle'""", timeout=10000)
    current.locator("[data-act=close]").click()
    expect(current).to_have_class("closed")
    expect(current.locator(".muted")).to_have_text("closed")
    expect(current.locator("[data-act=open]")).to_have_text("Unarchive")
    row = _session(second)
    assert row.status == "closed" and row.closed_at is not None
    current.locator("[data-act=open]").click()
    expect(current).not_to_have_class("closed")
    expect(current.locator("[data-act=close]")).to_have_text("Archive")
    assert _session(second).status == "idle"

    # delete: asks first; "Cancel" keeps it
    current.locator("[data-act=delete]").click()
    assert dialogs.seen[-1] == ("confirm", 'Delete "Bread run"?')
    page.wait_for_timeout(300)
    expect(items).to_have_count(2)
    assert _session(second).deleted_at is None
    dialogs.answers.append(True)
    current.locator("[data-act=delete]").click()
    expect(items).to_have_count(1)
    expect(page.locator(f"rtc-session-list li[data-id='{first}']")).to_be_visible()
    expect(page.locator("rtc-message-list .empty")).to_be_visible()  # no session open
    assert _session(second).deleted_at is not None
    assert _session(first).deleted_at is None

    # all of it survives a reload (stored state and server agree)
    page.wait_for_timeout(300)
    page.reload()
    page.click("rtc-agent .bubble")
    wait_connected(page)
    expect(items).to_have_count(1)
    page.locator(f"rtc-session-list li[data-id='{first}']").click()
    expect(page.locator("rtc-message-list .md").last).to_have_text("Buy milk.")
    assert page.errors == []


def test_fork_from_a_user_message(page: Any, dialogs: Dialogs, web: Any, worker: Any,
                                  model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "first question"}, {"content": "First answer."})
    model.add_rule({"last_user_contains": "edited"}, {"content": "Edited answer."})
    model.add_rule({"last_user_contains": "second question"}, {"content": "Second answer."})
    login(page, web_user)
    _ask(page, "first question", "First answer.")
    old = _ask(page, "second question", "Second answer.")
    expect(page.locator("rtc-message-list .user")).to_have_count(2)

    dialogs.answers.append("second question, edited")
    page.locator("rtc-message-list .user").nth(1).locator("button.fork").click()
    assert dialogs.seen[-1][0] == "prompt"
    assert "forked" in dialogs.seen[-1][1]
    expect(page.locator("rtc-message-list .md").last).to_have_text("Edited answer.",
                                                                  timeout=20000)
    new = _agent_state(page, "s.currentSession")
    assert new != old
    # the fork: the history before the message, the edited message, a new answer
    users = page.locator("rtc-message-list .user")
    expect(users).to_have_count(2)
    expect(users.nth(0)).to_contain_text("first question")
    expect(users.nth(1)).to_contain_text("second question, edited")
    expect(page.locator("rtc-message-list .md")).to_have_text(["First answer.", "Edited answer."])
    expect(page.locator("rtc-session-list li")).to_have_count(2)
    expect(page.locator(f"rtc-session-list li[data-id='{new}']")).to_have_attribute(
        "aria-current", "true")
    assert _texts(new) == [("user_message", "first question"), ("markdown", "First answer."),
                           ("user_message", "second question, edited"),
                           ("markdown", "Edited answer.")]
    # the original is untouched
    assert _texts(old) == [("user_message", "first question"), ("markdown", "First answer."),
                           ("user_message", "second question"),
                           ("markdown", "Second answer.")]
    sent = [(m["role"], m["content"]) for m in model.requests[-1].body["messages"]
            if m["role"] in ("user", "assistant")]
    assert sent == [("user", "first question"), ("assistant", "First answer."),
                    ("user", "second question, edited")]
    # back to the original
    page.locator(f"rtc-session-list li[data-id='{old}']").click()
    expect(page.locator("rtc-message-list .md").last).to_have_text("Second answer.")
    assert page.errors == []


def test_retry_after_a_failed_turn(page: Any, web: Any, worker: Any, model: Any,
                                   web_user: Any) -> None:
    from apps.turns.models import Turn

    model.add_rule({"last_user_contains": "fragile"},
                   {"error": {"status": 500, "message": "boom"}})
    login(page, web_user)
    send(page, "a fragile request")
    error = page.locator("rtc-message-list .error")
    expect(error).to_be_visible(timeout=30000)
    expect(error).to_contain_text("Provider error")
    expect(error).to_contain_text("The model provider failed (500)")
    retry = error.locator("button[data-retry]")
    expect(retry).to_have_text("Retry")
    sid = _agent_state(page, "s.currentSession")
    assert list(Turn.objects.filter(session_id=sid).values_list("status", flat=True)) == [
        "failed"]
    failed_calls = len(model.requests)
    assert failed_calls >= 1 and all(r.outcome == "error" for r in model.requests)

    # the model recovers; Retry sends the last question again
    model.reset()
    model.add_rule({"last_user_contains": "fragile"}, {"content": "It worked this time."})
    retry.click()
    expect(page.locator("rtc-message-list .md").last).to_have_text("It worked this time.",
                                                                  timeout=20000)
    expect(page.locator("rtc-message-list .user")).to_have_count(2)
    expect(error).to_have_count(1)  # the failure stays in the history
    deadline = time.monotonic() + 10  # the answer shows before its turn is marked completed
    while Turn.objects.filter(session_id=sid, status="running").exists() and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(Turn.objects.filter(session_id=sid).values_list("status", flat=True)) == [
        "completed", "failed"]
    assert [t for t, _ in _texts(sid)] == ["user_message", "error", "user_message", "markdown"]
    assert len(model.requests) == 1
    assert page.errors == []
