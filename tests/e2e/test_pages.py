"""The pages ``chronicle show --html`` and ``chronicle diff --html`` write, opened in a real
browser: headless Chromium from the operating system's packages (``/usr/bin/chromium``; CI's
``.ci/run`` installs it), driven by Playwright.

The trace is the multi-agent example's incident (examples/multi_agent.py: a support agent asks
a billing agent over HTTP, which refunds $9.8M), recorded against the session's control plane
with the example's own agents, and the what-if that replays the billing span with the fix (a
refund cap) recorded as a new trace. Each page is opened from its file with every request
routed: anything but the page itself fails the test, as does any console error.

Set ``CHRONICLE_PAGE_SCREENSHOTS=docs`` to write the screenshots the README shows
(docs/trace-page.png, docs/diff-page.png); otherwise they go to the test's own folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.cli import main
from chronicle.testing import LocalControlPlane
from tests.support.agents import AppServer
from tests.support.llm_server import (
    LlmServer,
    chat_text,
    chat_tool_calls,
    messages_text,
    messages_tool_use,
    tool_call,
)
from tests.support.workers import one_worker

pytestmark = one_worker("pages")

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ORDER = "ORD-9800000"


# ---- the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (the system's), or the test skipped saying there is none."""
    if not CHROMIUM.exists():
        pytest.skip("no Chromium (apt-get install chromium; .ci/run installs it)")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="no Playwright")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Opened:
    """A page opened from a file, and what it did: requests and console errors."""

    page: Any
    requests: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def check_quiet(self, path: Path) -> None:
        """Nothing but the page itself was requested, nothing was refused, no error logged."""
        assert self.refused == []
        assert self.requests == [path.as_uri()]
        assert self.errors == []


def shown(browser: Any, trace_id: str, url: str, path: Path, **options: Any) -> Opened:
    """The trace page ``chronicle show TRACE --url URL --html PATH`` writes (exit 0), opened
    with ``open_page``'s ``options``."""
    assert main(["show", trace_id, "--url", url, "--html", str(path)]) == 0
    return open_page(browser, path, **options)


def open_page(browser: Any, path: Path, *, javascript: bool = True, height: int = 900) -> Opened:
    context = browser.new_context(
        viewport={"width": 1400, "height": height}, java_script_enabled=javascript
    )
    page = context.new_page()
    opened = Opened(page)

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if url == path.as_uri():
            request_route.continue_()
        else:  # a request leaving the page: refused, and the test fails on it
            opened.refused.append(url)
            request_route.abort()

    context.route("**/*", route)
    page.on("request", lambda request: opened.requests.append(request.url))

    def console(message: Any) -> None:
        if message.type == "error":
            opened.errors.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda error: opened.errors.append(str(error)))
    page.goto(path.as_uri())
    return opened


def screenshot(opened: Opened, name: str, tmp_path: Path) -> Path:
    folder = os.environ.get("CHRONICLE_PAGE_SCREENSHOTS")
    target = (Path(folder) if folder else tmp_path) / name
    opened.page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size > 10_000
    return target


# ---- the incident: the multi-agent example, recorded ------------------------------------------


@dataclass(frozen=True)
class Incident:
    url: str
    trace_id: str
    billing_span: str
    whatif_trace_id: str


@pytest.fixture(scope="module")
def incident(control_plane: LocalControlPlane) -> Incident:
    """The example's two agents recorded as one trace of two spans, and the fix's what-if: the
    billing span replayed with the refund cap live, recorded as a new trace."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import multi_agent  # type: ignore[import-not-found]  # examples/, on the path above
        from local_model import Model  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(EXAMPLES))
    billing = multi_agent.Billing()
    with LlmServer() as llm, AppServer(billing.app) as server:
        chronicle.configure(
            control_plane_url=control_plane.url,
            service_name="support-agent",
            inject_hosts=[f"127.0.0.1:{server.port}"],
            flush_interval=0.05,
        )
        chronicle.instrument_httpx()
        try:
            model = Model(llm)
            anthropic_client, openai_client = model.anthropic(), model.openai()
            billing.client = chronicle.wrap(anthropic_client)
            support = chronicle.wrap(openai_client)
            asked = {"order_id": ORDER, "question": "Refund the $47.00 blender."}
            refund = {"order_id": ORDER, "amount_cents": 980_000_000}
            model.script(
                chat_tool_calls(tool_call("ask_billing", asked)),
                messages_tool_use(tool_call("issue_refund", refund)),
                messages_text(f"Refunded 980000000 cents on {ORDER}."),
                chat_text("Billing has refunded your order."),
            )
            labels = {"session_id": "refund-2207", "user_id": "customer-23"}
            with chronicle.record("support-chat", labels=labels) as session:
                multi_agent.support_agent(support, server.url, f"Please refund {ORDER}.")
            assert chronicle.flush(10)
            billing.refund = multi_agent.issue_refund_gated
            plan = chronicle.ReplayPlan().run("issue_refund").expect_change(multi_agent.MESSAGES, 2)
            with chronicle.replay_trace(
                session.trace_id, billing.spans[0], plan, record=True
            ) as run:
                billing.agent(ORDER, "Refund the $47.00 blender.")
            assert chronicle.flush(10)
            assert run.new_trace_id is not None
            control_plane.wait_for_envelopes(session.trace_id, 7)
            control_plane.wait_for_envelopes(run.new_trace_id, 3)
        finally:
            chronicle.uninstrument_httpx()
            chronicle.reset()
            anthropic_client.close()
            openai_client.close()
    return Incident(control_plane.url, session.trace_id, billing.spans[0], run.new_trace_id)


def call(label: str) -> str:
    return f'[data-call="{label}"]'


def row(label: str) -> str:
    """The clickable row of a call (its ``<summary>``)."""
    return f"{call(label)} > details > summary"


# ---- the trace page ------------------------------------------------------------------------


def test_the_trace_page_nests_folds_and_opens_each_call(
    browser: Any, incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.html"
    opened = shown(browser, incident.trace_id, incident.url, path)
    assert f"wrote {path}: trace {incident.trace_id}, 7 calls" in capsys.readouterr().out
    page = opened.page

    # Nested as called: the billing agent's span inside the HTTP call that reached it, inside
    # the support agent's tool call; its refund inside that span.
    billing = '[data-span][data-service="billing-agent"]'
    inner = f"{call('ask_billing#1')} {call('http POST 127.0.0.1#1')} {billing} "
    assert page.locator(inner + call("issue_refund#1")).count() == 1
    assert page.locator(inner + call("anthropic.messages.create#2")).count() == 1
    assert page.locator(f"{billing} {call('openai.chat.completions.create#2')}").count() == 0
    assert page.locator("[data-lane]").evaluate_all("lanes => lanes.map(l => l.dataset.lane)") == [
        "support-agent",
        "billing-agent",
    ]
    assert "session_id=refund-2207" in page.locator("header").inner_text()

    # Folding ask_billing#1 hides the calls it made; unfolding shows them again.
    refund_row = page.locator(row("issue_refund#1"))
    assert refund_row.is_visible()
    page.locator(f"{call('ask_billing#1')} > label.caret").click()
    assert not refund_row.is_visible()
    assert page.locator(row("openai.chat.completions.create#2")).is_visible()
    assert "(1 call folded)" in page.locator(row("ask_billing#1")).inner_text()
    page.locator(f"{call('ask_billing#1')} > label.caret").click()
    assert refund_row.is_visible()
    page.get_by_role("button", name="Collapse all").click()
    assert not page.locator(row("openai.chat.completions.create#1")).is_visible()
    page.get_by_role("button", name="Expand all").click()
    assert refund_row.is_visible()

    # A click shows the call's input, output, model and tokens.
    refund_input = page.locator(f'{call("issue_refund#1")} [data-part="input"] pre').first
    assert not refund_input.is_visible()
    refund_row.click()
    assert refund_input.is_visible()
    assert '"amount_cents": 980000000' in refund_input.inner_text()
    model_call = call("anthropic.messages.create#1")
    page.locator(row("anthropic.messages.create#1")).click()
    facts = page.locator(f"{model_call} > details .about > dl").inner_text()
    assert "claude-sonnet-4-5" in facts
    assert "10 in · 5 out" in facts

    screenshot(opened, "trace-page.png", tmp_path)
    opened.check_quiet(path)


def test_the_trace_page_reads_without_javascript(
    browser: Any, incident: Incident, tmp_path: Path
) -> None:
    path = tmp_path / "trace.html"
    opened = shown(browser, incident.trace_id, incident.url, path, javascript=False)
    page = opened.page
    assert not page.locator("#toolbar").is_visible()  # the buttons need the script
    page.locator(f"{call('ask_billing#1')} > label.caret").click()
    assert not page.locator(row("issue_refund#1")).is_visible()
    page.locator(f"{call('ask_billing#1')} > label.caret").click()
    page.locator(row("issue_refund#1")).click()
    given = page.locator(f'{call("issue_refund#1")} [data-part="input"] pre').first
    assert '"order_id": "ORD-9800000"' in given.inner_text()
    opened.check_quiet(path)


def test_the_what_if_page_links_its_original_and_says_what_ran_live(
    browser: Any, incident: Incident, tmp_path: Path
) -> None:
    path = tmp_path / "whatif.html"
    opened = shown(browser, incident.whatif_trace_id, incident.url, path)
    page = opened.page
    assert page.locator("h1 .badge.whatif").inner_text() == "what-if"
    original = page.locator("a.original")
    assert original.get_attribute("href").endswith(f"#chronicle/{incident.trace_id}")
    assert incident.billing_span in original.inner_text()
    assert page.locator(f"{row('issue_refund#1')} .mode").inner_text() == "live"
    assert page.locator(f"{row('anthropic.messages.create#1')} .mode").inner_text() == "served"
    opened.check_quiet(path)


# ---- the diff page -------------------------------------------------------------------------


def test_the_diff_page_shows_the_first_divergence_and_its_json_diff(
    browser: Any, incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "diff.html"
    argv = ["diff", incident.trace_id, incident.whatif_trace_id, "--span", incident.billing_span]
    assert main([*argv, "--url", incident.url, "--html", str(path)]) == 1
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {path}\n")
    assert "the first divergence is issue_refund#1" in printed
    opened = open_page(browser, path)
    page = opened.page
    first = page.locator("#first-divergence")
    assert first.get_attribute("data-a") == "issue_refund#1"
    assert first.get_attribute("data-change") == "changed"
    assert first.evaluate("details => details.open")
    assert first.is_visible()
    lines = page.locator(".line").evaluate_all(
        "lines => lines.map(l => [l.dataset.change, l.dataset.a, l.dataset.b])"
    )
    assert lines == [
        ["same", "anthropic.messages.create#1", "anthropic.messages.create#1"],
        ["changed", "issue_refund#1", "issue_refund#1"],
        ["changed", "anthropic.messages.create#2", "anthropic.messages.create#2"],
    ]
    removed = first.locator("pre.jsondiff .removed").all_inner_texts()
    added = first.locator("pre.jsondiff .added").all_inner_texts()
    assert '-   "refunded_cents": 980000000' in removed
    assert '+   "blocked": true,' in added
    # The model's second call: its input changed (it reads the cap's refusal), shown on a click.
    second = page.locator('.line[data-a="anthropic.messages.create#2"]')
    assert not second.locator("pre.jsondiff").is_visible()
    second.locator("summary").click()
    assert "980000000 cents is over the cap" in second.locator("pre.jsondiff").inner_text()
    screenshot(opened, "diff-page.png", tmp_path)
    opened.check_quiet(path)


@chronicle.boundary("lookup", kind="tool")
def lookup(order_id: str, field_name: str) -> str:
    return f"{field_name} of {order_id}"


@chronicle.boundary("issue_refund", kind="tool")
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    return {"refunded_cents": amount_cents}


def long_agent(amount_cents: int) -> None:
    """An agent that looks up 40 fields, then refunds: a divergence at its last call."""
    for n in range(40):
        lookup(ORDER, f"field-{n}")
    issue_refund(ORDER, amount_cents)


@pytest.mark.parametrize("javascript", [True, False], ids=["script", "no-script"])
def test_a_late_first_divergence_is_scrolled_to(
    browser: Any, recording: Any, tmp_path: Path, javascript: bool
) -> None:
    traces = []
    for amount in (4_700, 980_000_000):
        with chronicle.record("long-agent") as session:
            long_agent(amount)
        recording.saved(session.trace_id, 41)
        traces.append(session.trace_id)
    path = tmp_path / "diff.html"
    url = recording.control_plane.url
    assert main(["diff", *traces, "--url", url, "--html", str(path)]) == 1
    opened = open_page(browser, path, javascript=javascript, height=600)
    page = opened.page
    first = page.locator("#first-divergence")
    assert first.get_attribute("data-a") == "issue_refund#1"
    page.wait_for_function(
        "document.getElementById('first-divergence').getBoundingClientRect().top < innerHeight"
    )
    box = first.locator("summary").bounding_box()
    assert box is not None
    assert box["y"] >= 0
    assert box["y"] + box["height"] <= 600  # on screen
    top = page.locator('.line[data-a="lookup#1"]').bounding_box()
    assert top is not None
    assert top["y"] + top["height"] < 0  # scrolled past the start
    assert "amount_cents: 4700 -> 980000000" in first.locator("[data-part=input] ul").inner_text()
    opened.check_quiet(path)


# ---- a hostile trace: markup in recorded values, a failure 120 calls deep ------------------

HOSTILE = '</pre></details><script>alert(1)</script><img src="http://192.0.2.1/x.png">'


@chronicle.boundary("dig", kind="tool")
def dig(depth: int, note: str) -> str:
    if depth == 0:
        raise RuntimeError(f"gave up: {note}")
    return dig(depth - 1, note)


def test_recorded_markup_is_text_and_a_deep_failure_is_shown(
    browser: Any, recording: Any, tmp_path: Path
) -> None:
    with chronicle.record("deep") as session, pytest.raises(RuntimeError):
        dig(119, HOSTILE)
    recording.saved(session.trace_id, 120)
    path = tmp_path / "deep.html"
    url = recording.control_plane.url
    opened = shown(browser, session.trace_id, url, path)
    page = opened.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    page.reload()  # with the dialog listener on, from the start
    assert page.locator(f"{call('dig#1')} {call('dig#120')}").count() == 1
    deepest = page.locator(call("dig#120"))
    assert deepest.get_attribute("data-status") == "failure"
    assert deepest.locator(".error-line").inner_text() == f"✗ RuntimeError: gave up: {HOSTILE}"
    assert page.locator("img, [data-call] script").count() == 0  # the markup stayed text
    deepest.locator("> details > summary").click()
    assert json.dumps(HOSTILE) in deepest.locator('[data-part="input"] pre').first.inner_text()
    assert dialogs == []
    assert opened.refused == []
    assert opened.errors == []


def test_recording_never_loads_jinja2(control_plane: LocalControlPlane) -> None:
    """Jinja2 is loaded when a page is written, not by recording (nor by loading the CLI)."""
    code = f"""
import sys
import chronicle
import chronicle.cli

chronicle.configure(control_plane_url={control_plane.url!r})

@chronicle.boundary("lookup", kind="tool")
def lookup(order_id):
    return {{"order_id": order_id}}

with chronicle.record("no-pages"):
    lookup("ORD-1")
assert chronicle.flush(10)
print(sorted(m for m in sys.modules if m.partition(".")[0] in ("jinja2", "markupsafe")))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.strip() == "[]"


def test_a_page_that_cannot_be_written_is_a_usage_error(
    incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-folder" / "trace.html"
    show = ["show", incident.trace_id, "--url", incident.url]
    assert main([*show, "--html", str(missing)]) == 2
    said = capsys.readouterr().err
    assert f"cannot write the page to {missing}: No such file or directory" in said
    assert "give a path in a folder that exists" in said
    assert main([*show, "--html", str(tmp_path / "t.html"), "--envelope", "ask_billing#1"]) == 2
    assert "drop --envelope" in capsys.readouterr().err
    assert not missing.parent.exists()
    assert list(tmp_path.iterdir()) == []  # nothing half-written
