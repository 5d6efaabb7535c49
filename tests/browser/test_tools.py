"""Tool calls executed by the widget: VFS tools, approval, the outbox across a reload, scripts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _tool_results(model: Any) -> list[str]:
    """The tool results in the last request to the model (it carries the whole conversation)."""
    return [m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool"]


def test_file_tools_run_in_the_browser(page: Any, web: Any, worker: Any, model: Any,
                                       web_user: Any) -> None:
    model.add_rule({"last_user_contains": "note"}, {"content": "Writing.", "tool_calls": [
        {"id": "w", "name": "write", "arguments": {"path": "/notes/a.md",
                                                  "content": "# Notes\nbuy milk\nbuy bread\n"}}]})
    model.add_rule({"last_tool_result_contains": "wrote"}, {"tool_calls": [
        {"id": "r", "name": "read",
         "arguments": {"path": "notes/./a.md", "offset": 1, "limit": 1}}]})
    model.add_rule({"last_tool_result_contains": "2\tbuy milk"}, {"tool_calls": [
        {"id": "e", "name": "edit", "arguments": {"path": "/notes/a.md", "old_string": "buy",
                                                 "new_string": "get"}}]})
    model.add_rule({"last_tool_result_contains": "not unique"}, {"tool_calls": [
        {"id": "e2", "name": "edit", "arguments": {"path": "/notes/a.md", "old_string": "milk",
                                                  "new_string": "oat milk"}}]})
    model.add_rule({"last_tool_result_contains": "1 replacement"}, {"tool_calls": [
        {"id": "g", "name": "grep", "arguments": {"pattern": "OAT", "caseSensitive": False}}]})
    model.add_rule({"last_tool_result_contains": "/notes/a.md:2:"}, {"tool_calls": [
        {"id": "f", "name": "find", "arguments": {"pattern": "**/*.md"}}]})
    model.add_rule({"last_tool_result_contains": "/notes/a.md"}, {"tool_calls": [
        {"id": "x", "name": "read", "arguments": {"path": "/../etc/passwd"}}]})
    model.add_rule({"last_tool_result_contains": "[Tool Error]"}, {"content": "All done."})
    login(page, web_user)
    send(page, "take a note")
    expect(page.locator("rtc-message-list .md").last).to_have_text("All done.", timeout=30000)
    results = _tool_results(model)
    assert results[:6] == [
        "wrote 27 bytes to /notes/a.md",
        "2\tbuy milk\n(1 more lines)",
        "[Tool Error] old_string is not unique in /notes/a.md (2 matches); add context or set "
        "replace_all",
        "edited /notes/a.md: 1 replacement(s)",
        "/notes/a.md:2:buy oat milk",
        "/notes/a.md",
    ]
    assert results[6].startswith("[Tool Error] path may not contain \"..\"")
    expect(page.locator("rtc-message-list .tool[data-status=done]")).to_have_count(5)
    expect(page.locator("rtc-message-list .tool[data-status=failed]")).to_have_count(2)
    # the file is in the VFS: the file panel lists and opens it
    page.click("rtc-agent header [data-act=files]")
    page.click("rtc-file-panel li[data-path='/notes/a.md']")
    expect(page.locator("rtc-file-panel pre")).to_have_text("# Notes\nbuy oat milk\nbuy bread\n")
    with page.expect_download() as dl:
        page.click("rtc-file-panel [data-act=download]")
    assert dl.value.suggested_filename == "a.md"
    assert page.errors == []


def test_edit_requires_a_prior_read(page: Any, web: Any, worker: Any, model: Any,
                                    web_user: Any) -> None:
    model.add_rule({"last_user_contains": "edit"}, {"tool_calls": [
        {"name": "edit", "arguments": {"path": "/x.md", "old_string": "a", "new_string": "b"}}]})
    model.add_rule({"last_role": "tool"}, {"content": "ok"})
    login(page, web_user)
    send(page, "edit blindly")
    expect(page.locator("rtc-message-list .md").last).to_have_text("ok", timeout=20000)
    assert _tool_results(model) == ["[Tool Error] read /x.md before editing it"]


def test_manual_mode_asks_and_reject_sends_the_reason(page: Any, web: Any, worker: Any,
                                                      model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "overwrite"}, {"tool_calls": [
        {"name": "write", "arguments": {"path": "/plan.md", "content": "new plan\n"}}]})
    model.add_rule({"last_tool_result_contains": "[Tool Rejected]"}, {"content": "Understood."})
    login(page, web_user)
    page.select_option("rtc-agent select[name=mode]", "manual")
    send(page, "overwrite my plan")
    approval = page.locator("rtc-approval")
    expect(approval.locator(".diff .add")).to_have_text("+ new plan", timeout=20000)
    expect(page.locator("rtc-message-list .tool .status")).to_have_text("awaiting approval")
    approval.locator("input[name=reason]").fill("keep the old plan")
    approval.locator("[data-act=reject]").click()
    expect(page.locator("rtc-message-list .md").last).to_have_text("Understood.", timeout=20000)
    assert _tool_results(model) == ["[Tool Rejected] keep the old plan"]
    expect(page.locator("rtc-message-list .tool[data-status=rejected]")).to_have_count(1)
    assert page.evaluate("""async () => { const a = document.querySelector('rtc-agent').agent;
        return (await a.vfs.list()).length; }""") == 0
    # the mode is remembered for this user across a reload
    page.reload()
    expect(page.locator("rtc-agent select[name=mode]")).to_have_value("manual", timeout=15000)


def test_approved_script_runs_sandboxed(page: Any, web: Any, worker: Any, model: Any,
                                        web_user: Any) -> None:
    code = """
      await rtcAgent.fs.write('/data.txt', 'a\\nb');
      console.log('lines', (await rtcAgent.fs.read('/data.txt')).split('\\n').length);
      const blocked = {};
      try { await fetch('/api/auth/me/'); blocked.fetch = false; }
      catch (e) { blocked.fetch = true; }
      try { document.cookie; blocked.cookie = false; } catch (e) { blocked.cookie = true; }
      try { parent.document; blocked.parent = false; } catch (e) { blocked.parent = true; }
      blocked.host = await rtcAgent.callFunction('double', {n: params.n});
      return blocked;
    """
    model.add_rule({"last_user_contains": "compute"}, {"tool_calls": [
        {"name": "script", "arguments": {"action": "eval", "code": code, "params": {"n": 21}}}]})
    model.add_rule({"last_role": "tool"}, {"content": "computed"})
    login(page, web_user)
    page.evaluate("""rtcAgent.registerFunction({name: 'double', description: 'n*2',
        class: 'read', handler: ({n}) => n * 2})""")
    page.evaluate("document.cookie = 'secret=1'")
    send(page, "compute it")  # edit mode: scripts still need approval
    page.locator("rtc-approval [data-act=approve]").click(timeout=20000)
    expect(page.locator("rtc-message-list .md").last).to_have_text("computed", timeout=20000)
    out = json.loads(_tool_results(model)[0])
    assert out["result"] == {"fetch": True, "cookie": True, "parent": True, "host": 42}
    assert out["logs"] == ["lines 2"]
    assert isinstance(out["duration_ms"], int)


def test_endless_script_is_stopped_by_the_time_limit(page: Any, web: Any, worker: Any,
                                                     model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "loop"}, {"tool_calls": [
        {"name": "script", "arguments": {"action": "eval", "code": "while (true) {}"}}]})
    model.add_rule({"last_role": "tool"}, {"content": "stopped"})
    login(page, web_user)
    # a short limit for the test; the page must stay responsive while the loop spins
    result = page.evaluate("""async () => {
        const { runScript } = await import('/static/rtc-agent/lib/sandbox.js');
        let ticks = 0; const t = setInterval(() => ticks++, 50);
        const out = await runScript({ code: 'while (true) {}', timeoutMs: 1500,
                                      handleCall: () => null });
        clearInterval(t);
        return { out, ticks, frames: document.querySelectorAll('iframe').length };
    }""")
    assert result["out"]["error"].startswith("script stopped: time limit")
    assert result["ticks"] > 10 and result["frames"] == 0


def test_ask_user_questions_are_answered(page: Any, web: Any, worker: Any, model: Any,
                                         web_user: Any) -> None:
    questions = [{"question": "Which colour?", "header": "Colour", "options": [
        {"label": "Red", "description": "warm"}, {"label": "Blue"}]},
        {"question": "Which size?", "header": "Size", "options": [{"label": "S"}, {"label": "M"}]}]
    model.add_rule({"last_user_contains": "choose"}, {"tool_calls": [
        {"name": "askUser", "arguments": {"questions": questions}}]})
    model.add_rule({"last_role": "tool"}, {"content": "Thanks."})
    login(page, web_user)
    send(page, "choose for me")
    ask = page.locator("rtc-ask-user")
    ask.locator("fieldset[data-q='0'] input[value='1']").check(timeout=20000)
    ask.locator("fieldset[data-q='1'] input[value=other]").check()
    ask.locator("input[name=other1]").fill("XL")
    ask.locator("[data-act=answer]").click()
    expect(page.locator("rtc-message-list .md").last).to_have_text("Thanks.", timeout=20000)
    assert json.loads(_tool_results(model)[0]) == [
        {"question": "Which colour?", "answer": ["Blue"]},
        {"question": "Which size?", "answer": ["XL"]}]


def test_host_functions_are_offered_to_the_model_and_run_in_the_page(
    page: Any, web: Any, worker: Any, model: Any, web_user: Any
) -> None:
    model.add_rule({"last_user_contains": "title", "tool_offered": "pageTitle"},
                   {"tool_calls": [{"name": "pageTitle", "arguments": {"upper": True}}]})
    model.add_rule({"last_role": "tool"}, {"content": "got the title"})
    login(page, web_user)
    page.evaluate("""rtcAgent.registerFunction({name: 'pageTitle', description: 'The page title',
        parameters: {type: 'object', properties: {upper: {type: 'boolean'}}},
        class: 'read',
        handler: ({upper}) => upper ? document.title.toUpperCase() : document.title})""")
    title = page.evaluate("document.title")
    send(page, "what is the title?")
    expect(page.locator("rtc-message-list .md").last).to_have_text("got the title", timeout=20000)
    offered = {t["function"]["name"]: t["function"] for t in model.requests[0].body["tools"]}
    assert offered["pageTitle"]["description"] == "The page title"
    assert _tool_results(model) == [title.upper()]  # class read: no approval in edit mode
