"""The corpus report ``chronicle replay --report`` writes, opened in a real browser: headless
Chromium from the operating system's packages, driven by Playwright (the harness of
``tests/e2e/test_pages.py``; skipped, saying so, without Chromium).

The corpus is the triage agent's requests (``examples/triage_agent.py``), recorded in this
process; two are edited so that the code no longer asks what they recorded. The page is opened
from its file with every request routed: anything but the page itself fails the test, as does
any console error. ``CHRONICLE_PAGE_SCREENSHOTS=docs`` writes docs/report-page.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chronicle.cli import main
from examples import triage_agent
from tests.e2e.test_pages import browser, open_page, screenshot
from tests.support.llm_server import LlmServer
from tests.test_corpus import ENTRY, record_corpus
from tests.test_corpus_reports import divert

__all__ = ["browser"]  # the fixture, shared with test_pages.py


@pytest.fixture
def report(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The report of a 6-recording corpus of which requests 2 and 5 diverge."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    paths = record_corpus(llm_server, tmp_path / "incidents", 6)
    divert(paths[2])
    divert(paths[5])
    page = tmp_path / "report.html"
    status = main(["replay", str(tmp_path / "incidents"), "--entry", ENTRY, "--report", str(page)])
    assert status == 1 and page.exists()
    return page


def test_a_row_links_to_its_tree_and_diff_on_the_page_and_nothing_leaves(
    browser: Any, report: Path, tmp_path: Path
) -> None:
    opened = open_page(browser, report)
    page = opened.page
    assert page.title() == "chronicle replay: 6 recordings: 4 passed, 2 diverged"
    rows = page.locator("tr.recording")
    assert rows.count() == 6
    outcomes = [rows.nth(i).get_attribute("data-outcome") for i in range(6)]
    assert outcomes == ["passed", "passed", "diverged", "passed", "passed", "diverged"]

    diverged = page.locator("tr.recording.diverged").first
    assert "research#1" in diverged.locator("td.first").inner_text()
    diverged.locator("a[data-link=diff]").click()
    assert page.evaluate("location.hash") == "#diff-3"
    diff = page.locator("#diff-3")
    assert diff.is_visible() and "a question the code no longer asks" in diff.inner_text()
    article = page.locator("#recording-3")
    assert "target" in (article.get_attribute("class") or "")  # the script marked it

    diverged.locator("a[data-link=tree]").click()
    tree = page.locator("#tree-3")
    assert tree.is_visible()
    calls = tree.locator(".rcall")
    modes = {
        calls.nth(i).get_attribute("data-call"): calls.nth(i).get_attribute("data-mode")
        for i in range(calls.count())
    }
    # The replay stopped at research#1: the calls after it were never made.
    assert modes["triage#1"] == "run" and modes["openai.chat.completions.create#2"] == "missed"

    page.get_by_role("button", name="Only those that did not pass").click()
    assert page.locator("tr.recording:visible").count() == 2
    page.get_by_role("button", name="All").click()
    assert page.locator("tr.recording:visible").count() == 6
    opened.check_quiet(report)
    screenshot(opened, "report-page.png", tmp_path)


def test_the_report_reads_without_javascript(browser: Any, report: Path) -> None:
    opened = open_page(browser, report, javascript=False)
    page = opened.page
    assert page.locator("#toolbar").is_hidden()  # the buttons need the script: not shown
    page.locator("tr.recording.diverged a[data-link=diff]").first.click()
    assert page.locator("#diff-3").is_visible()
    opened.check_quiet(report)
