"""Boundaries in thread pools and executors: recorded into the submitting span, and replayed."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import chronicle
from chronicle.integrations.threads import ChronicleExecutor, propagate


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

    before = recording.control_plane.snapshot()
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
    assert recording.control_plane.snapshot() == before


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


def test_a_plain_thread_with_propagate_and_without(recording):
    tools = Tools()
    results: dict[str, chronicle.Session | None] = {}

    def probe(key: str) -> None:
        results[key] = chronicle.current_session()
        tools.square(5)

    with chronicle.record("thread") as session:
        carried = threading.Thread(target=propagate(probe), args=("carried",))
        carried.start()
        carried.join()
        with ThreadPoolExecutor(max_workers=1) as pool:  # no propagation: an implicit span
            pool.submit(probe, "lost").result()
    assert results["carried"] is session
    assert results["lost"] is None
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["span_id"] == session.span_id
