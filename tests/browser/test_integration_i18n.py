"""Chinese words of the task panel, the context bar and the memories page (issue 13, item 5):
a page with ``lang="zh-CN"`` runs a scripted conversation that sets a goal, writes a todo list and
saves memories; every label of those views shows in Chinese, none of their English ones is left,
and switching the page to English redraws them in place."""
# ruff: noqa: RUF001  (Chinese text is written with its own full-width punctuation)

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import expose_tokens, integration_html, send, serve_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

IMPORT = "import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js';\n"
PLAN = [
    {"content": "订机票", "status": "in_progress", "active_form": "正在订机票"},
    {"content": "订酒店", "status": "pending", "active_form": "正在订酒店"},
    {"content": "安排行程", "status": "pending", "active_form": "正在安排行程"},
]
TEA = "用户喜欢绿茶。"
PORTO = "用户住在波尔图。"
HOTEL = "住在河边的酒店。"

# The English words of the three views (labels, states, aria-labels, titles, placeholders): none
# may remain in Chinese. Server data (memory texts, the session note's category) is not words.
ENGLISH = [
    "Todo list", " done", "Goal", "rounds", "Cancel goal", "active", "in progress", "pending",
    "Session memories", "% context", "Context ", "tokens", "no figures yet",
    "All your memories", "Memories saved in this session", "Kept for your later sessions",
    "A note of this session", "Your memories", "Export JSON", "Back to chat", "Search",
    "Words in a memory", "Category", "Importance", "All categories", "Any importance",
    "Load more", "memories", "saved ", "Edit", "Delete", "Keep it", "cannot be undone",
    "Memory", "Save", "Cancel", "high", "low", "project", "user ·",
]


def _words(ipage: Any, tag: str) -> str:
    """Everything a person reads or hears in the shadow root of ``tag``: its text (options
    included, styles excluded) and its aria-labels, titles and placeholders."""
    return str(ipage.evaluate("""(tag) => {
        const host = document.querySelector('rtc-agent').shadowRoot.querySelector(tag);
        const root = host.shadowRoot;
        const out = [];
        for (const el of root.querySelectorAll('*')) {
          if (el.tagName === 'STYLE') continue;
          for (const n of el.childNodes) if (n.nodeType === 3) out.push(n.textContent);
          for (const a of ['aria-label', 'title', 'placeholder']) {
            if (el.hasAttribute(a)) out.push(el.getAttribute(a));
          }
        }
        return out.join(' | ');
    }""", tag))


def _no_english(ipage: Any, tag: str) -> None:
    words = _words(ipage, tag)
    left = [w for w in ENGLISH if w in words]
    assert not left, f"{tag} still says {left}: {words}"


def test_task_panel_context_bar_and_memories_page_in_chinese(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.memory import services
    from apps.tasks.models import Goal

    services.user_memory_save(user_id=web_user.pk, content=PORTO, category="project",
                              importance="low")
    model.add_rule({"last_user_contains": "hello"}, {"content": "你好。"})
    model.add_rule({"last_user_contains": "/goal the trip is planned"}, {"tool_calls": [
        {"name": "todoWrite", "arguments": {"todos": PLAN}},
        {"name": "saveMemory", "arguments": {"content": TEA, "category": "user",
                                             "importance": "high"}},
        {"name": "saveSessionMemory", "arguments": {"category": "decision", "content": HOTEL}},
    ]})
    # The rounds stream slowly, so the goal stays active while its row is read and cancelled.
    model.add_rule({"last_role": "tool"}, {"content": "正在规划。" * 20, "chunk_delay": 0.15})
    model.add_rule({"last_user_contains": "continue working towards the goal"},
                   {"content": "继续规划。" * 20, "chunk_delay": 0.15})

    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(IMPORT + """
        const a = createRtcAgent({ lang: 'zh-CN',
                                   auth: { getToken: () => window.rtcTestToken(900) } });
        document.body.append(a);
        a.setAttribute('open', '');
        window.agent = a;""", lang="zh-CN"))
    expect(ipage.locator("rtc-agent .conn")).to_have_text("已连接", timeout=15000)
    send(ipage, "hello")
    expect(ipage.locator("rtc-message-list .md").last).to_have_text("你好。", timeout=20000)
    ipage.fill("rtc-composer textarea", "/goal the trip is planned")
    ipage.keyboard.press("Enter")

    # the command's answer, then the task panel: the goal, then the todo list the agent wrote
    expect(ipage.locator("rtc-composer [part=command-notice]")).to_contain_text(
        "目标已设定（最多 50 轮）", timeout=10000)
    goal = ipage.locator("rtc-task-panel [part=goal]")
    expect(goal.locator(".cond")).to_have_text("the trip is planned", timeout=10000)
    expect(goal).to_have_attribute("aria-label", "目标")
    expect(goal.locator(".label")).to_have_text("目标")
    expect(goal.locator(".badge")).to_have_text("进行中")
    expect(goal.locator(".rounds")).to_have_text(re.compile(r"^\d+ / 50 轮$"))
    assert (goal.locator(".rounds").get_attribute("title")
            == "为该目标工作的轮数（回合），最多 50 轮")
    todos = ipage.locator("rtc-task-panel [part=todos]")
    expect(todos.locator("summary")).to_have_text("待办列表 · 已完成 0/3", timeout=10000)
    expect(todos.locator("ol")).to_have_attribute("aria-label", "待办列表")
    expect(todos.locator("li[data-status=in_progress] .text")).to_have_text("正在订机票")
    expect(todos.locator("li[data-status=in_progress] .sr")).to_have_text("(进行中)")
    expect(todos.locator("li[data-status=pending] .sr").first).to_have_text("(待处理)")
    expect(goal.locator("[data-act=cancel-goal]")).to_have_text("取消目标")
    _no_english(ipage, "rtc-task-panel")

    # the context bar: the context figures and the memories saved in this session
    bar = ipage.locator("rtc-context-bar")
    expect(bar.locator(".pct")).to_have_text(re.compile(r"^上下文 \d+%$"))
    toggle = bar.locator("[data-act=toggle]")
    expect(toggle).to_have_text("本会话记忆 (2)", timeout=10000)
    toggle.click()
    expect(bar.locator("[part=session-memories]")).to_have_attribute("aria-label",
                                                                     "本会话保存的记忆")
    listed = bar.locator("[part=session-memories] li")
    expect(listed).to_have_count(2)
    expect(listed.nth(0)).to_contain_text(TEA)
    expect(listed.nth(0).locator(".cat")).to_have_text("个人 · 高")
    assert listed.nth(0).locator(".cat").get_attribute("title") == "保留给你以后的会话"
    assert listed.nth(1).locator(".cat").get_attribute("title") == "本会话的笔记"
    expect(bar.locator("[data-act=page]")).to_have_text("查看全部记忆…")
    ring = bar.locator("svg.ring")
    expect(ring).to_have_attribute("aria-label", re.compile(r"^上下文 \d+%"))
    _no_english(ipage, "rtc-context-bar")

    # the goal is cancelled from its Chinese button
    goal.locator("[data-act=cancel-goal]").click()
    expect(goal.locator(".badge")).to_have_text("已取消", timeout=10000)
    assert Goal.objects.get(condition="the trip is planned").status == "cancelled"

    # the memories page
    bar.locator("[data-act=page]").click()
    mem = ipage.locator("rtc-memory-page")
    items = mem.locator("li[data-id]")
    expect(items).to_have_count(2, timeout=10000)
    expect(mem.locator("h2")).to_have_text("你的记忆")
    expect(mem.locator("[role=status]")).to_have_text("2 条记忆")
    expect(mem.get_by_role("searchbox", name="搜索")).to_have_attribute("placeholder",
                                                                      "记忆中的词语")
    expect(mem.get_by_role("search")).to_have_attribute("aria-label", "搜索你的记忆")
    expect(mem.locator("[data-act=export]")).to_have_text("导出 JSON")
    expect(mem.locator("[data-act=close]")).to_have_text("返回对话")
    category = mem.get_by_label("类别")
    expect(category.locator("option")).to_have_text(["全部类别", "个人", "反馈", "项目", "参考"])
    expect(mem.get_by_label("重要性").locator("option")).to_have_text(
        ["任意重要性", "低", "中", "高", "关键"])
    tea = items.filter(has_text=TEA)
    expect(tea.locator(".tag")).to_have_text(["个人", "高"])
    expect(tea.locator(".meta .muted")).to_have_text(re.compile(r"^保存于 "))
    expect(items.filter(has_text=PORTO).locator(".tag")).to_have_text(["项目", "低"])
    expect(tea.get_by_role("button", name=f"编辑记忆：{TEA}")).to_have_text("编辑")
    category.select_option("project")  # filters by the value, whatever the words
    expect(items).to_have_count(1)
    expect(mem.locator("[role=status]")).to_have_text("1 条记忆")
    category.select_option("")
    expect(items).to_have_count(2)
    _no_english(ipage, "rtc-memory-page")

    # asking before a delete, and the edit form
    tea.get_by_role("button", name=f"删除记忆：{TEA}").click()
    ask = tea.get_by_role("group", name="删除这条记忆？")
    expect(ask).to_contain_text("删除这条记忆？此操作无法撤销。")
    expect(ask.locator("[data-act=confirm-delete]")).to_have_text("删除")
    _no_english(ipage, "rtc-memory-page")
    ask.get_by_role("button", name="保留").click()
    tea.get_by_role("button", name="编辑").click()
    form = tea.get_by_role("form", name="编辑记忆")
    expect(form.get_by_label("记忆内容")).to_have_value(TEA)
    expect(form.locator("[type=submit]")).to_have_text("保存")
    expect(form.locator("[data-act=cancel]")).to_have_text("取消")
    _no_english(ipage, "rtc-memory-page")
    form.get_by_label("记忆内容").fill("  ")
    form.locator("[type=submit]").click()
    expect(tea.locator("[role=alert]")).to_have_text("记忆内容不能为空。")

    # the page switches to English: the same views redraw in place
    ipage.evaluate("window.agent.lang = 'en-US'")
    expect(mem.locator("h2")).to_have_text("Your memories")
    expect(mem.locator("[role=status]")).to_have_text("2 memories")
    expect(tea.locator("form.edit [type=submit]")).to_have_text("Save")
    ipage.locator("rtc-agent header [data-act=memories]").click()  # back to the chat
    expect(todos.locator("summary")).to_have_text(re.compile(r"^Todo list · \d of 3 done$"))
    expect(goal.locator(".badge")).to_have_text("cancelled")
    expect(toggle).to_have_text("Session memories (2)")
    assert ipage.errors == []
