"""A corpus replay's tokens, cost and latency, recorded beside replayed, and its reports.

The corpus is ``examples/triage_agent.py``'s requests (two model calls each, through a real
``openai.OpenAI`` client talking to the local model server), recorded in this process and
written as incident files by the real code (``tests/test_corpus.py``'s ``record_corpus``). The
prices are the ``genai-prices`` table's, asked here independently of Chronicle.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import genai_prices
import httpx
import pytest

import chronicle
from chronicle.cli import main
from chronicle.cli.serve import PageServer
from chronicle.save.incident import Incident
from chronicle.testing import capture
from chronicle.whatif.corpus import Options, replay_corpus
from chronicle.whatif.report import Report, markdown
from chronicle.whatif.usage import Totals, Usage, UsagePair, dollars
from examples import triage_agent
from tests.support.llm_server import LlmServer, chat_text, chat_usage
from tests.support.nested_pytest import RECORDINGS, TWO_WORKERS_GROUP, CorpusRun
from tests.test_corpus import ENTRY, LLM, record_corpus, request

pytest_plugins = ["pytester", "tests.support.two_workers"]

MODEL = triage_agent.MODEL


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def table_price(model: str, input_tokens: int, output_tokens: int) -> float:
    """What the genai-prices table says a call costs, asked directly."""
    found = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens), model
    )
    return float(found.total_price)


def divert(path: Path) -> None:
    """Edit a recording so that the code no longer asks what it recorded (a divergence)."""
    edited = json.loads(path.read_text(encoding="utf-8"))
    research = next(e for e in edited["envelopes"] if e["name"] == "research")
    research["input"]["raw"]["question"] = "a question the code no longer asks"
    path.write_text(json.dumps(edited), encoding="utf-8")


# ---- usage: recorded beside replayed ------------------------------------------------------------


def test_a_stubbed_replay_counts_the_recorded_usage_on_both_sides_priced_by_the_table(
    agent, tmp_path
):
    record_corpus(agent, tmp_path, 2)  # each request: two calls of 10 tokens in, 5 out
    results = replay_corpus([tmp_path], ENTRY)
    assert [r.outcome for r in results] == ["passed", "passed"]
    per_request = 2 * table_price(MODEL, 10, 5)
    for result in results:
        usage: Any = result.to_json()["usage"]
        for side in ("recorded", "replayed"):
            figures = usage[side]
            assert (figures["input_tokens"], figures["output_tokens"]) == (20, 10)
            assert figures["calls"] == 2
            assert figures["cost_usd"] == pytest.approx(per_request)
        assert usage["replayed"]["latency_ms"] == 0  # nothing ran live but the entry
        assert usage["slower_calls"] == 0


def test_a_live_call_counts_its_new_usage_and_the_summary_says_the_change(agent, tmp_path, capsys):
    record_corpus(agent, tmp_path, 2)
    # The change under test: the model now answers in fewer tokens (4 in, 2 out a call).
    agent.reply_with(*[chat_text("short", usage=chat_usage(4, 2)) for _ in range(4)])
    status = main(["replay", str(tmp_path), "--entry", ENTRY, "--run", LLM, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert len(agent.requests) == 4 + 4  # recorded four calls, ran four live
    results = [json.loads(line) for line in out.splitlines()]
    for result in results:
        recorded, replayed = result["usage"]["recorded"], result["usage"]["replayed"]
        assert (recorded["input_tokens"], recorded["output_tokens"]) == (20, 10)
        assert (replayed["input_tokens"], replayed["output_tokens"]) == (8, 4)
        assert replayed["cost_usd"] == pytest.approx(2 * table_price(MODEL, 4, 2))
        # The live calls are the two model calls (not the entry, not research on the way).
        assert recorded["latency_ms"] > 0 and replayed["latency_ms"] > 0
    cost = (2 * table_price(MODEL, 4, 2)) / (2 * table_price(MODEL, 10, 5)) - 1
    summary = err.splitlines()[0]
    assert summary.startswith("2 recordings: 2 passed (")
    assert f"; tokens -60%, cost {cost * 100:+.0f}%, " in summary
    assert re.search(r"\d+ calls? slower$", summary)


def test_a_model_the_price_table_does_not_know_has_a_null_cost(agent, tmp_path, capsys):
    agent.reply_with(
        chat_text("notes", model="acme-private-1"), chat_text("reply", model="acme-private-1")
    )
    with_unknown = tmp_path / "unknown"
    with_unknown.mkdir()
    with capture() as sent:
        with chronicle.record("triage-unknown-model"):
            triage_agent.triage(**request(0))
    Incident.of(sent.envelopes).write(with_unknown / "request.json")
    status = main(["replay", str(with_unknown), "--entry", ENTRY, "--json"])
    out, _ = capsys.readouterr()
    assert status == 0
    usage = json.loads(out)["usage"]
    assert usage["recorded"]["cost_usd"] is None and usage["replayed"]["cost_usd"] is None
    assert usage["recorded"]["input_tokens"] == 20  # tokens are still counted
    report = Report.of([json.loads(out)])
    assert "| cost | unknown | unknown |" in markdown(report)
    assert report.totals.change() == "tokens same, cost unknown, 0 calls slower"


def test_usage_adds_up_and_an_unknown_cost_stays_unknown():
    known = Usage(10, 5, Decimal("0.002"), 1, 3.0)
    assert known + known == Usage(20, 10, Decimal("0.004"), 2, 6.0)
    assert (known + Usage(1, 1, None, 1)).cost_usd is None
    assert Usage.from_json(known.to_json()) == known
    totals = Totals()
    totals.add(UsagePair(Usage(100, 0, Decimal("1.00")), Usage(62, 0, Decimal("0.59")), 2))
    assert totals.change() == "tokens -38%, cost -41%, 2 calls slower"
    totals = Totals()
    totals.add(UsagePair(Usage(0, 0), Usage(7, 3)))
    assert totals.change() == "tokens +10 from none, cost same, 0 calls slower"


# ---- the reports -------------------------------------------------------------------------------


class Page(HTMLParser):
    """The report page's elements with an id, its links, and its table rows' outcomes."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: dict[str, list[str]] = {}
        self.rows: dict[str, str] = {}
        self.sources: list[str] = []
        self._row: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "tr" and found.get("data-outcome"):
            self._row = str(found["id"])
            self.rows[self._row] = str(found["data-outcome"])
            self.sources.append(str(found["data-recording"]))
        if tag == "a" and self._row and found.get("data-link"):
            self.links.setdefault(self._row, []).append(str(found["href"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None


def report_files(folder: Path) -> tuple[Path, Path, Path, list[str]]:
    """The page, the Markdown summary and the JUnit file a command writes in ``folder``, and the
    options that ask for them (``--report``, ``--markdown``, ``--junit-xml``)."""
    page, summary, junit = folder / "report.html", folder / "summary.md", folder / "r.xml"
    options = ["--report", str(page), "--markdown", str(summary), "--junit-xml", str(junit)]
    return page, summary, junit, options


def test_replay_writes_the_html_report_the_markdown_summary_and_junit(agent, tmp_path, capsys):
    folder = tmp_path / "incidents"
    paths = record_corpus(agent, folder, 4)
    divert(paths[1])
    divert(paths[3])
    page, summary, junit, options = report_files(tmp_path)
    status = main(["replay", str(folder), "--entry", ENTRY, *options])
    out, _ = capsys.readouterr()
    assert status == 1
    assert f"wrote {page}" in out and f"wrote {summary}" in out

    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### ❌ chronicle replay: 4 recordings: 2 passed, 2 diverged\n")
    # 4 requests x 2 calls x 10 tokens in were recorded; the two diverged replays stopped at
    # research#1, before their second model call: that call counts on the recorded side only.
    assert "| tokens in | 80 | 60 |" in text
    assert "tokens -25%, cost -25%, 0 calls slower" in text
    failing = [line for line in text.splitlines() if "request-0" in line]
    assert [line.split(" | ")[1] for line in failing] == ["diverged", "diverged"]
    assert "request-01.json" in failing[0] and "research#1" in failing[0]

    html = page.read_text(encoding="utf-8")
    parsed = Page()
    parsed.feed(html)
    assert list(parsed.rows.values()) == ["passed", "diverged", "passed", "diverged"]
    assert [Path(s).name for s in parsed.sources] == [p.name for p in paths]
    for row, links in parsed.links.items():
        number = row.removeprefix("row-")
        assert links == [f"#tree-{number}", f"#diff-{number}"]
        assert {link[1:] for link in links} <= parsed.ids  # each link lands on the page
    assert "a question the code no longer asks" in html  # the diverged row's diff
    assert 'data-call="openai.chat.completions.create#2" data-mode="stub"' in html
    assert (
        "<script src" not in html
        and "http://" not in html.split("<footer>")[0].split("</header>")[1]
    )

    suite = ElementTree.fromstring(junit.read_text(encoding="utf-8"))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "0")
    failure = suite.find("testcase/failure")
    assert failure is not None and "--run 'research#1'" in (failure.text or "")  # the advice


def test_a_report_file_that_cannot_be_written_is_a_usage_error(agent, tmp_path, capsys):
    record_corpus(agent, tmp_path, 1)
    status = main(
        ["replay", str(tmp_path), "--entry", ENTRY, "--markdown", str(tmp_path / "no" / "x.md")]
    )
    _, err = capsys.readouterr()
    assert status == 2
    assert "cannot write" in err and "give a path in a folder that exists" in err


def test_the_report_of_results_is_the_report_of_their_json(agent, tmp_path):
    record_corpus(agent, tmp_path, 3)
    results = replay_corpus([tmp_path], ENTRY, options=Options(run=(("search_kb", None),)))
    report = Report.of([r.to_json() for r in results])
    again = Report.of(json.loads(json.dumps(r.to_json())) for r in reversed(results))
    assert [row.source for row in again.rows] == [row.source for row in report.rows]
    assert again.totals == report.totals and again.counts == report.counts
    assert again.headline() == "3 recordings: 3 passed"
    row: Any = report.rows[0]
    modes = {c["call"]: c["mode"] for c in row.calls}
    assert modes["search_kb#1"] == "run" and modes[f"{LLM}#2"] == "stub"


# ---- a trace's cost: chronicle show, and the pages chronicle serve serves --------------------


def recorded_trace(agent: LlmServer, recording: Any) -> str:
    """One request of the triage agent saved to the control plane; its trace id."""
    agent.reply_with(chat_text("notes"), chat_text("reply"))
    with chronicle.record("triage-shown") as session:
        triage_agent.triage(**request(0))
    recording.saved(session.trace_id, 5)
    return session.trace_id


def test_chronicle_show_prints_the_traces_tokens_and_cost(agent, recording, capsys, tmp_path):
    trace_id = recorded_trace(agent, recording)
    url = recording.control_plane.url
    assert main(["show", trace_id, "--url", url]) == 0
    out = capsys.readouterr().out
    cost = dollars(Decimal(str(2 * table_price(MODEL, 10, 5))))
    assert out.splitlines()[-1] == f"2 model calls: 30 tokens (20 in, 10 out), {cost}"
    page = tmp_path / "trace.html"
    assert main(["show", trace_id, "--url", url, "--html", str(page)]) == 0
    assert f"<span>2 model calls: 30 tokens (20 in, 10 out), {cost}</span>" in page.read_text(
        encoding="utf-8"
    )


def test_the_page_server_serves_each_traces_page_and_an_index(agent, recording):
    trace_id = recorded_trace(agent, recording)
    with PageServer(recording.control_plane.url) as pages:
        index = httpx.get(f"{pages.url}/", timeout=10)
        assert index.status_code == 200 and f'href="/trace/{trace_id}"' in index.text
        page = httpx.get(pages.trace_url(trace_id), timeout=10)
        assert page.status_code == 200
        calls = re.findall(r'data-call="([^"]+)"', page.text)
        assert calls == ["triage#1", "research#1", "search_kb#1", f"{LLM}#1", f"{LLM}#2"]
        missing = httpx.get(pages.trace_url("0" * 32), timeout=10)
        assert missing.status_code == 404 and "0" * 32 in missing.text
        wrong = httpx.get(f"{pages.url}/traces/x", timeout=10)
        assert wrong.status_code == 404 and "page is /trace/&lt;its 32-hex id" in wrong.text
    with pytest.raises(httpx.ConnectError):  # closed: the port is released
        httpx.get(f"{pages.url}/", timeout=2)


@pytest.mark.xdist_group(TWO_WORKERS_GROUP)
def test_pytest_corpus_writes_the_same_report_merged_from_two_workers(
    corpus_on_two_workers: CorpusRun,
) -> None:
    run = corpus_on_two_workers
    said = f"{RECORDINGS} recordings: {RECORDINGS - 2} passed, 1 diverged, 1 error"
    run.result.stdout.fnmatch_lines(["*chronicle corpus report*", f"{said}; tokens -*", "wrote *"])
    assert run.text("summary.md").startswith(f"### ❌ chronicle replay: {said}\n")
    parsed = Page()
    parsed.feed(run.text("report.html"))
    assert [Path(s).name for s in parsed.sources] == [p.name for p in run.paths]  # both workers'
    assert list(parsed.rows.values()).count("diverged") == 1
