"""The chat page (tool_calling.contrib.chat) in a real browser, against the real system.

Debian's chromium through Playwright drives ``uvicorn project.asgi:application`` (with
``tests.settings_chat_web``: this tier's database, Redis and Celery workers, DEBUG on for the
static files, event streams that end after 3 s so the browser reconnects with Last-Event-ID
during every run); the chat model is a ``ReplayServer`` that streams its answers in pieces
(``chunk_delay``), reached by the workers through the real openai SDK. On failure every page's
screenshot, HTML and script errors are kept in the test's temporary directory (the path is
printed). Needs ``bash scripts/setup_browser.sh``; fails, never skips, without it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User

from project.demo.tools import get_weather
from tests.browser._browser import (
    artifacts_dir,
    chromium,
    require_browser,
    screenshot,
    sync_api,
)
from tool_calling import models
from tool_calling.sync import sync_tools
from tool_calling.testing import ReplayServer

from .conftest import WebServer, start_web_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("workers"),
]

PASSWORD = "correct horse battery staple"

# Records, in the page, every text the answers showed and every status a tool call had, so a
# test can tell that the text arrived in pieces and that a call was seen running; and the
# sequence of every run event the page's EventSource received and each (re)connection.
RECORDER = """
window.__answers = [];
window.__statuses = {};
window.__events = [];
window.__connections = 0;
const addListener = EventSource.prototype.addEventListener;
EventSource.prototype.addEventListener = function (type, listener, options) {
  if (type === "open" || type === "error") {
    return addListener.call(this, type, listener, options);
  }
  const recorded = function (event) {
    window.__events.push(JSON.parse(event.data).sequence);
    return listener.call(this, event);
  };
  return addListener.call(this, type, recorded, options);
};
const Source = window.EventSource;
window.EventSource = function (url, init) {
  const source = new Source(url, init);
  addListener.call(source, "open", () => { window.__connections += 1; });
  return source;
};
window.EventSource.prototype = Source.prototype;
Object.assign(window.EventSource, {CONNECTING: 0, OPEN: 1, CLOSED: 2});
document.addEventListener("DOMContentLoaded", () => {
  const transcript = document.getElementById("transcript");
  if (!transcript) { return; }
  const record = () => {
    const texts = [...transcript.querySelectorAll(".tc-assistant .tc-text")]
      .map((node) => node.textContent);
    const last = texts[texts.length - 1] || "";
    if (window.__answers[window.__answers.length - 1] !== last) { window.__answers.push(last); }
    for (const call of transcript.querySelectorAll(".tc-tool-call")) {
      const seen = window.__statuses[call.dataset.callId] ||= [];
      const status = call.dataset.status || "";
      if (seen[seen.length - 1] !== status) { seen.push(status); }
    }
  };
  new MutationObserver(record).observe(transcript, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
});
"""


@pytest.fixture(scope="module")
def web(workers: object) -> Iterator[WebServer]:
    """The example project under uvicorn, with the chat page's test settings."""
    server = start_web_server("web-chat", "tests.settings_chat_web")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _browser() -> None:
    require_browser()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    """Where this test keeps its screenshots (and, on failure, every page's HTML)."""
    return artifacts_dir(request.node.name)


@pytest.fixture
def alice() -> User:
    sync_tools()  # the demo tools and this tier's, enabled
    return User.objects.create_user("alice", password=PASSWORD)


def log_in(page: Any, base_url: str, username: str) -> None:
    """Open the front door, get sent to the login form, log in, land on the chat page."""
    page.goto(f"{base_url}/")
    assert re.search(r"/login/\?next=/$", page.url), page.url
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_selector("#composer")
    assert page.url == f"{base_url}/"


def assert_resumed(page: Any) -> None:
    """This page load received the run's events 1, 2, ... once each, across reconnections."""
    events, connections = page.evaluate("[window.__events, window.__connections]")
    assert events == list(range(1, len(events) + 1)), events
    assert connections >= 2, connections  # the streams end every 3 s: it reconnected


def send(page: Any, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def wait_for_the_end(page: Any) -> None:
    """Wait until the page says the answer is complete (it takes messages again)."""
    sync_api.expect(page.locator("#send")).to_have_attribute(
        "aria-disabled", "false", timeout=20_000
    )


def focused(page: Any) -> str:
    """What has the keyboard focus: its id, else its tag and text."""
    return page.evaluate(
        "(() => { const e = document.activeElement;"
        " return e.id || `${e.tagName.toLowerCase()}: ${e.textContent.trim()}`; })()"
    )


def tab_to(page: Any, wanted: str, *, backwards: bool = False, limit: int = 40) -> None:
    """Press Tab (Shift+Tab backwards) until ``focused(page)`` is ``wanted``."""
    seen = []
    for _ in range(limit):
        page.keyboard.press("Shift+Tab" if backwards else "Tab")
        seen.append(focused(page))
        if seen[-1] == wanted:
            return
    pytest.fail(f"{wanted!r} is not reachable by keyboard; the focus went to {seen}")


def answer_pieces(page: Any, answer: str) -> list[str]:
    """The distinct partial texts of ``answer`` the page showed before the whole of it."""
    seen = page.evaluate("window.__answers")
    return [text for text in seen if text and text != answer and answer.startswith(text)]


# -- sending a message ---------------------------------------------------------------------------

ANSWER = (
    "It slept well, according to the tool. Models sometimes write markup such as "
    "<img src=x onerror=\"document.title='pwned'\"> and it must show as text, never run."
)


def test_a_user_sends_a_message_and_watches_the_answer_stream_with_its_tool_call(
    web: WebServer, alice: User, artifacts: Path
) -> None:
    steps = [
        {
            "text": "Let me ask the tool. ",
            "tool_calls": [{"name": "sleepy", "arguments": {"key": "<b>k1</b>", "seconds": 1}}],
        },
        # About 4.5 s of streaming: more than a reconnection's 2 s pause can swallow.
        {"text": ANSWER, "chunk_delay": 0.45},
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT), chromium(artifacts) as browser:
        page = browser.new_page("alice")
        page.add_init_script(RECORDER)
        log_in(page, web.url, "alice")
        assert page.title() == "New conversation · Chat"
        page.get_by_label("Message").fill("Sleep on it, please")
        page.get_by_role("button", name="Send").click()

        # The page of the new conversation follows the run.
        page.wait_for_url(re.compile(r"/conversations/[0-9a-f-]{36}/$"))
        call = page.locator(".tc-tool-call")
        # (The recorder saw it running: a reconnection may deliver both events at once.)
        sync_api.expect(call).to_have_attribute("data-status", "succeeded", timeout=20_000)
        sync_api.expect(call.locator(".tc-tool-status")).to_have_text("Succeeded")
        final = page.locator(".tc-assistant .tc-text").last
        sync_api.expect(final).to_have_text(ANSWER, timeout=20_000)
        sync_api.expect(page.locator("#send")).to_have_attribute("aria-disabled", "false")

        transcript = page.locator("#transcript")
        live = {
            "pieces": answer_pieces(page, ANSWER),
            "statuses": page.evaluate("window.__statuses"),
            "texts": page.locator(".tc-message .tc-text").all_inner_texts(),
            "duration": call.locator(".tc-tool-duration").inner_text(),
            "arguments_open": call.locator("details.tc-tool-arguments").get_attribute("open"),
            "arguments": call.locator("details.tc-tool-arguments pre").text_content(),
            "result": call.locator("details.tc-tool-result pre").text_content(),
            "markup": transcript.locator("img, b").count(),
            "title": page.title(),
            "sidebar": page.locator("#conversation-list a").all_inner_texts(),
        }
        assert_resumed(page)
        # The same conversation, read from what is stored, after a reload.
        page.reload()
        stored = {
            "texts": page.locator(".tc-message .tc-text").all_inner_texts(),
            "status": call.locator(".tc-tool-status").inner_text(),
            "result": call.locator("details.tc-tool-result pre").text_content(),
            "markup": transcript.locator("img, b").count(),
        }
        browser.assert_no_script_errors()

    # The answer arrived in pieces, each one longer, before the whole of it.
    assert len(live["pieces"]) >= 3, live["pieces"]
    assert live["pieces"] == sorted(live["pieces"], key=len)
    # The call showed while it ran, then how it ended and how long it took.
    (statuses,) = live["statuses"].values()
    assert statuses.index("running") < statuses.index("succeeded"), statuses
    duration = int(live["duration"].removesuffix(" ms"))
    assert duration >= 1000
    # Arguments and result are folded away, and everything is text, never markup.
    assert live["arguments_open"] is None
    assert json.loads(live["arguments"]) == {"key": "<b>k1</b>", "seconds": 1}
    assert live["result"].startswith("<b>k1</b> slept 1 s in pid ")
    assert live["texts"] == ["Sleep on it, please", "Let me ask the tool. ", ANSWER]
    assert live["markup"] == 0 and live["title"] != "pwned"
    assert live["sidebar"] == ["Sleep on it, please"]
    assert stored == {
        "texts": live["texts"],
        "status": "Succeeded",
        "result": live["result"],
        "markup": 0,
    }
    conversation = models.Conversation.objects.get(owner=alice)
    assert conversation.title == "Sleep on it, please"
    assert models.Run.objects.get(conversation=conversation).answer == ANSWER


# -- approvals -------------------------------------------------------------------------------------

TWO_REFUNDS = [
    {
        "tool_calls": [
            {"name": "refund_order", "arguments": {"order_id": "42", "amount": 30}},
            {"name": "refund_order", "arguments": {"order_id": "43", "amount": 99}},
        ]
    },
    {"text": "One refund went through; the other was denied.", "chunk_delay": 0.1},
]
REASON = "Over the refund limit <script>window.__xss = 1</script>"

# Holds back, for 3 s, the page's reads of stored messages (GET /api/conversations/{id}/?after=N,
# where the results of tool calls come from), as a loaded server does: the answer then streams
# in before the results arrive, and the page must still show them all before it says the answer
# is complete.
SLOW_RESULT_READS = """
const fetchNow = window.fetch;
window.fetch = async function (url, init) {
  if (String(url).includes("?after=")) {
    await new Promise((resolve) => setTimeout(resolve, 3000));
  }
  return fetchNow.call(this, url, init);
};
"""


def test_an_approver_edits_and_approves_one_call_and_denies_another_and_the_run_goes_on(
    web: WebServer, alice: User, artifacts: Path
) -> None:
    rita = User.objects.create_user("rita", password=PASSWORD)  # an approver, not staff
    rita.user_permissions.add(
        Permission.objects.get(
            content_type__app_label="tool_calling", codename="approve_toolexecution"
        )
    )
    with ReplayServer(TWO_REFUNDS, port=settings.MODEL_PORT), chromium(artifacts) as browser:
        page = browser.new_page("alice")
        page.add_init_script(SLOW_RESULT_READS)
        log_in(page, web.url, "alice")
        assert page.locator("#approvals").count() == 0  # alice may not approve
        send(page, "Refund orders 42 and 43")
        page.wait_for_url(re.compile(r"/conversations/"))
        calls = page.locator(".tc-tool-call")
        sync_api.expect(calls).to_have_count(2)
        for call in calls.all():
            sync_api.expect(call.locator(".tc-tool-status")).to_have_text("Awaiting approval")
            sync_api.expect(call.locator(".tc-tool-note")).to_have_text(
                "Waiting for a person to approve this call."
            )

        queue = browser.new_page("rita")
        log_in(queue, web.url, "rita")
        items = queue.locator("#approvals-list .tc-approval")
        sync_api.expect(items).to_have_count(2)
        sync_api.expect(queue.locator("#approvals-count")).to_have_text("(2)")
        first = items.filter(has_text='"42"')
        meta = first.locator(".tc-approval-meta")
        sync_api.expect(meta.first).to_contain_text("Asked by alice · Asked ")
        sync_api.expect(meta.last).to_have_text("In “Refund orders 42 and 43”")
        sync_api.expect(first.locator(".tc-approval-message")).to_have_text(
            "The user wrote: Refund orders 42 and 43"
        )
        editor = first.get_by_label("Arguments (JSON)")
        shown_arguments = json.loads(editor.input_value())
        approve = first.get_by_role("button", name="Approve refund_order")
        error = first.locator(".tc-error")

        editor.fill('{"order_id": "42", "amount": ')
        approve.click()
        sync_api.expect(error).to_contain_text("The arguments are not valid JSON: ")
        editor.fill('["42", 10]')
        approve.click()
        sync_api.expect(error).to_have_text(
            'The arguments must be a JSON object, like {"name": "value"}.'
        )
        editor.fill('{"order_id": "42", "amount": "lots"}')
        approve.click()  # valid JSON, but not what the tool's schema says: the server refuses
        sync_api.expect(error).to_contain_text("arguments: ")
        schema_error = error.inner_text()
        editor.fill('{"order_id": "42", "amount": 10}')
        approve.click()
        sync_api.expect(items).to_have_count(1)
        # The decision stays written where it was taken, not only announced.
        sync_api.expect(queue.locator("#approvals-status")).to_have_text("Approved refund_order.")

        second = items.first
        deny = second.get_by_role("button", name="Deny refund_order")
        deny.click()
        sync_api.expect(second.locator(".tc-error")).to_have_text(
            "Write a reason for denying the call."
        )
        second.get_by_label("Reason for denying (the model reads it)").fill(REASON)
        deny.click()
        sync_api.expect(items).to_have_count(0)
        sync_api.expect(queue.locator("#approvals-empty")).to_be_visible()

        # Alice's page, meanwhile: one call ran with the edited arguments, one was denied.
        approved = page.locator('.tc-tool-call[data-call-id="call_1"]')
        denied = page.locator('.tc-tool-call[data-call-id="call_2"]')
        sync_api.expect(approved).to_have_attribute("data-status", "succeeded", timeout=20_000)
        sync_api.expect(approved.locator(".tc-tool-note")).to_have_text(
            "Approved, with edited arguments."
        )
        sync_api.expect(denied).to_have_attribute("data-status", "denied")
        sync_api.expect(denied.locator(".tc-tool-note")).to_have_text(f"Denied: {REASON}")
        final = page.locator(".tc-assistant .tc-text:not([hidden])").last
        sync_api.expect(final).to_have_text(TWO_REFUNDS[1]["text"], timeout=20_000)
        # The answer streamed in while the results were still on their way (SLOW_RESULT_READS):
        # once the page says it is complete, they are in place.
        wait_for_the_end(page)
        seen = {
            "approved_result": approved.locator("details.tc-tool-result pre").text_content(),
            "denied_summary": denied.locator("details.tc-tool-result summary").text_content(),
            "denied_result": denied.locator("details.tc-tool-result pre").text_content(),
            "xss": page.evaluate("window.__xss"),
        }
        browser.assert_no_script_errors(
            rita="console: Failed to load resource: the server responded with a status of 400 "
            "(Bad Request)",
        )

    assert shown_arguments == {"order_id": "42", "amount": 30}
    assert "amount" in schema_error, schema_error
    assert seen["approved_result"] == "Refunded 10.00 EUR on order 42 (demo: no money moved)."
    assert seen["denied_summary"] == "Error of refund_order"
    assert REASON in seen["denied_result"]
    assert seen["xss"] is None
    ran, refused = models.ToolExecution.objects.filter(tool_name="refund_order").order_by(
        "tool_call_id"
    )
    assert (ran.status, ran.approval, ran.decided_by) == ("succeeded", "approved", rita)
    assert json.loads(ran.arguments) == {"order_id": "42", "amount": 10}
    assert json.loads(ran.original_arguments) == {"order_id": "42", "amount": 30}
    assert (refused.status, refused.decided_by, refused.decision_reason) == ("denied", rita, REASON)
    assert models.Run.objects.get().status == "succeeded"


CANCEL_THEN_REFUND = [
    {"tool_calls": [{"name": "cancel_booking", "arguments": {"booking_id": "B7"}}]},
    {"tool_calls": [{"name": "refund_order", "arguments": {"order_id": "B7", "amount": 40}}]},
    {"text": "Booking B7 is cancelled and refunded.", "chunk_delay": 0.05},
    {"tool_calls": [{"name": "cancel_booking", "arguments": {"booking_id": "B8"}}]},
    {"text": "Booking B8 is cancelled too.", "chunk_delay": 0.05},
]


def test_the_user_confirms_one_call_and_an_approver_approves_the_next(
    web: WebServer, alice: User, artifacts: Path
) -> None:
    """Both kinds of decision, each by the one person who may take it, on the chat page."""
    rita = User.objects.create_user("rita", password=PASSWORD)  # an approver, not staff
    rita.user_permissions.add(
        Permission.objects.get(
            content_type__app_label="tool_calling", codename="approve_toolexecution"
        )
    )
    with ReplayServer(CANCEL_THEN_REFUND, port=settings.MODEL_PORT), chromium(artifacts) as browser:
        page = browser.new_page("alice")
        log_in(page, web.url, "alice")
        send(page, "Cancel booking B7 and refund it")
        page.wait_for_url(re.compile(r"/conversations/"))
        cancel = page.locator(".tc-tool-call").first
        sync_api.expect(cancel).to_have_attribute("data-status", "awaiting_approval")
        sync_api.expect(cancel.locator(".tc-tool-note")).to_have_text(
            "This call waits for your confirmation before it runs."
        )

        # The approver sees it waiting for alice, with no button to take her decision.
        queue = browser.new_page("rita")
        log_in(queue, web.url, "rita")
        item = queue.locator("#approvals-list .tc-approval")
        sync_api.expect(item).to_have_count(1)
        sync_api.expect(item.locator(".tc-approval-waits")).to_have_text(
            "Waits for alice to confirm it first."
        )
        assert item.locator("button").count() == 0

        cancel.get_by_role(
            "button", name="Confirm, and always allow cancel_booking in this conversation"
        ).click()
        sync_api.expect(cancel.locator(".tc-tool-note")).to_have_text(
            "You confirmed it; its next calls in this conversation run without asking."
        )
        sync_api.expect(cancel).to_have_attribute("data-status", "succeeded", timeout=20_000)
        assert cancel.locator(".tc-confirmation").count() == 0

        # The refund waits for an approver: alice has no button for it, rita has.
        refund = page.locator(".tc-tool-call").nth(1)
        sync_api.expect(refund).to_have_attribute(
            "data-status", "awaiting_approval", timeout=20_000
        )
        sync_api.expect(refund.locator(".tc-tool-note")).to_have_text(
            "Waiting for a person to approve this call."
        )
        assert refund.locator(".tc-confirmation, button").count() == 0
        queue.get_by_role("button", name="Refresh").click()
        waiting = queue.locator("#approvals-list .tc-approval").filter(has_text="refund_order")
        waiting.get_by_role("button", name="Approve refund_order").click()
        sync_api.expect(queue.locator("#approvals-status")).to_have_text("Approved refund_order.")

        sync_api.expect(refund).to_have_attribute("data-status", "succeeded", timeout=20_000)
        final = page.locator(".tc-assistant .tc-text:not([hidden])").last
        sync_api.expect(final).to_have_text(CANCEL_THEN_REFUND[2]["text"], timeout=20_000)
        wait_for_the_end(page)  # the message box takes messages again

        # The standing decision: the next cancellation here runs without asking.
        page.get_by_role("textbox", name="Message").fill("Cancel booking B8 too")
        page.get_by_role("button", name="Send").click()
        again = page.locator(".tc-tool-call").nth(2)
        sync_api.expect(again).to_have_attribute("data-status", "succeeded", timeout=20_000)
        assert again.locator(".tc-confirmation").count() == 0
        sync_api.expect(page.locator(".tc-assistant .tc-text:not([hidden])").last).to_have_text(
            CANCEL_THEN_REFUND[4]["text"], timeout=20_000
        )
        wait_for_the_end(page)
        browser.assert_no_script_errors()

    cancelled, covered = models.ToolExecution.objects.filter(tool_name="cancel_booking").order_by(
        "created_at"
    )
    assert (covered.approval, covered.decided_by) == ("approved", alice)
    assert covered.decision_reason == "Covered by a standing decision of this conversation."
    assert (cancelled.status, cancelled.deciders, cancelled.decided_by) == (
        "succeeded",
        "user",
        alice,
    )
    refunded = models.ToolExecution.objects.get(tool_name="refund_order")
    assert (refunded.status, refunded.deciders, refunded.decided_by) == (
        "succeeded",
        "approver",
        rita,
    )


# -- a reload in the middle of a run ---------------------------------------------------------------

LONG_ANSWER = " ".join(f"word{number}" for number in range(1, 61)) + "."


def test_a_reload_in_the_middle_of_a_run_loses_and_repeats_nothing(
    web: WebServer, alice: User, artifacts: Path
) -> None:
    steps = [
        {"tool_calls": [{"name": "sleepy", "arguments": {"key": "k2", "seconds": 0.5}}]},
        {"text": LONG_ANSWER, "chunk_delay": 0.25},  # 20 pieces over 5 s
    ]
    with ReplayServer(steps, port=settings.MODEL_PORT), chromium(artifacts) as browser:
        page = browser.new_page("alice")
        page.add_init_script(RECORDER)
        log_in(page, web.url, "alice")
        send(page, "Write a long answer")
        page.wait_for_url(re.compile(r"/conversations/"))
        final = page.locator(".tc-assistant .tc-text:not([hidden])").last
        sync_api.expect(final).to_contain_text("word3 ", timeout=20_000)
        page.reload()  # while the answer streams
        sync_api.expect(final).to_contain_text("word12 ", timeout=20_000)
        partial = final.inner_text()
        page.reload()
        sync_api.expect(final).to_have_text(LONG_ANSWER, timeout=20_000)
        wait_for_the_end(page)
        seen = {
            "texts": page.locator(".tc-message .tc-text:not([hidden])").all_inner_texts(),
            "calls": page.locator(".tc-tool-call").count(),
            "status": page.locator(".tc-tool-call .tc-tool-status").inner_text(),
            "result": page.locator(".tc-tool-call details.tc-tool-result pre").text_content(),
        }
        seen["events"] = page.evaluate("window.__events")
        browser.assert_no_script_errors()

    assert LONG_ANSWER.startswith(partial) and partial != LONG_ANSWER
    assert {key: seen[key] for key in ("texts", "calls", "status")} == {
        "texts": ["Write a long answer", LONG_ANSWER],
        "calls": 1,
        "status": "Succeeded",
    }
    assert seen["result"].startswith("k2 slept 0.5 s in pid ")
    # The last page load read the run's events from the first, each once.
    assert seen["events"] == list(range(1, len(seen["events"]) + 1)), seen["events"]


# -- by keyboard alone ---------------------------------------------------------------------------

OSLO = get_weather("Oslo")
KEYBOARD = [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
    {
        "text": f"In Oslo it is {OSLO['conditions']} and {OSLO['temperature']} °C today.",
        "chunk_delay": 0.1,
    },
    {"tool_calls": [{"name": "refund_order", "arguments": {"order_id": "42", "amount": 30}}]},
    {"text": "Refunded 30.00 EUR on order 42.", "chunk_delay": 0.1},
]


@pytest.mark.screenshots
def test_the_page_works_by_keyboard_alone(web: WebServer, artifacts: Path) -> None:
    """Log in, send two messages, open a call's result and approve a call, all by keyboard.

    The moment the second call waits for approval is the docs' picture (docs/chat.png,
    ``scripts/screenshots.sh``).
    """
    sync_tools()
    ada = User.objects.create_user("ada", password=PASSWORD)
    ada.user_permissions.add(  # an approver (self-approval is on in this tier's web settings)
        Permission.objects.get(
            content_type__app_label="tool_calling", codename="approve_toolexecution"
        )
    )
    with ReplayServer(KEYBOARD, port=settings.MODEL_PORT), chromium(artifacts) as browser:
        page = browser.new_page("ada")
        page.goto(f"{web.url}/")
        assert focused(page) == "id_username"  # the login form starts there
        page.keyboard.type("ada")
        page.keyboard.press("Tab")
        page.keyboard.type(PASSWORD)
        page.keyboard.press("Enter")
        page.wait_for_selector("#composer")

        page.keyboard.press("Tab")
        assert focused(page) == "a: Skip to the message box"
        page.keyboard.press("Enter")
        assert focused(page) == "message"
        page.keyboard.type("What's the weather in Oslo?")
        page.keyboard.press("Control+Enter")
        page.wait_for_url(re.compile(r"/conversations/"))
        sync_api.expect(page.locator(".tc-assistant .tc-text:not([hidden])").last).to_have_text(
            KEYBOARD[1]["text"], timeout=20_000
        )
        wait_for_the_end(page)

        # The second message from the conversation's page, sent with its button.
        tab_to(page, "message")
        page.keyboard.type("Refund order 42, 30 EUR")
        page.keyboard.press("Tab")
        assert focused(page) == "send"
        page.keyboard.press("Enter")
        waiting = page.locator(".tc-tool-call").last
        sync_api.expect(waiting).to_have_attribute("data-status", "awaiting_approval")
        sync_api.expect(page.locator("#approvals-list .tc-approval")).to_have_count(1)

        # Open the weather call's result, from the message box backwards.
        tab_to(page, "message")
        tab_to(page, "summary: Result of get_weather", backwards=True)
        page.keyboard.press("Enter")
        result = page.locator(".tc-tool-call").first.locator("details.tc-tool-result")
        sync_api.expect(result).to_have_attribute("open", "")
        # Every time on the page (the conversation list's, the queue's) in one format.
        times = page.evaluate(
            "[...document.querySelectorAll('time[datetime]')].map(t => [t.textContent,"
            " new Date(t.getAttribute('datetime')).toLocaleString()])"
        )
        assert times and all(shown == expected for shown, expected in times), times
        screenshot(page, "chat", artifacts)

        # Approve the refund from the queue.
        tab_to(page, "message")
        tab_to(page, "button: Approve refund_order")
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        page.keyboard.press("Enter")
        sync_api.expect(page.locator("#approvals-list .tc-approval")).to_have_count(0)
        after_decision = focused(page)
        sync_api.expect(waiting).to_have_attribute("data-status", "succeeded", timeout=20_000)
        sync_api.expect(page.locator(".tc-assistant .tc-text:not([hidden])").last).to_have_text(
            KEYBOARD[3]["text"], timeout=20_000
        )
        browser.assert_no_script_errors()

    assert outline != "none"  # the focused control shows it
    assert after_decision == "approvals-heading"  # the keyboard stays in the queue
    assert (artifacts / "chat.png").stat().st_size > 10_000
    refund = models.ToolExecution.objects.get(tool_name="refund_order")
    assert (refund.status, refund.decided_by.username) == ("succeeded", "ada")
