"""The widget shows context and memory (issue 11, item 11): the context ring from the server's
figures, the compaction mark with its readable summary, the memories saved in the session, and
the memories page (search, edit, delete, export) against the real API, checked in the database."""

from __future__ import annotations

import json
import math
import time
from decimal import Decimal
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


SUMMARY = ("## 1. Primary request and intent\nThe user plans a **trip to Lisbon**.\n\n"
           "## 7. Pending tasks\n- book the hotel")
PLAN = "Lisbon: three days by the river."
HOTELS = "Hotels by the river: " + "the blue one, " * 300 + "and the green one."


def test_compaction_shows_a_mark_and_the_readable_summary(page: Any, web: Any, worker: Any,
                                                          model: Any, web_user: Any) -> None:
    from apps.sessions.models import Message

    model.add_rule({"last_user_contains": "Primary request"}, {"content": SUMMARY})
    model.add_rule({"last_user_contains": "plan the trip"}, {"tool_calls": [
        {"name": "write", "arguments": {"path": "/notes/trip.md", "content": PLAN}}]})
    model.add_rule({"last_user_contains": "read the plan"}, {"tool_calls": [
        {"name": "read", "arguments": {"path": "/notes/trip.md"}}]})
    model.add_rule({"last_tool_result_contains": "three days"}, {"content": "It says three days."})
    model.add_rule({"last_role": "tool"}, {"content": "Written."})
    model.add_rule({"last_user_contains": "hotel"}, {"content": HOTELS})
    login(page, web_user)
    sid = _ask(page, "plan the trip to Lisbon", "Written.")
    _ask(page, "read the plan back", "It says three days.")
    send(page, "which hotel?")
    expect(page.locator("rtc-message-list .md").last).to_contain_text("the green one",
                                                                      timeout=20000)
    expect(page.locator("rtc-message-list [part=compaction]")).to_have_count(0)
    page.locator("rtc-session-list li[aria-current=true] [data-act=compact]").click()

    mark = page.locator("rtc-message-list [part=compaction]")
    expect(mark).to_have_count(1, timeout=20000)
    expect(mark).to_have_attribute("role", "separator")
    expect(mark).to_contain_text("Context compacted")
    summary = page.locator("rtc-message-list details[part=summary]")
    assert summary.get_attribute("open") is None  # collapsed until asked for
    expect(summary.locator("> summary")).to_have_text("Summary of the earlier conversation")
    summary.locator("> summary").focus()
    page.keyboard.press("Enter")  # opened from the keyboard
    body = summary.locator(".md")
    expect(body.locator("h2").first).to_have_text("1. Primary request and intent")
    expect(body.locator("strong")).to_have_text("trip to Lisbon")
    expect(body.locator("li")).to_have_text("book the hotel")
    # the file the summarised part had read, given back to the model, readable too
    file = summary.locator("details.file")
    expect(file.locator("summary")).to_have_text("/notes/trip.md")
    file.locator("summary").click()
    expect(file.locator("pre")).to_contain_text(PLAN)

    # the mark sits right before the first message the compaction kept (the long answer):
    # everything above it is what the summary replaced for the model
    stored = Message.objects.get(session_id=sid, content__type="summary")
    kept = Message.objects.get(pk=stored.parent_message_id)
    assert kept.content["type"] == "markdown" and "the green one" in kept.content["data"]
    ids = page.locator("rtc-message-list .msg").evaluate_all("ns => ns.map(n => n.dataset.id)")
    assert ids[ids.index(str(stored.id)) + 1] == str(kept.id)
    assert ids[-1] == str(kept.id)
    assert page.errors == []


# --- the context ring ----------------------------------------------------------------------------


def _settled_session(session_id: str, *, context_tokens: int) -> Any:
    """The session once the server has recorded a call whose prompt had this many tokens (the
    worker writes the figures when the model's answer is stored)."""
    from apps.sessions.models import Session

    deadline = time.monotonic() + 15
    while True:
        session = Session.objects.get(pk=session_id)
        if session.current_context_tokens == context_tokens:
            return session
        assert time.monotonic() < deadline, session.current_context_tokens
        time.sleep(0.1)


def _ring_words(s: Any) -> str:
    """What the ring says (its tooltip and accessible name), from the server's figures."""
    pct = math.floor(s.compression_progress + 0.5)
    tokens = f"{s.current_context_tokens:,} / {s.compression_threshold:,} tokens"
    words = [f"Context {pct}%", tokens]
    r = s.rounds_until_compression
    if r < 0:
        words.append("compaction due")
    elif r > 0:
        words.append(f"about {r:,} round{'' if r == 1 else 's'} until compaction")
    elif s.estimated_next_round_tokens > 0:
        words.append("compaction at the next round")
    if s.total_cost_usd > 0:
        cost = s.total_cost_usd
        words.append(f"cost ${cost:.2f}" if cost >= 1 else f"cost ${cost:.4f}")
    return " · ".join(words)


def _expect_ring(page: Any, session_id: str, session: Any) -> None:
    words = _ring_words(session)
    pct = math.floor(session.compression_progress + 0.5)
    listed = f"rtc-session-list li[data-id='{session_id}'] svg[part=context-ring]"
    for ring in (page.locator("rtc-context-bar svg[part=context-ring]"), page.locator(listed)):
        expect(ring).to_have_attribute("aria-label", words, timeout=10000)
        expect(ring.locator("title")).to_have_text(words)  # the tooltip
    expect(page.locator("rtc-context-bar .pct")).to_have_text(f"{pct}% context")


def test_context_ring_shows_the_servers_figures_as_they_change(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.ops.models import ModelPrice

    # A small window, so a few scripted answers fill it; prices, so the cost shows.
    ModelPrice.objects.create(model="scripted-model", context_window=20_000,
                              autocompact_buffer=4_000, input_per_million=Decimal("2"),
                              output_per_million=Decimal("8"))
    model.add_rule({"last_user_contains": "first"},
                   {"content": "One.", "usage": {"prompt_tokens": 5_000, "completion_tokens": 200}})
    model.add_rule({"last_user_contains": "second"},
                   {"content": "Two.", "usage": {"prompt_tokens": 9_000, "completion_tokens": 400}})
    model.add_rule({"last_user_contains": "third"},
                   {"content": "Three.",
                    "usage": {"prompt_tokens": 17_000, "completion_tokens": 300}})
    login(page, web_user)
    expect(page.locator("rtc-context-bar")).to_be_hidden()  # no session open yet
    sid = _ask(page, "the first question", "One.")
    first = _settled_session(sid, context_tokens=5_000)
    assert first.compression_threshold == 16_000 and 0 < first.compression_progress < 50
    _expect_ring(page, sid, first)
    expect(page.locator("rtc-context-bar svg[part=context-ring]")).to_have_attribute(
        "data-level", "ok")

    _ask(page, "the second question", "Two.")
    second = _settled_session(sid, context_tokens=9_000)
    assert 50 <= second.compression_progress < 80 and second.total_cost_usd > first.total_cost_usd
    _expect_ring(page, sid, second)
    expect(page.locator("rtc-context-bar svg[part=context-ring]")).to_have_attribute(
        "data-level", "filling")

    _ask(page, "the third question", "Three.")
    third = _settled_session(sid, context_tokens=17_000)
    assert third.compression_progress == 100 and third.rounds_until_compression == -1
    _expect_ring(page, sid, third)
    expect(page.locator("rtc-context-bar svg[part=context-ring]")).to_have_attribute(
        "data-level", "over")
    expect(page.locator("rtc-context-bar .detail")).to_contain_text("compaction due")
    assert page.errors == []


# --- memories ------------------------------------------------------------------------------------


TEA = "The user prefers green tea over coffee."
HOTEL = "Book the hotel by the river in Lisbon."


def _memories(user: Any) -> list[tuple[str, str, str]]:
    from apps.memory.models import UserMemory

    rows = UserMemory.objects.filter(user=user).order_by("id")
    return [(m.content, m.category, m.importance) for m in rows]


def _memory_page(page: Any) -> Any:
    return page.locator("rtc-memory-page")


def _item(page: Any, text: str) -> Any:
    """The memory showing ``text``, found by its text once, then by its id (while it is edited,
    its text is in a field, and after an edit it says something else)."""
    found = _memory_page(page).locator("li[data-id]", has_text=text)
    expect(found).to_have_count(1)
    return _memory_page(page).locator(f"li[data-id='{found.get_attribute('data-id')}']")


def test_memories_saved_by_the_agent_show_in_the_session_and_on_the_page(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.memory import services
    from apps.memory.models import SessionMemory, UserMemory

    services.user_memory_save(user_id=web_user.pk, content="The user lives in Porto.",
                              category="project", importance="low")  # not of this session
    model.add_rule({"last_user_contains": "remember"}, {"content": "Noting that.", "tool_calls": [
        {"name": "saveMemory",
         "arguments": {"content": TEA, "category": "user", "importance": "high"}},
        {"name": "saveSessionMemory", "arguments": {"category": "decision", "content": HOTEL}},
        {"name": "deleteMemory", "arguments": {"id": 987654}},  # no such memory: refused
    ]})
    model.add_rule({"last_tool_result_contains": "Saved"}, {"content": "I will remember."})
    login(page, web_user)
    sid = _ask(page, "please remember: green tea, and the river hotel", "I will remember.")

    # the memory tools ran on the server (no RTC): their calls show done, or failed
    expect(page.locator("rtc-message-list [part=tool]")).to_have_count(3)
    for name, status in (("saveMemory", "done"), ("saveSessionMemory", "done"),
                         ("deleteMemory", "failed")):
        expect(page.locator(f"rtc-message-list [part=tool][data-tool={name}]")).to_have_attribute(
            "data-status", status)
    expect(page.locator("rtc-message-list [part=tool][data-tool=deleteMemory] .status")
           ).to_have_text("failed")
    assert SessionMemory.objects.get(session_id=sid).content == HOTEL
    assert str(UserMemory.objects.get(user=web_user, content=TEA).session_id) == sid
    assert UserMemory.objects.filter(user=web_user).count() == 2  # Porto and the new one

    # the session's list: what was saved in it, and nothing else
    toggle = page.locator("rtc-context-bar [data-act=toggle]")
    expect(toggle).to_have_text("Session memories (2)", timeout=10000)
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.focus()
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    listed = page.locator("rtc-context-bar [part=session-memories] li")
    expect(listed).to_have_count(2)
    expect(listed.nth(0)).to_contain_text(TEA)
    expect(listed.nth(0)).to_contain_text("user · high")
    expect(listed.nth(1)).to_contain_text(HOTEL)
    expect(listed.nth(1)).to_contain_text("decision")

    # ... and on the memories page, beside the older one
    page.locator("rtc-context-bar [data-act=page]").click()
    items = _memory_page(page).locator("li[data-id]")
    expect(items).to_have_count(2, timeout=10000)
    expect(items.nth(0)).to_contain_text(TEA)
    expect(items.nth(1)).to_contain_text("Porto")

    # a memory the user edits there is what the session's list shows
    tea = _item(page, TEA)
    tea.get_by_role("button", name="Edit").click()
    tea.get_by_label("Memory", exact=True).fill("The user prefers jasmine tea.")
    tea.get_by_role("button", name="Save").click()
    expect(tea.locator(".content")).to_have_text("The user prefers jasmine tea.")
    page.locator("rtc-agent header [data-act=memories]").click()  # back to the chat
    expect(listed.nth(0)).to_contain_text("jasmine", timeout=10000)
    assert page.errors == []


def test_memories_page_searches_edits_deletes_and_exports(
        page: Any, web: Any, web_user: Any, make_user: Any, tmp_path: Any) -> None:
    from apps.memory import services

    other = make_user()
    services.user_memory_save(user_id=other.pk, content="Another user's secret tea.",
                              category="user", importance="critical")
    services.user_memory_save(user_id=web_user.pk, content="The user lives in Porto.",
                              category="project", importance="low")
    services.user_memory_save(user_id=web_user.pk, content=TEA, category="user",
                              importance="high")
    login(page, web_user)
    button = page.locator("rtc-agent header [data-act=memories]")
    button.click()
    expect(button).to_have_attribute("aria-pressed", "true")
    expect(page.locator("rtc-message-list")).to_be_hidden()
    search = _memory_page(page).get_by_role("searchbox", name="Search")
    expect(search).to_be_focused()
    items = _memory_page(page).locator("li[data-id]")
    status = _memory_page(page).locator("[role=status]")
    expect(items).to_have_count(2, timeout=10000)
    expect(status).to_have_text("2 memories")
    expect(_item(page, TEA)).to_contain_text("high")
    expect(_memory_page(page)).not_to_contain_text("secret")  # the user's own only

    # search and filters
    search.fill("porto")
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("Porto")
    search.fill("")
    expect(items).to_have_count(2)
    _memory_page(page).get_by_label("Category").select_option("user")
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text(TEA)
    _memory_page(page).get_by_label("Category").select_option("")
    _memory_page(page).get_by_label("Importance").select_option("critical")
    expect(status).to_have_text("No memory matches this search.")
    expect(items).to_have_count(0)
    _memory_page(page).get_by_label("Importance").select_option("")
    expect(items).to_have_count(2)

    # edit from the keyboard: content and importance, saved through the API
    edited = _item(page, TEA)
    edited.get_by_role("button", name="Edit").focus()
    page.keyboard.press("Enter")
    editor = edited.locator("form.edit")
    expect(editor.get_by_label("Memory", exact=True)).to_be_focused()
    editor.get_by_label("Memory", exact=True).fill("The user prefers jasmine tea.")
    editor.get_by_label("Importance").select_option("critical")
    editor.get_by_role("button", name="Save").focus()
    page.keyboard.press("Enter")
    expect(edited.locator(".content")).to_have_text("The user prefers jasmine tea.")
    expect(edited).to_contain_text("critical")
    expect(edited.get_by_role("button", name="Edit")).to_be_focused()
    assert _memories(web_user) == [("The user lives in Porto.", "project", "low"),
                                   ("The user prefers jasmine tea.", "user", "critical")]

    # bad edits: refused with the reason, nothing written, what was typed kept
    before = _memories(web_user)
    edited.get_by_role("button", name="Edit").click()
    box = edited.get_by_label("Memory", exact=True)
    patches: list[str] = []
    page.on("request", lambda r: patches.append(r.url) if r.method == "PATCH" else None)
    box.fill("   ")
    edited.get_by_role("button", name="Save").click()
    expect(edited.locator("[role=alert]")).to_have_text("A memory cannot be empty.")
    assert patches == []  # refused before any request
    box.fill("x" * 4001)
    edited.get_by_role("button", name="Save").click()
    expect(edited.locator("[role=alert]")).to_contain_text("at most 4000")
    assert len(patches) == 1
    expect(box).to_have_value("x" * 4001)
    expect(box).to_be_focused()
    assert _memories(web_user) == before
    page.keyboard.press("Escape")  # leaves the edit, unchanged
    expect(edited.locator("form.edit")).to_have_count(0)
    expect(edited).to_contain_text("The user prefers jasmine tea.")
    expect(edited.get_by_role("button", name="Edit")).to_be_focused()

    # delete: asked in place; "Keep it" keeps it, then Delete removes it
    porto = _item(page, "Porto")
    porto.get_by_role("button", name="Delete").click()
    expect(porto.get_by_role("button", name="Keep it")).to_be_focused()
    page.keyboard.press("Enter")
    expect(porto.get_by_role("button", name="Delete")).to_be_focused()
    assert len(_memories(web_user)) == 2
    porto.get_by_role("button", name="Delete").click()
    porto.get_by_role("button", name="Delete", exact=True).click()
    expect(items).to_have_count(1)
    expect(status).to_have_text("1 memory")
    assert _memories(web_user) == [("The user prefers jasmine tea.", "user", "critical")]

    # export: a JSON file with everything the user has, and only theirs
    with page.expect_download() as info:
        _memory_page(page).get_by_role("button", name="Export JSON").click()
    download = info.value
    assert download.suggested_filename.startswith("memories-")
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    exported = json.loads(path.read_text())
    assert [m["content"] for m in exported["memories"]] == ["The user prefers jasmine tea."]
    assert "secret" not in path.read_text()
    expect(status).to_have_text(f"Exported to {download.suggested_filename}. 1 memory")

    # back to the conversation, from the keyboard
    page.keyboard.press("Escape")
    expect(page.locator("rtc-message-list")).to_be_visible()
    expect(button).to_be_focused()
    expect(button).to_have_attribute("aria-pressed", "false")
    assert page.errors == []
