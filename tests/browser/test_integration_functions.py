"""The page's functions (issue 13, item 3): declarative groups with JSON Schema parameters called
by the scripted model with valid and invalid arguments, the imperative registry, the VFS docs,
the tool call callbacks, and the function debugger."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import expose_tokens, integration_html, send, serve_page, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAGE = """
import { createRtcAgent, defineRegistry } from '/static/rtc-agent/rtc-agent.js';
window.calls = []; window.events = [];
const record = (kind) => (d) =>
  window.events.push([kind, d.path, d.result ?? d.error ?? d.progress ?? null]);
const agent = createRtcAgent({
  auth: { getToken: () => window.rtcTestToken(900) },
  agentName: 'ShopBot', persona: 'You help customers with their cart.',
  groups: [{ name: 'shop', description: 'The shopping cart', functions: [{
    name: 'addToCart', description: 'Add a product to the cart', class: 'read',
    parameters: { type: 'object', additionalProperties: false, required: ['productId'],
      properties: {
      productId: { type: 'string', minLength: 3, examples: ['SKU-1'] },
      quantity: { type: 'integer', minimum: 1, default: 1 } } },
    returns: { description: 'The new cart line', schema: { type: 'object' } },
    handler: async (params, onProgress) => {
      window.calls.push(params);
      onProgress(50);
      console.log('adding', params.productId);
      return { line: `${params.productId} x${params.quantity ?? 1}` };
    },
  }] }],
  on: { toolCallStart: record('start'), toolCallSuccess: record('success'),
        toolCallError: record('error'), toolCallProgress: record('progress') },
});
// The imperative registry: one more group, added after the element exists.
const registry = defineRegistry({ name: 'extra' });
registry.createGroup({ name: 'user', description: 'The signed-in customer' }).register({
  name: 'profile', description: 'Name and email', class: 'read',
  handler: () => ({ name: 'Ada' }) });
agent.registry = registry;
document.body.append(agent);
agent.setAttribute('open', '');
window.agent = agent;
"""


def _tool_results(model: Any) -> list[str]:
    return [m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool"]


def test_a_registered_function_is_validated_before_its_handler_runs(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "add the sku", "tool_offered": "shop__addToCart"},
                   {"tool_calls": [{"id": "ok", "name": "shop__addToCart",
                                    "arguments": {"productId": "SKU-42", "quantity": 2}}]})
    model.add_rule({"last_tool_result_contains": "SKU-42 x2"},
                   {"tool_calls": [{"id": "bad", "name": "shop__addToCart",
                                    "arguments": {"productId": "x", "quantity": 0,
                                                  "colour": "red"}}]})
    model.add_rule({"last_tool_result_contains": "invalid arguments"}, {"content": "One worked."})
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(PAGE))
    wait_connected(ipage)
    send(ipage, "please add the sku")
    expect(ipage.locator("rtc-message-list .md").last).to_have_text("One worked.", timeout=20000)
    ok, bad = _tool_results(model)
    assert json.loads(ok) == {"line": "SKU-42 x2"}
    assert bad.startswith("[Tool Error] invalid arguments for shop.addToCart: ")
    assert "/productId: String is too short (1 < 3)" in bad
    assert "/quantity: 0 is less than 1" in bad
    assert 'Property "colour"' in bad
    assert ipage.evaluate("window.calls") == [{"productId": "SKU-42", "quantity": 2}]  # once
    assert ipage.evaluate("window.events") == [
        ["start", "shop.addToCart", None], ["progress", "shop.addToCart", 50],
        ["success", "shop.addToCart", {"line": "SKU-42 x2"}],
        ["error", "shop.addToCart", bad.removeprefix("[Tool Error] ")]]
    first = model.requests[0].body
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert offered["shop__addToCart"]["description"] == "shop.addToCart: Add a product to the cart"
    assert offered["shop__addToCart"]["parameters"]["required"] == ["productId"]
    assert "user__profile" in offered
    system = "\n".join(m["content"] for m in first["messages"] if m["role"] == "system")
    assert "You are ShopBot." in system and "You help customers with their cart." in system
    docs = ipage.evaluate("""async () => {
        const vfs = window.agent.agent.vfs;
        return [await vfs.readText('/functions/shop/addToCart.md'),
                await vfs.readText('/functions/INDEX.md')];
    }""")
    assert "# shop.addToCart" in docs[0] and "rtcAgent.shop.addToCart" in docs[0]
    assert "The new cart line" in docs[0]
    assert "`shop.addToCart` (read)" in docs[1] and "`user.profile` (read)" in docs[1]
    assert ipage.errors == []


def test_scripts_call_grouped_functions_by_path(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    code = """
      const a = await rtcAgent.shop.addToCart({ productId: 'ABC-1' });
      const b = await rtcAgent.callFunction('user.profile', {});
      let refused = '';
      try { await rtcAgent.shop.addToCart({ productId: 7 }); } catch (e) { refused = e.message; }
      return { a, b, refused };
    """
    model.add_rule({"last_user_contains": "run the script"}, {"tool_calls": [
        {"name": "script", "arguments": {"action": "eval", "code": code}}]})
    model.add_rule({"last_role": "tool"}, {"content": "scripted"})
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(PAGE))
    wait_connected(ipage)
    ipage.select_option("rtc-agent select[name=mode]", "bypass")
    send(ipage, "run the script")
    expect(ipage.locator("rtc-message-list .md").last).to_have_text("scripted", timeout=20000)
    out = json.loads(_tool_results(model)[0])["result"]
    assert out["a"] == {"line": "ABC-1 x1"} and out["b"] == {"name": "Ada"}
    assert out["refused"].startswith("invalid arguments for shop.addToCart: /productId: ")


def test_the_function_debugger_calls_a_function_by_hand(ipage: Any, web: Any,
                                                        web_user: Any) -> None:
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(PAGE))
    wait_connected(ipage)
    ipage.click("rtc-agent header [data-act=functions]")
    dbg = ipage.locator("rtc-function-debugger")
    expect(dbg.locator("nav button")).to_have_text(["addToCart", "profile"])
    dbg.locator("nav button", has_text="addToCart").click()
    args = dbg.locator("textarea[name=args]")
    # prefilled from the schema's examples and defaults
    assert json.loads(args.input_value()) == {"productId": "SKU-1", "quantity": 1}
    dbg.locator("[data-act=run]").click()
    expect(dbg.locator("[data-part=status]")).to_contain_text("Succeeded")
    assert json.loads(dbg.locator("[data-part=result]").text_content()) == {"line": "SKU-1 x1"}
    expect(dbg.locator("[data-part=logs] li")).to_have_text([
        'call shop.addToCart({"productId":"SKU-1","quantity":1})', "progress 50", "adding SKU-1"])
    # invalid arguments: refused before the handler, the reason in the result and the log
    args.fill('{"productId": "ab", "quantity": 0}')
    dbg.locator("[data-act=run]").click()
    expect(dbg.locator("[data-part=status]")).to_contain_text("Failed")
    expect(dbg.locator("[data-part=result]")).to_contain_text("/quantity: 0 is less than 1")
    expect(dbg.locator("[data-part=logs] li[data-level=error]")).to_have_count(1)
    # not JSON: said so, nothing runs
    args.fill("{productId: ")
    dbg.locator("[data-act=run]").click()
    expect(dbg.locator("[data-part=status]")).to_contain_text("not valid JSON")
    assert ipage.evaluate("window.calls") == [{"productId": "SKU-1", "quantity": 1}]
    expect(dbg.locator("[data-part=history] li")).to_have_count(2)
    expect(dbg.locator("[data-part=history] li").first).to_have_attribute("data-ok", "false")
    # back to the conversation
    ipage.click("rtc-agent header [data-act=functions]")
    expect(ipage.locator("rtc-composer textarea")).to_be_visible()


def test_the_example_page_of_the_tutorial(ipage: Any, web: Any, worker: Any, model: Any,
                                          web_user: Any) -> None:
    """docs/examples/integration.html as an integrator copies it: sign in, ask, it runs."""
    from pathlib import Path

    model.add_rule({"last_user_contains": "two mugs", "tool_offered": "shop__addToCart"},
                   {"tool_calls": [{"name": "shop__addToCart",
                                    "arguments": {"product": "mug", "quantity": 2}}]})
    model.add_rule({"last_tool_result_contains": "mug"}, {"content": "Two mugs are in your cart."})
    html = (Path(__file__).resolve().parents[2] / "docs/examples/integration.html").read_text()
    ipage.route(lambda url: "/__integration__/integration.html" in url, lambda route: route.fulfill(
        status=200, content_type="text/html; charset=utf-8", body=html))
    ipage.goto(f"/__integration__/integration.html?server={web.http_url}")
    expect(ipage.locator("rtc-agent .signin [data-act=login]")).to_be_attached()  # signed out
    ipage.fill("input[name=email]", web_user.email)
    ipage.fill("input[name=password]", f"pw-{web_user.email}")
    ipage.click("#login button")
    wait_connected(ipage)
    expect(ipage.locator("#who")).to_have_text("assistant ready")
    send(ipage, "put two mugs in the cart")
    answer = ipage.locator("rtc-message-list .md").last
    expect(answer).to_have_text("Two mugs are in your cart.", timeout=20000)
    expect(ipage.locator("#cart")).to_have_text("2 \u00d7 mug")
    assert json.loads(_tool_results(model)[0]) == [{"product": "mug", "quantity": 2}]
    assert ipage.errors == []
