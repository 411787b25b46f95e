"""Incidents as a regression suite: recordings of one agent, replayed as a corpus against its code.

The agent is ``examples/triage_agent.py``: the ``triage`` entry runs a ``research`` sub-agent
(a knowledge-base tool and a model call) and a model call of its own, through a real
``openai.OpenAI`` client talking to the local model server. Its recordings are made in this
process with ``chronicle.testing.capture()`` (the real delivery path, kept in memory) and written
as incident files by the real code, one per request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import chronicle
from chronicle import wire
from chronicle.cli import main
from chronicle.integrations.asgi import ChronicleMiddleware
from chronicle.save.incident import Incident
from chronicle.testing import capture
from chronicle.whatif.corpus import Options, replay_corpus
from examples import triage_agent, triage_service
from tests.support.agents import AppServer
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer, chat_text
from tests.support.nested_pytest import CORRUPT, RECORDINGS, TWO_WORKERS_GROUP, CorpusRun

pytest_plugins = ["pytester", "tests.support.two_workers"]

ENTRY = "examples.triage_agent:triage"
LLM = "openai.chat.completions.create"
TICKETS = [
    "I cannot reset my password, the link expired",
    "Your service has an outage since this morning",
    "Please refund my order from last week",
    "My invoice shows the wrong currency",
    "How do I change my billing address?",
]
TIERS = ["standard", "enterprise"]


def request(n: int) -> dict[str, str]:
    """The n-th recorded request's input (the corpus varies the ticket and the tier)."""
    return {
        "ticket": f"{TICKETS[n % len(TICKETS)]} (ticket {n})",
        "customer_tier": TIERS[n % len(TIERS)],
    }


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def record_corpus(server: LlmServer, folder: Path, count: int) -> list[Path]:
    """``count`` live requests of the triage agent, each written as ``folder/request-NN.json``."""
    paths = []
    for n in range(count):
        server.reply_with(
            chat_text(f"Notes for ticket {n}: see the articles."),
            chat_text(f"Hello, here is what to do about ticket {n}."),
        )
        with capture() as sent:
            with chronicle.record(f"triage-{n}", labels={"suite": "corpus"}):
                triage_agent.triage(**request(n))
        path = folder / f"request-{n:02d}.json"
        Incident.of(sent.envelopes).write(path)
        paths.append(path)
    return paths


# ---- the entry is recorded --------------------------------------------------------------------


def test_the_outermost_boundary_records_its_import_path_and_nested_ones_do_not(agent, tmp_path):
    (path,) = record_corpus(agent, tmp_path, 1)
    envelopes = json.loads(path.read_text(encoding="utf-8"))["envelopes"]
    tree = [(e["name"], e.get("parent_envelope_id") is None) for e in envelopes]
    assert tree == [
        ("triage", True),
        ("research", False),
        ("search_kb", False),
        (LLM, False),
        (LLM, False),
    ]
    entries = {e["name"]: e["metadata"].get(wire.ENTRY) for e in envelopes}
    assert entries == {"triage": ENTRY, "research": None, "search_kb": None, LLM: None}
    assert envelopes[0]["input"]["raw"] == request(0)


def test_a_boundary_called_at_the_top_level_of_a_span_is_an_entry_too(tmp_path):
    with capture() as sent:
        with chronicle.record("search only"):
            triage_agent.search_kb("refund my order")
    (envelope,) = sent.envelopes
    assert envelope.metadata[wire.ENTRY] == "examples.triage_agent:search_kb"


# ---- chronicle replay over a folder -------------------------------------------------------------


def replay_cli(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``chronicle replay ...`` in this process: its exit status, stdout and stderr."""
    status = main(["replay", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_chronicle_replay_runs_50_recordings_then_names_the_one_that_diverged_and_the_corrupt_one(
    agent, tmp_path, capsys
):
    folder = tmp_path / "incidents"
    paths = record_corpus(agent, folder, 50)
    served = len(agent.requests)
    assert served == 100

    status, out, err = replay_cli(str(folder), "--entry", ENTRY, capsys=capsys)
    assert (status, err) == (0, "")
    assert len(agent.requests) == served  # every model answer came from the recordings
    assert out.count("passed    ") == 50
    assert out.splitlines()[-1].startswith("50 recordings: 50 passed (")

    edited = json.loads(paths[7].read_text(encoding="utf-8"))
    research = next(e for e in edited["envelopes"] if e["name"] == "research")
    research["input"]["raw"]["question"] = "a question the code no longer asks"
    paths[7].write_text(json.dumps(edited), encoding="utf-8")
    paths[12].write_text(paths[12].read_text(encoding="utf-8")[:300], encoding="utf-8")

    status, out, err = replay_cli(str(folder), "--entry", ENTRY, capsys=capsys)
    assert status == 1
    assert out.count("passed    ") == 48
    lines = out.splitlines()
    diverged = next(i for i, line in enumerate(lines) if line.startswith("diverged"))
    assert (
        lines[diverged].endswith("incidents/request-07.json")
        or "request-07.json" in lines[diverged]
    )
    detail = "\n".join(lines[diverged : diverged + 6])
    assert "the input of call 1 of 'research' differs from its recording" in detail
    assert (
        'question: "a question the code no longer asks" -> "Please refund my order from last '
        'week (ticket 7)"' in detail
    )
    (corrupt,) = [line for line in lines if line.startswith("error")]
    assert "request-12.json" in corrupt and "is not JSON" in corrupt
    assert lines[-1].startswith("50 recordings: 48 passed, 1 diverged, 1 error (")


def test_the_python_api_gives_each_result_the_entry_output_and_the_live_cut_points(agent, tmp_path):
    record_corpus(agent, tmp_path, 1)
    (result,) = replay_corpus([tmp_path], ENTRY, options=Options(run=(("search_kb", None),)))
    assert result.outcome == "passed", result.describe()
    assert result.live_output == result.recorded_output
    assert isinstance(result.live_output, dict) and result.live_output["priority"] == "normal"
    assert result.output_changes == []
    timed = {(cut.name, cut.index) for cut in result.cut_points}
    assert timed == {("triage", 1), ("research", 1), ("search_kb", 1)}  # the path to the cut-point
    assert all(cut.recorded_ms is not None and cut.live_ms > 0 for cut in result.cut_points)


def test_a_changed_result_is_shown_and_fails_only_with_fail_on_output(
    agent, tmp_path, capsys, monkeypatch
):
    record_corpus(agent, tmp_path, 2)
    monkeypatch.setattr(triage_agent, "KNOWLEDGE_BASE", dict(triage_agent.KNOWLEDGE_BASE))
    original = triage_agent.triage.__wrapped__  # type: ignore[attr-defined]

    def louder(ticket: str, customer_tier: str = "standard") -> dict[str, object]:
        answer = dict(original(ticket, customer_tier))
        answer["priority"] = "urgent"
        return answer

    spec = triage_agent.triage.__chronicle_boundary__  # type: ignore[attr-defined]
    monkeypatch.setattr(spec, "fn", louder)
    monkeypatch.setattr(triage_agent, "triage", spec.wrapper())
    status, out, _ = replay_cli(str(tmp_path), "--entry", ENTRY, capsys=capsys)
    assert status == 0
    assert 'priority: "normal" -> "urgent"' in out
    status, out, _ = replay_cli(str(tmp_path), "--entry", ENTRY, "--fail-on-output", capsys=capsys)
    assert status == 1
    assert "the entry's result changed (--fail-on-output)" in out


def test_each_bad_input_is_one_line_saying_what_to_do_and_the_others_still_run(
    agent, tmp_path, capsys
):
    record_corpus(agent, tmp_path, 2)
    with capture() as sent:
        with chronicle.record("search only"):
            triage_agent.search_kb("refund my order")
    Incident.of(sent.envelopes).write(tmp_path / "other-entry.json")
    lossy = json.loads((tmp_path / "request-01.json").read_text(encoding="utf-8"))
    lossy["envelopes"][0]["input"]["raw"] = {"customer_tier": "standard"}
    (tmp_path / "no-input.json").write_text(json.dumps(lossy), encoding="utf-8")

    status, out, err = replay_cli(str(tmp_path), "--entry", ENTRY, capsys=capsys)
    assert status == 1
    errors = [line for line in out.splitlines() if line.startswith("error")]
    assert len(errors) == 2, out
    assert "its entry is 'search_kb' (examples.triage_agent:search_kb), not 'triage'" in out
    assert "has no value for the parameter 'ticket'" in out
    assert out.count("passed    ") == 2

    status, out, err = replay_cli(
        str(tmp_path), "--entry", "examples.nowhere:triage", capsys=capsys
    )
    assert status == 2  # an entry that cannot be imported is a usage error
    # The program names itself as run: "chronicle", or "python -m chronicle" (as it sees pytest
    # run with `python -m pytest` in one process).
    message = err.strip().removeprefix("python -m ")
    assert message.startswith("chronicle: the entry examples.nowhere:triage cannot be imported")
    assert len(err.strip().splitlines()) == 1
    status, _, err = replay_cli(
        str(tmp_path), "--entry", "examples.triage_agent:KNOWLEDGE_BASE", capsys=capsys
    )
    assert status == 2 and "is not a function" in err  # a usage error too


def test_from_the_control_plane_by_label(agent, recording, capsys):
    suite = f"corpus-{uuid.uuid4().hex[:8]}"
    ids = []
    for n in range(3):
        agent.reply_with(chat_text(f"notes {n}"), chat_text(f"reply {n}"))
        with chronicle.record(f"triage-{n}", labels={"suite": suite}) as session:
            triage_agent.triage(**request(n))
        ids.append(session.trace_id)
    for trace_id in ids:
        recording.saved(trace_id, 5)
    url = recording.control_plane.url
    status, out, err = replay_cli(
        "--from-control-plane",
        "--label",
        f"suite:{suite}",
        "--entry",
        ENTRY,
        "--url",
        url,
        "--json",
        capsys=capsys,
    )
    assert status == 0, out + err
    results = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["source"] for r in results) == sorted(f"trace {t}" for t in ids)
    assert {r["outcome"] for r in results} == {"passed"}
    assert err.startswith("3 recordings: 3 passed")

    status, out, err = replay_cli(
        "--from-control-plane",
        "--label",
        "suite:x",
        "--entry",
        ENTRY,
        "--url",
        "http://127.0.0.1:9",
        capsys=capsys,
    )
    assert status == 1
    assert len(err.strip().splitlines()) == 1 and "127.0.0.1:9" in err


def test_the_command_in_a_shell_writes_junit_xml(agent, tmp_path):
    record_corpus(agent, tmp_path / "incidents", 3)
    report = tmp_path / "replay.xml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "chronicle",
            "replay",
            str(tmp_path / "incidents"),
            "--entry",
            ENTRY,
            "--junit-xml",
            str(report),
        ],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    suite = ElementTree.fromstring(report.read_text(encoding="utf-8"))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "0")


# ---- the same corpus in pytest --------------------------------------------------------------


@pytest.mark.xdist_group(TWO_WORKERS_GROUP)
def test_pytest_collects_one_item_per_recording_and_runs_them_on_two_workers(
    corpus_on_two_workers: CorpusRun,
) -> None:
    run = corpus_on_two_workers
    run.result.assert_outcomes(passed=RECORDINGS - 2, failed=2)  # the corrupt and diverged ones
    run.result.stdout.fnmatch_lines(["*PASSED incidents/request-00.json*"])
    workers = {line.split("]")[0] for line in run.result.outlines if " PASSED " in line}
    assert workers == {"[gw0", "[gw1"}
    run.result.stdout.fnmatch_lines([f"*incidents/request-{CORRUPT:02d}.json*is not JSON*"])
    suite = ElementTree.fromstring(run.text("out.xml")).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == (str(RECORDINGS), "2")
    assert run.live_calls == 0  # every model answer came from the recordings


# ---- an ASGI app's recorded requests -----------------------------------------------------------

SERVICE = "examples.triage_service:app"


def serve_tickets(server: LlmServer, url: str, count: int) -> list[str]:
    """``count`` requests to the triage service at ``url``, each in a trace of a known id (the
    caller's ``traceparent``); the trace ids."""
    ids = []
    for n in range(count):
        server.reply_with(
            chat_text(f"Notes for ticket {n}: see the articles."),
            chat_text(f"Hello, here is what to do about ticket {n}."),
        )
        trace_id = uuid.uuid4().hex
        answer = httpx.post(
            f"{url}/triage",
            json=request(n),
            headers={"traceparent": f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        ids.append(trace_id)
    return ids


def test_chronicle_replay_sends_each_recorded_http_request_to_the_asgi_app_again(
    agent, recording, tmp_path, capsys
):
    url = recording.control_plane.url
    with AppServer(triage_service.app) as server:
        ids = serve_tickets(agent, server.url, 10)
    folder = tmp_path / "incidents"
    for n, trace_id in enumerate(ids):
        (entry, *_) = recording.saved(trace_id, 6)
        assert entry["name"] == "POST /triage"
        assert entry["metadata"][wire.ENTRY] == SERVICE
        assert entry["input"]["raw"]["request"]["body"] == request(n)
        assert main(["save", trace_id, "--url", url, "-o", str(folder / f"req-{n:02d}.json")]) == 0
    capsys.readouterr()
    served = len(agent.requests)

    status, out, err = replay_cli(str(folder), "--entry", SERVICE, capsys=capsys)
    assert (status, err) == (0, ""), out
    assert out.count("passed    ") == 10
    assert out.splitlines()[-1].startswith("10 recordings: 10 passed (")
    assert len(agent.requests) == served  # every model answer came from the recordings

    status, out, err = replay_cli(*ids[:2], "--entry", SERVICE, "--url", url, capsys=capsys)
    assert status == 0 and out.count("passed    ") == 2, out + err  # from the control plane

    edited = json.loads((folder / "req-03.json").read_text(encoding="utf-8"))
    body = edited["envelopes"][0]["input"]["raw"]["request"]["body"]
    body["ticket"] = "a ticket nobody sent"
    (folder / "req-03.json").write_text(json.dumps(edited), encoding="utf-8")
    record_corpus(agent, tmp_path / "functions", 1)
    (tmp_path / "functions" / "request-00.json").rename(folder / "function-entry.json")

    status, out, err = replay_cli(str(folder), "--entry", SERVICE, capsys=capsys)
    assert status == 1
    lines = out.splitlines()
    diverged = next(i for i, line in enumerate(lines) if line.startswith("diverged"))
    assert "req-03.json" in lines[diverged]
    detail = "\n".join(lines[diverged : diverged + 8])
    assert "the input of call 1 of 'triage' differs from its recording" in detail
    # the edited request was sent: triage was called with its ticket, not the recorded one
    assert f'ticket: "{request(3)["ticket"]}" -> "a ticket nobody sent"' in detail, detail
    (refused,) = [line for line in lines if line.startswith("error")]
    assert "function-entry.json" in refused
    assert "its entry is 'triage' (examples.triage_agent:triage), which " in refused
    assert lines[-1].startswith("11 recordings: 9 passed, 1 diverged, 1 error (")


def test_a_recorded_request_without_its_body_is_refused_saying_how_to_record_it(
    agent, tmp_path, capsys, monkeypatch
):
    inner = triage_service.app.app
    monkeypatch.setattr(
        triage_service,
        "app",
        ChronicleMiddleware(inner, record_request=True),  # no body
    )
    agent.reply_with(chat_text("notes"), chat_text("reply"))
    with capture() as sent:
        with TestClient(triage_service.app) as client:
            assert client.post("/triage", json=request(1)).status_code == 200
    Incident.of(sent.envelopes).write(tmp_path / "no-body.json")
    (entry, *_) = sent.envelopes
    assert entry.input is not None
    recorded: Any = entry.input.raw["request"]
    assert "body" not in recorded and recorded["headers"]["content-length"]

    status, out, _ = replay_cli(str(tmp_path), "--entry", SERVICE, capsys=capsys)
    assert status == 1
    (refused,) = [line for line in out.splitlines() if line.startswith("error")]
    assert "its request had a body that was not recorded" in refused
    assert "ChronicleMiddleware(app, record_body=True)" in refused


def test_an_asgi_entry_answering_5xx_where_the_recording_got_200_fails(
    agent, tmp_path, monkeypatch
):
    agent.reply_with(chat_text("notes"), chat_text("reply"))
    with capture() as sent:
        with TestClient(triage_service.app) as client:
            assert client.post("/triage", json=request(2)).status_code == 200
    Incident.of(sent.envelopes).write(tmp_path / "ok.json")

    async def answers_500(request: Request) -> JSONResponse:  # the same calls, a new status
        body = await request.json()
        answer = await run_in_threadpool(triage_agent.triage, body["ticket"], body["customer_tier"])
        return JSONResponse(answer, status_code=500)

    broken = Starlette(routes=[Route("/triage", answers_500, methods=["POST"])])
    monkeypatch.setattr(triage_service, "app", ChronicleMiddleware(broken, record_body=True))
    (result,) = replay_corpus([tmp_path], SERVICE)
    assert result.outcome == "failed", result.describe()
    assert result.message == "the app answered HTTP 500, where the recording got 200"
    assert result.divergences == ()  # every call matched its recording: only the answer changed


def test_pytest_collects_recorded_http_requests_and_sends_each_to_the_app(agent, pytester):
    folder = pytester.path / "incidents"
    for n in range(3):
        agent.reply_with(chat_text(f"notes {n}"), chat_text(f"reply {n}"))
        with capture() as sent:
            with TestClient(triage_service.app) as client:
                assert client.post("/triage", json=request(n)).status_code == 200
        Incident.of(sent.envelopes).write(folder / f"request-{n}.json")
    served = len(agent.requests)
    result = run_inline(
        pytester, "-p", "no:xdist", "--chronicle-corpus", "incidents", "--chronicle-entry",
        SERVICE, "incidents", "-v",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*incidents/request-0.json PASSED*"])
    assert len(agent.requests) == served  # nothing live
