"""Boundaries in thread pools and executors: recorded into the submitting span, and replayed."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import chronicle
from chronicle.integrations.threads import ChronicleExecutor, propagate
from tests.support.stored import stored


class Tools:
    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

        @chronicle.boundary("square", kind="tool")
        def square(n: int) -> int:
            with self.lock:
                self.calls += 1
            return n * n

        @chronicle.boundary("fan_out", kind="tool")
        def fan_out(items: list[int]) -> list[int]:
            with ChronicleExecutor(max_workers=3) as pool:
                return list(pool.map(square, items))

        self.square = square
        self.fan_out = fan_out


def test_pool_boundaries_are_recorded_in_the_span_and_stubbed_on_replay(recording):
    tools = Tools()
    with chronicle.record("pool") as session:
        assert tools.fan_out([1, 2, 3]) == [1, 4, 9]
    envelopes = recording.saved(session.trace_id, 4)
    (fan_out,) = [e for e in envelopes if e["name"] == "fan_out"]
    squares = [e for e in envelopes if e["name"] == "square"]
    assert len(squares) == 3
    assert {e["span_id"] for e in envelopes} == {session.span_id}
    assert {e["parent_envelope_id"] for e in squares} == {fan_out["envelope_id"]}
    assert sorted(e["metadata"]["chronicle.invocation_index"] for e in squares) == [1, 2, 3]

    before = stored(recording.control_plane, session.trace_id)
    calls = tools.calls
    plan = chronicle.ReplayPlan().run("fan_out")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
        replayed = tools.fan_out([1, 2, 3])
    assert sorted(replayed) == [1, 4, 9]  # concurrent calls of one name: numbered by start
    assert tools.calls == calls  # the squares were stubbed in the worker threads
    assert sorted((c.name, c.mode) for c in run.call_log()) == [
        ("fan_out", "run"),
        ("square", "stub"),
        ("square", "stub"),
        ("square", "stub"),
    ]
    assert chronicle.flush(10)
    assert stored(recording.control_plane, session.trace_id) == before


def test_run_in_executor_with_propagate_and_a_chronicle_default_executor(recording):
    tools = Tools()

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        first = await loop.run_in_executor(None, propagate(tools.square), 2)
        with ChronicleExecutor(max_workers=1) as pool:
            second = await loop.run_in_executor(pool, tools.square, 3)
        third = await asyncio.to_thread(tools.square, 4)  # copies the context by itself
        return [first, second, third]

    with chronicle.record("executor") as session:
        assert asyncio.run(main()) == [4, 9, 16]
    envelopes = recording.saved(session.trace_id, 3)
    assert [e["output"]["raw"] for e in envelopes] == [4, 9, 16]
    assert {e["span_id"] for e in envelopes} == {session.span_id}

    calls = tools.calls
    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        assert asyncio.run(main()) == [4, 9, 16]
    assert tools.calls == calls
    assert [c.mode for c in run.call_log()] == ["stub", "stub", "stub"]


def test_plain_threads_pools_and_run_in_executor_record_into_the_span_and_replay(recording):
    tools = Tools()

    def work() -> list[int]:
        results: list[int] = []
        with ThreadPoolExecutor(max_workers=2) as pool:  # a plain pool: no propagate()
            results.append(pool.submit(tools.square, 2).result())
            results.extend(pool.map(tools.square, [3]))
        thread = threading.Thread(target=lambda: results.append(tools.square(4)))
        thread.start()
        thread.join()

        async def main() -> int:
            return await asyncio.get_running_loop().run_in_executor(None, tools.square, 5)

        results.append(asyncio.run(main()))
        return results

    with chronicle.record("threads") as session:
        assert work() == [4, 9, 16, 25]
    envelopes = recording.saved(session.trace_id, 4)
    assert [e["output"]["raw"] for e in envelopes] == [4, 9, 16, 25]
    assert {e["span_id"] for e in envelopes} == {session.span_id}  # not 4 implicit traces

    before = stored(recording.control_plane, session.trace_id)
    calls = tools.calls
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        assert work() == [4, 9, 16, 25]
    assert tools.calls == calls  # every square was stubbed, in every thread
    assert [(c.name, c.mode) for c in run.call_log()] == [("square", "stub")] * 4
    assert chronicle.flush(10)
    assert stored(recording.control_plane, session.trace_id) == before  # no trace, no envelope


def worker_thread(fn: Callable[[int], object]) -> tuple[queue.Queue[int], queue.Queue[object]]:
    """A thread started now (outside any span or replay) that applies ``fn`` to what it gets."""
    inbox: queue.Queue[int] = queue.Queue()
    outbox: queue.Queue[object] = queue.Queue()

    def serve() -> None:
        while (item := inbox.get()) >= 0:
            try:
                outbox.put(fn(item))
            except Exception as exc:
                outbox.put(exc)

    threading.Thread(target=serve, daemon=True).start()
    return inbox, outbox


def test_a_thread_outside_the_replay_is_served_by_the_only_active_replay(recording):
    tools = Tools()
    with chronicle.record("one") as session:
        tools.square(6)
    recording.saved(session.trace_id, 1)
    inbox, outbox = worker_thread(tools.square)  # carries no context at all
    before, calls = stored(recording.control_plane, session.trace_id), tools.calls
    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        inbox.put(6)
        assert outbox.get(timeout=10) == 36
        with chronicle.span():  # a span opened meanwhile elsewhere registers nothing either
            pass
    inbox.put(-1)
    assert tools.calls == calls
    assert [(c.name, c.mode) for c in run.call_log()] == [("square", "stub")]
    assert chronicle.flush(10)
    assert stored(recording.control_plane, session.trace_id) == before


def test_with_two_replays_active_a_call_outside_both_is_refused(recording):
    tools = Tools()
    with chronicle.record("two") as session:
        tools.square(7)
    recording.saved(session.trace_id, 1)
    inbox, outbox = worker_thread(tools.square)
    before, calls = stored(recording.control_plane, session.trace_id), tools.calls
    with (
        chronicle.replay_trace(session.trace_id, session.span_id),
        chronicle.replay_trace(session.trace_id, session.span_id),
    ):
        inbox.put(7)
        refused = outbox.get(timeout=10)
    inbox.put(-1)
    assert isinstance(refused, chronicle.ReplayError)
    message = str(refused)
    assert "'square' was called with no replay in its context while 2 replays" in message
    assert "chronicle.propagate" in message
    assert tools.calls == calls
    assert chronicle.flush(10)
    assert stored(recording.control_plane, session.trace_id) == before


def test_thread_context_off_leaves_plain_pools_alone_and_propagate_still_carries(recording):
    chronicle.configure(
        control_plane_url=recording.control_plane.url, flush_interval=0.05, thread_context=False
    )
    tools = Tools()
    results: dict[str, chronicle.Session | None] = {}

    def probe(key: str) -> None:
        results[key] = chronicle.current_session()
        tools.square(5)

    try:
        with chronicle.record("thread") as session:
            carried = threading.Thread(target=propagate(probe), args=("carried",))
            carried.start()
            carried.join()
            with ThreadPoolExecutor(max_workers=1) as pool:  # not carried: an implicit span
                pool.submit(probe, "lost").result()
    finally:
        chronicle.configure(control_plane_url=recording.control_plane.url, flush_interval=0.05)
    assert results["carried"] is session
    assert results["lost"] is None
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["span_id"] == session.span_id


def test_a_thread_outliving_its_request_records_later_calls_in_request_spans_of_their_own(
    recording,
):
    """A heartbeat started inside a request: its beats while the request is open are that
    request's; once the request span closed, each beat opens its own implicit request span in
    a new trace, and the closed request gains nothing (issue 24, item 7)."""

    @chronicle.boundary("beat", kind="tool")
    def beat(n: int) -> list[str]:
        session = chronicle.current_session()
        assert session is not None
        return [session.trace_id, session.span_id]

    go: queue.Queue[int | None] = queue.Queue()
    seen: queue.Queue[list[str]] = queue.Queue()

    def heartbeat() -> None:
        while (n := go.get(timeout=5)) is not None:
            seen.put(beat(n))

    with chronicle.record("starts a heartbeat") as request:
        thread = threading.Thread(target=heartbeat, daemon=True)
        thread.start()
        go.put(0)
        assert seen.get(timeout=5) == [request.trace_id, request.span_id]
    try:
        after = []
        for n in range(1, 4):
            go.put(n)
            after.append(seen.get(timeout=5))
    finally:
        go.put(None)
        thread.join(5)
    assert request.trace_id not in {trace_id for trace_id, _ in after}
    assert len({trace_id for trace_id, _ in after}) == 3  # one implicit request span each
    for trace_id, span_id in after:
        (envelope,) = recording.saved(trace_id, 1)
        assert (envelope["name"], envelope["span_id"]) == ("beat", span_id)
    (only,) = recording.saved(request.trace_id, 1)  # the closed request gained nothing
    assert only["name"] == "beat"
    assert len(recording.control_plane.trace_envelopes(request.trace_id)) == 1
