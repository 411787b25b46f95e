"""``pytest --chronicle-from-control-plane``: the control plane's traces as a corpus, fetched once
per session, page by page, into a cache of incident files; a second run reads none again.

The traces are ``examples/triage_agent.py``'s requests, recorded live (the model is the local
model server) and saved to the real control plane of the session (``recording``). What the
control plane was asked is read from its own access log (the server's output), never from a
double of our client.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest

import chronicle
from chronicle.testing import LocalControlPlane, corpus_source
from examples import triage_agent
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer, chat_text
from tests.support.recording import Recording
from tests.test_corpus import ENTRY, request

pytest_plugins = ["pytester"]

CHANGED = '''
import chronicle
from examples.triage_agent import research


@chronicle.boundary("triage")
def triage(ticket, customer_tier="standard"):
    """The entry, changed: it asks its sub-agent another question."""
    return {"notes": research(ticket + " (asked again)")["notes"]}
'''
"""A changed entry: its research sub-agent is asked what no recording asked (a divergence)."""


def record_traces(
    recording: Recording, server: LlmServer, suite: str, count: int, first: int = 0
) -> list[str]:
    """``count`` live requests of the triage agent, each saved as a trace labelled
    ``suite=SUITE``, oldest first; their trace ids."""
    ids = []
    for n in range(first, first + count):
        server.reply_with(chat_text(f"Notes for ticket {n}."), chat_text(f"Reply to ticket {n}."))
        with chronicle.record(f"triage-{n}", labels={"suite": suite}) as session:
            triage_agent.triage(**request(n))
        ids.append(session.trace_id)
    for trace_id in ids:
        recording.saved(trace_id, 5)  # triage, research, search_kb and two model calls
    return ids


class AccessLog:
    """The control plane's requests since it was made, as its own log lists them."""

    def __init__(self, control_plane: LocalControlPlane) -> None:
        self.path = control_plane.log_path
        self.offset = self.path.stat().st_size

    def gets(self) -> Counter[str]:
        """How many times each path was read (``GET``), since the last call; reads happen
        before this (the server logs a request as it answers it)."""
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            text = log.read().decode("utf-8", errors="replace")
            self.offset = log.tell()
        return Counter(re.findall(r'"GET (/v1/traces[^? ]*)\S* HTTP', text))


def reads_of(gets: Counter[str], ids: list[str]) -> list[int]:
    """For each trace: how many times its envelopes were read."""
    return [gets[f"/v1/traces/{trace_id}/envelopes"] for trace_id in ids]


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def selecting(recording: Recording, suite: str, *more: str) -> list[str]:
    """The options of a corpus of the traces labelled ``suite=SUITE``, cached in ``cache``."""
    return [
        "--chronicle-from-control-plane",
        "--chronicle-url",
        recording.control_plane.url,
        "--chronicle-label",
        f"suite:{suite}",
        "--chronicle-entry",
        ENTRY,
        "--chronicle-cache",
        "cache",
        *more,
    ]


def test_the_traces_are_fetched_once_and_a_second_run_asks_only_for_the_list(
    agent, recording, pytester
):
    suite = uuid.uuid4().hex
    ids = record_traces(recording, agent, suite, 3)
    log = AccessLog(recording.control_plane)

    first = run_inline(pytester, *selecting(recording, suite), "-v")
    first.assert_outcomes(passed=3)
    url = recording.control_plane.url
    first.stdout.fnmatch_lines([f"chronicle: 3 traces from the control plane at {url}: 3 read, 0*"])
    names = sorted(line.split()[0] for line in first.outlines if " PASSED" in line)
    assert names == sorted(f"cache/{trace_id}.json" for trace_id in ids)  # a trace's item
    assert reads_of(log.gets(), ids) == [1, 1, 1]
    assert sorted(p.name for p in (pytester.path / "cache").glob("*.json")) == sorted(
        f"{trace_id}.json" for trace_id in ids
    )

    pytester.makepyfile(test_other="def test_other():\n    pass\n")
    again = run_inline(pytester, *selecting(recording, suite), "cache")  # the corpus only
    again.assert_outcomes(passed=3)
    again.stdout.fnmatch_lines(["chronicle: 3 traces * 0 read, 3 from the cache *cache"])
    gets = log.gets()
    assert reads_of(gets, ids) == [0, 0, 0]
    assert not any(gets[f"/v1/traces/{trace_id}"] for trace_id in ids)  # nor their spans
    assert gets["/v1/traces"] == 1  # the list, one page

    newer = record_traces(recording, agent, suite, 1, first=3)  # a new request since
    log.gets()  # (recording.saved read it back)
    latest = run_inline(pytester, *selecting(recording, suite, "--chronicle-limit", "2"), "cache")
    latest.assert_outcomes(passed=2)  # the most recent two: the new one read, one cached
    latest.stdout.fnmatch_lines(["chronicle: 2 traces * 1 read, 1 from the cache *"])
    assert reads_of(log.gets(), [*ids, *newer]) == [0, 0, 0, 1]


def test_the_list_is_read_a_page_at_a_time(agent, recording, pytester, monkeypatch):
    suite = uuid.uuid4().hex
    ids = record_traces(recording, agent, suite, 5)
    monkeypatch.setattr(corpus_source, "_PAGE", 2)
    log = AccessLog(recording.control_plane)
    run_inline(pytester, *selecting(recording, suite)).assert_outcomes(passed=5)
    gets = log.gets()
    assert gets["/v1/traces"] == 3 and reads_of(gets, ids) == [1] * 5  # pages of 2, 2 and 1
    run_inline(pytester, *selecting(recording, suite, "--chronicle-limit", "3"))
    assert log.gets()["/v1/traces"] == 2  # the third trace is on the second page: no more


def test_a_trace_read_while_its_request_was_open_is_read_again_once_closed(
    agent, recording, pytester
):
    suite = uuid.uuid4().hex
    started, finish, ids = threading.Event(), threading.Event(), []

    def request_left_open() -> None:
        agent.reply_with(chat_text("Notes."), chat_text("Reply."))
        with chronicle.record("triage-open", labels={"suite": suite}) as session:
            triage_agent.triage(**request(0))
            ids.append(session.trace_id)
            started.set()
            finish.wait()

    holder = threading.Thread(target=request_left_open)
    holder.start()
    started.wait()
    recording.saved(ids[0], 5)  # its calls are saved; its span is still open
    log = AccessLog(recording.control_plane)
    run_inline(pytester, *selecting(recording, suite)).assert_outcomes(passed=1)
    assert reads_of(log.gets(), ids) == [1]
    run_inline(pytester, *selecting(recording, suite)).assert_outcomes(passed=1)
    assert reads_of(log.gets(), ids) == [1]  # still open: read again
    finish.set()
    holder.join()
    assert chronicle.flush(10)
    trace = recording.control_plane.trace(ids[0])
    assert trace is not None and {span["state"] for span in trace["spans"]} == {"closed"}
    run_inline(pytester, *selecting(recording, suite)).assert_outcomes(passed=1)
    assert reads_of(log.gets(), ids) == [1]  # closed now: read whole, once more
    run_inline(pytester, *selecting(recording, suite)).assert_outcomes(passed=1)
    assert reads_of(log.gets(), ids) == [0]


def test_a_trace_with_nothing_to_replay_is_left_out_saying_why(agent, recording, pytester):
    suite = uuid.uuid4().hex
    ids = record_traces(recording, agent, suite, 1)
    with chronicle.record("no calls", labels={"suite": suite}) as session:
        pass  # a request that called no boundary: its trace holds no envelope
    assert chronicle.flush(10)
    assert recording.control_plane.trace(session.trace_id) is not None
    result = run_inline(pytester, *selecting(recording, suite))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "chronicle: 1 trace from the control plane at * 1 read, 0 from the cache *",
            f"chronicle: left out trace {session.trace_id}: has no envelopes on *",
        ]
    )
    assert [p.stem for p in (pytester.path / "cache").glob("*.json")] == ids


def test_a_changed_entry_diverges_on_the_cached_traces(agent, recording, pytester):
    suite = uuid.uuid4().hex
    ids = record_traces(recording, agent, suite, 2)
    pytester.makepyfile(changed_triage=CHANGED)
    options = selecting(recording, suite)
    options[options.index(ENTRY)] = "changed_triage:triage"
    result = run_inline(pytester, *options)
    result.assert_outcomes(failed=2)
    for trace_id in ids:
        result.stdout.fnmatch_lines([f"diverged  cache/{trace_id}.json*", "*research#1*"])


def test_under_xdist_the_controller_fetches_and_the_workers_read_the_cache(
    agent, recording, pytester, monkeypatch
):
    suite = uuid.uuid4().hex
    cached = record_traces(recording, agent, suite, 2)
    run_inline(pytester, *selecting(recording, suite)).assert_outcomes(passed=2)  # cached now
    fresh = record_traces(recording, agent, suite, 2, first=2)
    log = AccessLog(recording.control_plane)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent.parent))
    args = selecting(recording, suite, "-p", "no:cacheprovider", "-n", "2", "-v")
    result = pytester.runpytest_subprocess(*args, timeout=120)
    result.assert_outcomes(passed=4)
    workers = {line.split("]")[0] for line in result.outlines if " PASSED " in line}
    assert workers == {"[gw0", "[gw1"}  # both workers replayed
    gets = log.gets()
    assert reads_of(gets, fresh) == [1, 1]  # each new trace downloaded once, not per worker
    assert reads_of(gets, cached) == [0, 0]  # the cached ones not again
    assert gets["/v1/traces"] == 1  # listed by the controller alone: no worker asked


def test_the_agent_selects_the_traces_its_profile_recorded(agent, recording, pytester):
    suite = uuid.uuid4().hex
    plain = record_traces(recording, agent, suite, 1)
    url = recording.control_plane.url
    chronicle.configure(
        control_plane_url=url,
        flush_interval=0.05,
        agent=chronicle.AgentProfile("triage-bot", "Answer support tickets."),
    )
    profiled = record_traces(recording, agent, suite, 1, first=1)
    log = AccessLog(recording.control_plane)
    result = run_inline(
        pytester, *selecting(recording, suite, "--chronicle-agent", "triage-bot", "-v")
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*cache/{profiled[0]}.json PASSED*"])
    assert reads_of(log.gets(), [*plain, *profiled]) == [0, 1]  # the other one: its spans only
    result = run_inline(pytester, *selecting(recording, suite, "--chronicle-agent", "other"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # no trace of that agent
    gets = log.gets()
    assert [gets[f"/v1/traces/{t}"] for t in (*plain, *profiled)] == [0, 0]  # the cache told


def test_pytests_own_cache_keeps_the_traces_by_default(agent, recording, pytester):
    suite = uuid.uuid4().hex
    (trace_id,) = record_traces(recording, agent, suite, 1)
    options = selecting(recording, suite, "--collect-only", "-q")
    del options[-4:-2]  # no --chronicle-cache
    result = pytester.runpytest_inprocess(*options)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f".pytest_cache/d/chronicle-corpus/{trace_id}.json"])
    off = run_inline(pytester, *options)  # -p no:cacheprovider
    assert off.ret == pytest.ExitCode.USAGE_ERROR
    off.stderr.fnmatch_lines(["*pytest's cache, which is off here*give --chronicle-cache DIR*"])


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            ["--chronicle-url", "http://127.0.0.1:9"],
            "*nothing answers at http://127.0.0.1:9*start the control plane*--chronicle-url URL",
        ),
        (["--chronicle-label", "no-colon"], "*--chronicle-label takes K:V*got 'no-colon'*"),
        (["--chronicle-since", "yesterday"], "*--chronicle-since:*yesterday*"),
        (["--chronicle-limit", "0"], "*--chronicle-limit takes*a whole number from 1*"),
        (["--chronicle-label", "suite:none-such"], "*no trace on the control plane*widen*"),
        (
            ["--chronicle-cache", "a-file"],
            "*cannot write to the cache*a-file*--chronicle-cache DIR*",
        ),
    ],
)
def test_what_cannot_be_fetched_is_a_usage_error_saying_what_to_do(
    recording, pytester, change, said
):
    (pytester.path / "a-file").write_text("not a folder", encoding="utf-8")
    options = selecting(recording, "unused", *change)
    if change[0] == "--chronicle-url":
        del options[1:3]  # the running control plane's URL: only the one that is down is given
    result = run_inline(pytester, *options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {said}"])


def test_selectors_without_the_control_plane_are_a_usage_error(pytester):
    (pytester.path / "incidents").mkdir()
    options = ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY]
    result = run_inline(pytester, *options, "--chronicle-label", "suite:x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*select control-plane traces: add --chronicle-from-control-plane"]
    )
