"""The control plane killed (SIGKILL) under keep-on-incident and under replays.

- A burst of 20,000 requests sampled at 0.1 (``tests/support/burst_worker.py``, a process of its
  own) while the control plane is dead for the first half and back for the second: the requests
  the sampler dropped are held within ``keep_max_bytes``, every request whose call failed is
  saved once the control plane is back (and nothing else the sampler dropped), every sampled one
  too, and no request waits longer than the documented bound (``registration_timeout``, once
  per outage). Marked ``soak``: ``make test-soak`` runs it.
- ``replay_trace``, a corpus replay from the control plane (``replay_corpus`` with trace ids,
  what ``chronicle replay --from-control-plane`` runs) and a replay let through to another
  service (``through``): each replay the kill reaches fails with one clear error, the replays
  before and after it (and the one it happened in, when it had read its recording already)
  pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from control_plane.db.tables import envelopes, spans
from sqlalchemy import create_engine, select

import chronicle
from chronicle.errors import ReplayError
from chronicle.save.client import HttpControlPlane
from chronicle.testing import LocalControlPlane
from chronicle.whatif.corpus import CorpusResult, replay_corpus, summary
from tests.support.fault_agent import handle
from tests.support.workers import one_worker
from tests.test_cross_service_replay import (
    MESSAGE,
    TOKEN,
    configure,
    fixed_billing,
    record_incident,
    support,
    the_fix,
)

pytestmark = one_worker("faults")

ROOT = Path(__file__).resolve().parents[2]
BOUND = 900.0
"""Seconds a process of these tests may take at most (never reached when it works)."""


@pytest.fixture(scope="module")
def own_control_plane() -> Iterator[LocalControlPlane]:
    """A control plane of this module's own, which its tests kill (and leave running)."""
    with LocalControlPlane() as server:
        yield server


def record_orders(control_plane: LocalControlPlane, count: int) -> list[tuple[str, str, str]]:
    """Record ``count`` requests of the fault agent: ``(trace_id, span_id, order_id)`` each."""
    chronicle.configure(control_plane_url=control_plane.url, flush_interval=0.05)
    recorded = []
    for index in range(count):
        order_id = f"ORD-{index % 3}"
        with chronicle.record("order") as session:
            handle(order_id)
        recorded.append((session.trace_id, session.span_id, order_id))
    assert chronicle.flush(10)
    for trace_id, _, _ in recorded:
        control_plane.wait_for_envelopes(trace_id, 3)
    return recorded


def one_clear_line(message: str, trace_id: str, url: str) -> None:
    """The error of a replay the kill reached: one line, naming the trace, the control plane it
    could not reach, and what to do."""
    assert "\n" not in message and "Traceback" not in message
    assert trace_id in message
    assert url in message
    assert "start the control plane" in message or "chronicle serve" in message, message


# ---- replay_trace --------------------------------------------------------------------------------


def test_replay_trace_through_a_kill_fails_only_the_replays_that_needed_it(
    own_control_plane: LocalControlPlane,
) -> None:
    control_plane = own_control_plane
    recorded = record_orders(control_plane, 6)
    outcomes: list[str] = []
    errors: list[str] = []
    recorded_as: str | None = None
    for index, (trace_id, span_id, order_id) in enumerate(recorded):
        if index == 4:
            control_plane.start()
        try:
            # Replay 1 is recorded as a new trace, and the control plane dies inside it: it
            # read its recording already, so it runs on, and what it records waits in the queue.
            with chronicle.replay_trace(trace_id, span_id, strict=True, record=index == 1) as run:
                if index == 1:
                    control_plane.kill()
                answer = handle(order_id)
        except ReplayError as exc:
            outcomes.append("error")
            errors.append(str(exc))
            print(f"\n{exc}")
            one_clear_line(str(exc), trace_id, control_plane.url)
            continue
        outcomes.append("passed")
        assert answer == ("refund" if order_id != "ORD-2" else "escalate")
        assert [(c.name, c.mode) for c in run.call_log()] == [("handle", "stub")]
        if index == 1:
            recorded_as = run.new_trace_id
    assert outcomes == ["passed", "passed", "error", "error", "passed", "passed"]
    # The replay the kill happened in is saved once the control plane is back.
    assert recorded_as is not None
    assert chronicle.flush(30)
    saved = control_plane.wait_for_envelopes(recorded_as, 3)
    assert sorted(e["name"] for e in saved) == ["decide", "handle", "look_up"]


# ---- a corpus replay from the control plane -----------------------------------------------------


def test_a_corpus_from_the_control_plane_through_a_kill_has_one_error_per_trace_it_could_not_read(
    own_control_plane: LocalControlPlane,
) -> None:
    control_plane = own_control_plane
    recorded = record_orders(control_plane, 8)
    chronicle.reset()  # the corpus runs as `chronicle replay` does: nothing configured
    seen: list[CorpusResult] = []

    def each(result: CorpusResult) -> None:
        seen.append(result)
        if len(seen) == 3:
            control_plane.kill()
        elif len(seen) == 5:
            control_plane.start()

    client = HttpControlPlane(control_plane.url, None, 10.0)
    try:
        results = replay_corpus(
            entry="tests.support.fault_agent:handle",
            trace_ids=[trace_id for trace_id, _, _ in recorded],
            client=client,
            each=each,
        )
    finally:
        client.close()
    assert [r.outcome for r in results] == ["passed"] * 3 + ["error"] * 2 + ["passed"] * 3
    for result, (trace_id, _, _) in zip(results, recorded, strict=True):
        assert result.source == f"trace {trace_id}"
        if result.outcome == "error":
            print(f"\n{result.describe()}")
            one_clear_line(result.describe(), trace_id, control_plane.url)
    assert summary(results, 1.0).startswith("8 recordings: 6 passed, 2 error")


# ---- through(...) --------------------------------------------------------------------------------


def test_a_replay_let_through_to_a_service_that_cannot_read_its_recording_fails_alone(
    own_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    control_plane = own_control_plane
    incident = record_incident(control_plane, tmp_path / "recording.txt")
    configure(control_plane, replay_token=TOKEN)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    try:
        with fixed_billing(control_plane, tmp_path) as billing:
            for index in range(4):
                if index == 2:
                    control_plane.start()
                try:
                    with chronicle.replay_trace(
                        incident.trace_id, incident.support_span, the_fix("billing"), strict=True
                    ) as run:
                        if index == 1:  # support read its span; billing has yet to read its own
                            control_plane.kill()
                        support(billing.url, MESSAGE)
                except (ReplayError, httpx.HTTPError) as exc:
                    outcomes.append("error")
                    errors.append(exc)
                    continue
                outcomes.append("passed")
                assert run.captured_result("charge", 1) == {
                    "blocked": True,
                    "reason": "980000 is over the order's 4700",
                }
            assert billing.charges() == []
    finally:
        chronicle.uninstrument_httpx()
        chronicle.reset()
    assert outcomes == ["passed", "error", "passed", "passed"]
    (error,) = errors
    assert isinstance(error, ReplayError), f"{type(error).__name__}: {error}"
    message = str(error)
    assert "billing" in message
    print(f"\n{message}")
    one_clear_line(message, incident.trace_id, control_plane.url)


# ---- keep on incident: a burst while the control plane is down ---------------------------------


def stored_traces(database_url: str) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Every stored envelope body by trace, and every stored span's metadata by trace."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            by_trace: dict[str, list[dict[str, Any]]] = {}
            for row in connection.execute(select(envelopes.c.trace_id, envelopes.c.body)):
                by_trace.setdefault(row.trace_id, []).append(row.body)
            metadata = {
                row.trace_id: row.body.get("metadata", {})
                for row in connection.execute(select(spans.c.trace_id, spans.c.body))
            }
    finally:
        engine.dispose()
    return by_trace, metadata


@pytest.mark.soak
def test_a_burst_while_the_control_plane_is_down_keeps_every_failed_request_within_memory(
    fresh_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    control_plane = fresh_control_plane
    out = tmp_path / "burst.json"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "OTEL_"))}
    environ.update(
        PYTHONPATH=str(ROOT), OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0.1"
    )
    control_plane.kill()  # down from the first request
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.burst_worker", control_plane.url, str(out)],
        cwd=ROOT,
        env=environ,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None and worker.stdin is not None
        assert worker.stdout.readline() == "half\n"
        control_plane.start()  # back for the second half
        worker.stdin.write("go\n")
        worker.stdin.flush()
        assert worker.wait(BOUND) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            if pipe is not None:
                pipe.close()
    result = json.loads(out.read_text(encoding="utf-8"))
    by_trace, metadata = stored_traces(control_plane.database_url)
    failed, sampled = set(result["failed"]), set(result["sampled"])
    kept = failed - sampled
    grown = (result["rss_peak"] - result["rss_start"]) / 2**20
    print(
        f"\nburst: {result['seconds']:.1f} s; {len(sampled)} sampled, {len(failed)} failed "
        f"({len(kept)} of them unsampled); held at most {result['held_bytes_max']} bytes "
        f"(keep_max_bytes {result['keep_max_bytes']}), the process grew {grown:.0f} MiB; "
        f"slowest request {result['slowest'] * 1000:.0f} ms; keep {result['keep']}; "
        f"delivery {result['delivery']}; "
        f"{len(by_trace)} traces stored"
    )
    assert len(failed) == 20_000 // 50 and 1_000 < len(sampled) < 3_000
    # Memory: the held requests within keep_max_bytes, and the process with them.
    assert 0 < result["held_bytes_max"] <= result["keep_max_bytes"]
    assert result["keep"]["evicted"] > 0  # the bound was what held them back
    assert grown < 200, f"the process grew {grown:.0f} MiB"
    # Every failed request saved once the control plane was back, every sampled one too, and
    # nothing else: the requests that did not matter were dropped.
    delivery = result["delivery"]
    assert (delivery["dropped"], delivery["rejected"], delivery["flushed"]) == (0, 0, True)
    assert set(by_trace) == failed | sampled
    assert result["keep"]["kept"] == len(kept)
    for trace_id in failed:
        (envelope,) = [e for e in by_trace[trace_id] if e["name"] == "charge_card"]
        assert "PaymentDeclined" in json.dumps(envelope["output"]), envelope["output"]
    for trace_id in kept:
        assert "failed" in metadata[trace_id]["chronicle.kept"]
    # The agent waited on the control plane only around the outage: a registration holds a
    # request at most registration_timeout (a deadline), and once one goes unanswered the next
    # ones are queued instead of waiting, until the control plane answers a registration in
    # time again (its answers to span writes do not count: the restarted server answers those
    # while still slow to register, which made a third request wait in vain). So the waits that
    # went unanswered are at most the outage's two edges, never one per request of its half.
    assert delivery["registrations_unanswered"] <= 2
    assert 0 < delivery["registration_waits"] <= len(sampled)
