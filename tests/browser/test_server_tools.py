"""The widget and the server-side tools (issue 12, items 6 and 7): the agent prompt and /AGENT.md
sent when a session is created, the todo list, a goal and a loop typed in the composer, and the
sub-agent tree, each from a scripted conversation, checked on screen and in the database."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _state(page: Any, expr: str) -> Any:
    return page.evaluate(f"(() => {{ const s = document.querySelector('rtc-agent').agent.store"
                         f".state; return {expr}; }})()")


def _ask(page: Any, text: str, answer: str) -> str:
    send(page, text)
    expect(page.locator("rtc-message-list .md").last).to_have_text(answer, timeout=20000)
    return str(_state(page, "s.currentSession"))


def _command(page: Any, text: str) -> None:
    page.fill("rtc-composer textarea", text)
    page.keyboard.press("Enter")


def _until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll the database until ``check()`` is truthy (the worker and the scheduler run in
    other processes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _new_chat(page: Any) -> None:
    page.locator("rtc-session-list [data-act=new]").click()
    expect(page.locator("rtc-message-list .empty")).to_be_visible()


# --- the agent prompt ----------------------------------------------------------------------------

GUIDE = "# Lisbon guide\nAnswer as a tour guide of Lisbon."


def test_agent_prompt_and_agent_md_shape_each_new_session(page: Any, web: Any, worker: Any,
                                                          model: Any, web_user: Any) -> None:
    from apps.sessions.models import Session

    model.add_rule({"last_user_contains": "who are you"}, {"content": "A tour guide."})
    model.add_rule({"last_user_contains": "and then"}, {"content": "Still a tour guide."})
    login(page, web_user)
    page.evaluate("""async (guide) => {
        const el = document.querySelector('rtc-agent');
        el.setAttribute('agent-prompt', 'From the attribute.');
        el.agentPrompt = 'You guide visitors through Lisbon.';   // the property wins
        await el.agent.vfs.write('/AGENT.md', guide);
    }""", GUIDE)
    sid = _ask(page, "who are you?", "A tour guide.")
    expected = ("You guide visitors through Lisbon.\n\n<file path=\"/AGENT.md\">\n" + GUIDE
                + "\n</file>")
    assert Session.objects.get(pk=sid).agent_prompt == expected
    system = [m for m in model.requests[-1].body["messages"] if m["role"] == "system"]
    assert any(expected in str(m["content"]) for m in system)  # the model read it

    # The session keeps its snapshot: a later change shapes only the sessions created after it.
    page.evaluate("""async () => {
        const el = document.querySelector('rtc-agent');
        el.agentPrompt = null;                    // the attribute again
        await el.agent.vfs.write('/AGENT.md', 'Answer in one word.');
    }""")
    _ask(page, "and then?", "Still a tour guide.")
    assert Session.objects.get(pk=sid).agent_prompt == expected
    _new_chat(page)
    other = _ask(page, "who are you, again?", "A tour guide.")
    assert other != sid
    assert Session.objects.get(pk=other).agent_prompt == (
        "From the attribute.\n\n<file path=\"/AGENT.md\">\nAnswer in one word.\n</file>")

    # Without /AGENT.md and without a prompt nothing is sent: the session's prompt is empty.
    page.evaluate("""async () => {
        const el = document.querySelector('rtc-agent');
        el.removeAttribute('agent-prompt');
        await el.agent.vfs.remove('/AGENT.md');
    }""")
    _new_chat(page)
    bare = _ask(page, "who are you now?", "A tour guide.")
    assert Session.objects.get(pk=bare).agent_prompt == ""
    assert page.errors == []


# --- the todo list -------------------------------------------------------------------------------

FIRST_PLAN = [
    {"content": "Book the flight", "status": "in_progress", "active_form": "Booking the flight"},
    {"content": "Book the hotel", "status": "pending", "active_form": "Booking the hotel"},
    {"content": "Plan the days", "status": "pending", "active_form": "Planning the days"},
]
SECOND_PLAN = [
    {"content": "Book the flight", "status": "completed", "active_form": "Booking the flight"},
    {"content": "Book the hotel", "status": "in_progress", "active_form": "Booking the hotel"},
    {"content": "Plan the days", "status": "pending", "active_form": "Planning the days"},
]


def _todos_on_screen(page: Any) -> list[tuple[str, str]]:
    items = page.locator("rtc-task-panel [part=todos] li")
    return [(items.nth(i).get_attribute("data-status"), items.nth(i).locator(".text").inner_text())
            for i in range(items.count())]


def test_todo_list_shows_each_items_state_as_the_agent_writes_it(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.sessions.models import Session

    model.add_rule({"last_user_contains": "plan the lisbon trip"},
                   {"tool_calls": [{"name": "todoWrite", "arguments": {"todos": FIRST_PLAN}}]})
    model.add_rule({"last_user_contains": "go on"},
                   {"tool_calls": [{"name": "todoWrite", "arguments": {"todos": SECOND_PLAN}}]})
    model.add_rule({"last_role": "tool"}, {"content": "Noted."})
    login(page, web_user)
    expect(page.locator("rtc-task-panel")).to_be_hidden()  # nothing to show yet
    sid = _ask(page, "plan the Lisbon trip", "Noted.")

    todos = page.locator("rtc-task-panel [part=todos]")
    expect(todos.locator("summary")).to_have_text("Todo list · 0 of 3 done", timeout=10000)
    # the item in progress reads as what is being done now
    assert _todos_on_screen(page) == [("in_progress", "Booking the flight"),
                                      ("pending", "Book the hotel"),
                                      ("pending", "Plan the days")]
    assert [t["status"] for t in Session.objects.get(pk=sid).todo_list] == [
        "in_progress", "pending", "pending"]

    # Collapsed by the user, it stays collapsed while the next write arrives as a session
    # Update, and changes in place.
    todos.locator("summary").click()
    expect(todos).not_to_have_attribute("open", "")
    _ask(page, "go on", "Noted.")
    expect(todos.locator("summary")).to_have_text("Todo list · 1 of 3 done", timeout=10000)
    expect(todos).not_to_have_attribute("open", "")
    todos.locator("summary").click()
    assert _todos_on_screen(page) == [("completed", "Book the flight"),
                                      ("in_progress", "Booking the hotel"),
                                      ("pending", "Plan the days")]
    expect(todos.locator("li[data-status=completed] .text")).to_have_css(
        "text-decoration-line", "line-through")
    assert Session.objects.get(pk=sid).todo_list == SECOND_PLAN

    # A reload shows it again.
    page.reload()
    expect(page.locator("rtc-agent .conn")).to_have_text("connected", timeout=15000)
    page.locator("rtc-agent .bubble").click()
    expect(page.locator("rtc-task-panel [part=todos] summary")).to_have_text(
        "Todo list · 1 of 3 done", timeout=10000)
    assert page.errors == []


# --- a goal --------------------------------------------------------------------------------------


def test_goal_typed_in_the_composer_shows_its_rounds_and_ends(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.sessions.models import Message
    from apps.tasks.models import Goal

    # Round 1 streams slowly (so its active state can be seen); round 2 completes the goal.
    model.add_rule({"last_user_contains": "/goal the answer is polished"},
                   {"content": "A first draft, still rough around the edges.", "chunk_delay": 0.12})
    model.add_rule({"last_user_contains": "continue working towards the goal"},
                   {"tool_calls": [{"name": "completeGoal",
                                    "arguments": {"summary": "Reread twice."}}]})
    model.add_rule({"last_tool_result_contains": "Goal completed"},
                   {"content": "The answer is polished."})
    model.add_rule({"last_user_contains": "/goal it is perfect"},
                   {"content": "Working on perfection, " * 12, "chunk_delay": 0.15})
    model.add_rule({"last_user_contains": "hello"}, {"content": "Hello."})
    login(page, web_user)
    sid = _ask(page, "hello", "Hello.")

    composer = page.locator("rtc-composer")
    page.fill("rtc-composer textarea", "/go")
    expect(composer.locator("[part=command-hint]")).to_contain_text("/goal <condition>")
    _command(page, "/goal")  # no goal yet: says so, and how to set one
    notice = composer.locator("[part=command-notice]")
    expect(notice).to_contain_text("No goal in this conversation")

    _command(page, "/goal the answer is polished")
    goal_row = page.locator("rtc-task-panel [part=goal]")
    expect(goal_row.locator(".cond")).to_have_text("the answer is polished", timeout=10000)
    expect(goal_row.locator(".badge")).to_have_text("active")
    expect(goal_row.locator(".rounds")).to_have_text("0 / 50 rounds")
    expect(goal_row.locator("[data-act=cancel-goal]")).to_be_visible()
    expect(composer.locator("textarea")).to_have_value("")  # a command that was run is cleared
    # the kick-off message says who sent it
    expect(page.locator("rtc-message-list [part=message-origin]").first).to_have_text(
        "◎ Goal set: sent for you")

    # Round 1 ends, round 2 starts by itself and completes the goal.
    expect(page.locator("rtc-message-list .md").last).to_have_text("The answer is polished.",
                                                                   timeout=30000)
    expect(goal_row.locator(".badge")).to_have_text("completed", timeout=10000)
    expect(goal_row.locator(".rounds")).to_have_text("1 / 50 rounds")
    expect(goal_row.locator("[data-act=cancel-goal]")).to_have_count(0)
    goal = Goal.objects.get(session_id=sid, condition="the answer is polished")
    assert (goal.status, goal.rounds, goal.max_rounds) == ("completed", 1, 50)
    expect(page.locator("rtc-message-list [part=message-origin]").nth(1)).to_have_text(
        "◎ Goal, round 2: sent for you")

    # /goal clear without an active goal is refused; a second goal is cancelled from its button.
    _command(page, "/goal clear")
    expect(composer.locator("[part=command-notice]")).to_have_attribute("data-kind", "error")
    expect(composer.locator("textarea")).to_have_value("/goal clear")  # kept as typed
    _command(page, "/goal it is perfect")
    expect(goal_row.locator(".cond")).to_have_text("it is perfect", timeout=10000)
    expect(page.locator("rtc-message-list .md").last).to_contain_text("Working on perfection",
                                                                      timeout=20000)
    goal_row.locator("[data-act=cancel-goal]").click()
    expect(goal_row.locator(".badge")).to_have_text("cancelled", timeout=10000)
    second = Goal.objects.get(session_id=sid, condition="it is perfect")
    assert second.status == "cancelled" and second.outcome == "cancelled by the user"
    # Its round ends, and no further round starts: the last user message is still the kick-off.
    _until(lambda: not Message.objects.filter(session_id=sid, role="user", turn__isnull=True)
           .exists() and _idle(sid), "the last round to end")
    last = Message.objects.filter(session_id=sid, role="user").order_by("-global_offset").first()
    assert last.content["data"]["text"].startswith("/goal it is perfect")
    assert page.errors == []


def _idle(session_id: str) -> bool:
    from apps.sessions.models import Session

    return Session.objects.get(pk=session_id).status == "idle"


# --- a loop --------------------------------------------------------------------------------------


def test_loop_typed_in_the_composer_runs_shows_its_next_run_and_stops(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.tasks.models import Loop

    model.add_rule({"last_user_contains": "watch the deploy"}, {"content": "Watching."})
    model.add_rule({"last_user_contains": "check the deploy"}, {"content": "The deploy is green."})
    login(page, web_user)
    sid = _ask(page, "watch the deploy for me", "Watching.")
    composer = page.locator("rtc-composer")
    notice = composer.locator("[part=command-notice]")

    # Refusals: a bad interval (in the widget), too short an interval (by the server), an
    # unknown command. Nothing is created and what was typed stays.
    _command(page, "/loop 5 check the deploy")
    expect(notice).to_contain_text('"5" is not an interval')
    _command(page, "/loop 30s check the deploy")
    expect(notice).to_contain_text("interval_seconds", timeout=10000)
    expect(notice).to_have_attribute("data-kind", "error")
    expect(composer.locator("textarea")).to_have_value("/loop 30s check the deploy")
    _command(page, "/frobnicate now")
    expect(notice).to_contain_text("Unknown command /frobnicate")
    assert not Loop.objects.filter(session_id=sid).exists()

    _command(page, "/loop 10m x3 check the deploy")
    expect(notice).to_contain_text("Loop started", timeout=10000)
    row = page.locator("rtc-task-panel [part=loops] li")
    expect(row).to_have_count(1, timeout=10000)
    expect(row).to_have_attribute("data-status", "active")
    expect(row.locator(".prompt")).to_have_text("check the deploy")
    # Its first run is due at once (the scheduler in the worker sends it), the next in 10 min.
    expect(page.locator("rtc-message-list .md").last).to_have_text("The deploy is green.",
                                                                   timeout=30000)
    expect(page.locator("rtc-message-list [part=message-origin]").last).to_have_text(
        "↻ Loop, tick 1: sent for you")
    expect(row.locator(".muted")).to_contain_text("every 10 min · 1 of 3 runs · next run",
                                                  timeout=10000)
    expect(row.locator(".muted")).to_contain_text("(in 10 min)")
    loop = Loop.objects.get(session_id=sid)
    assert (loop.status, loop.runs, loop.max_runs, loop.interval_seconds) == (
        "active", 1, 3, 600)

    row.locator("[data-act=stop-loop]").click()
    expect(row).to_have_attribute("data-status", "stopped", timeout=10000)
    expect(row.locator("[data-act=stop-loop]")).to_have_count(0)
    expect(row.locator(".muted")).to_contain_text("1 of 3 runs · stopped")
    loop.refresh_from_db()
    assert loop.status == "stopped" and loop.next_run_at is None
    assert page.errors == []


# --- sub-agents ----------------------------------------------------------------------------------


def _sub_agent(title: str, instruction: str) -> dict[str, Any]:
    return {"name": "subAgent",
            "arguments": {"title": title, "instruction": instruction, "mode": "sync"}}


def _tree(page: Any) -> Any:
    return page.locator("rtc-message-list ul[part=sub-agents]").first


def test_sub_agents_show_as_a_tree_under_the_message_that_started_them(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.sessions.models import Session

    # The parent starts two sub-agents at once; the first starts one of its own.
    model.add_rule({"last_user_contains": "split the research"}, {"tool_calls": [
        _sub_agent("Tram lines", "TASK-TRAM: list the tram lines of Lisbon"),
        _sub_agent("Viewpoints", "TASK-VIEW: list the viewpoints of Lisbon")]})
    model.add_rule({"last_user_contains": "TASK-TRAM"},
                   {"tool_calls": [_sub_agent("Tram 28", "TASK-28: describe tram 28")]})
    model.add_rule({"last_user_contains": "TASK-28"}, {"content": "Tram 28 climbs to the castle."})
    model.add_rule({"last_tool_result_contains": "Tram 28 climbs"},
                   {"content": "Trams: 12, 15, 18, 24 and 28."})
    model.add_rule({"last_user_contains": "TASK-VIEW"},
                   {"content": "Viewpoints: Graça and Santa Luzia."})
    model.add_rule({"last_tool_result_contains": "Viewpoints: Graça"},
                   {"content": "Research done: trams and viewpoints."})
    login(page, web_user)
    sid = _ask(page, "split the research on Lisbon", "Research done: trams and viewpoints.")

    children = list(Session.objects.filter(parent_session_id=sid).order_by("created_at"))
    assert sorted(c.title for c in children) == ["Tram lines", "Viewpoints"]
    tram = next(c for c in children if c.title == "Tram lines")
    view = next(c for c in children if c.title == "Viewpoints")
    grandchild = Session.objects.get(parent_session_id=tram.id)
    _expect_tree(page, tram, view, grandchild)
    # each with its latest words (streamed to this page while it ran)
    words = _tree(page).locator(f":scope > li[data-session='{view.id}'] > .sa-words")
    expect(words).to_have_text("Viewpoints: Graça and Santa Luzia.")
    # Sub-agents are not conversations of their own in the list.
    expect(page.locator("rtc-session-list li")).to_have_count(1)

    # Open one: its conversation, read-only, with the way back.
    _tree(page).locator(f"li[data-session='{view.id}'] > .row .sa-open").click()
    expect(page.locator("rtc-message-list .md").last).to_have_text(
        "Viewpoints: Graça and Santa Luzia.", timeout=10000)
    lineage = page.locator("rtc-task-panel [part=sub-agent-lineage]")
    expect(lineage).to_contain_text("Sub-agent Viewpoints")
    expect(page.locator("rtc-composer textarea")).to_be_hidden()
    expect(page.locator("rtc-composer [part=read-only]")).to_be_visible()
    expect(page.locator("rtc-message-list .fork")).to_have_count(0)
    lineage.locator("[data-act=parent]").click()
    expect(page.locator("rtc-message-list .md").last).to_have_text(
        "Research done: trams and viewpoints.")
    expect(page.locator("rtc-composer textarea")).to_be_visible()

    # After a reload without the cached state, the tree comes back from the server
    # (v1.session.list {parent_session_id}).
    page.evaluate("""async () => {
        const agent = document.querySelector('rtc-agent').agent;
        agent.sync.persist = async () => {};  // nothing saved again before the reload
        await agent.db.del('kv', 'snapshot');
    }""")
    page.reload()
    expect(page.locator("rtc-agent .conn")).to_have_text("connected", timeout=15000)
    page.locator("rtc-agent .bubble").click()
    _expect_tree(page, tram, view, grandchild)
    assert page.errors == []


def _expect_tree(page: Any, tram: Any, view: Any, grandchild: Any) -> None:
    tree = _tree(page)
    top = tree.locator(":scope > li.sa")
    expect(top).to_have_count(2, timeout=15000)
    # under the message that started them (the parent's subAgent call)
    anchor = str(tram.sub_agent_parent_message_id)
    assert anchor and str(view.sub_agent_parent_message_id) == anchor
    holder = page.locator(f"rtc-message-list .msg[data-id='{anchor}']")
    expect(holder.locator("ul[part=sub-agents] li.sa")).to_have_count(3)
    first = tree.locator(f":scope > li[data-session='{tram.id}']")
    expect(first.locator(":scope > .row .sa-title")).to_have_text("Tram lines")
    expect(first).to_have_attribute("data-state", "done", timeout=15000)
    nested = first.locator(f"ul[part=sub-agents] > li[data-session='{grandchild.id}']")
    expect(nested.locator(".sa-title")).to_have_text("Tram 28")
    second = tree.locator(f":scope > li[data-session='{view.id}']")
    expect(second.locator(":scope > .row .status")).to_have_text("done", timeout=15000)
