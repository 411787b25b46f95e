"""A replay that departs from its recording says so: changed inputs, unused recordings, a plan
entry that matches nothing; strict mode raises; ``match="input"`` serves parallel calls their own
recording. Against the real control plane."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import chronicle
from examples import support_agent as agent
from tests.support.stored import stored


@pytest.fixture
def incident(recording):
    """One recorded run of the support agent: model, delete_file, model."""
    agent.TOOLS["delete_file"] = agent.delete_file
    agent.FILES["/var/data/customers.db"] = "records"
    with chronicle.record("incident") as session:
        agent.run_agent("clean up my files")
    recording.saved(session.trace_id, 3)
    yield session
    agent.TOOLS["delete_file"] = agent.delete_file


def replay_the_fix(
    incident: chronicle.Session, plan: chronicle.ReplayPlan, **options: Any
) -> tuple[chronicle.ReplayRun, str]:
    agent.TOOLS["delete_file"] = agent.delete_file_gated
    with chronicle.replay_trace(incident.trace_id, incident.span_id, plan, **options) as run:
        answer = agent.run_agent("clean up my files")
    return run, answer


def test_a_stub_served_a_changed_input_is_reported_with_the_paths_that_changed(incident, caplog):
    plan = chronicle.ReplayPlan().run("delete_file", 1)
    with caplog.at_level(logging.WARNING, logger="chronicle"):
        run, _ = replay_the_fix(incident, plan)
    (found,) = run.divergences()
    assert (found.name, found.index, found.kind, found.expected) == ("model", 2, "input", False)
    # the model's second call reads the gated tool's result, not the recorded deletion
    assert found.diff.startswith("messages[3].content: ")
    assert '\\"deleted\\": \\"/var/data/customers.db\\"' in found.diff
    assert '\\"blocked\\": true' in found.diff
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = warning.getMessage()
    assert "diverged from its recording" in text and "strict=True" in text
    assert "call 2 of 'model'" in text and "ReplayPlan().expect_change('model', 2)" in text


def test_strict_mode_raises_at_the_changed_call_with_the_diff_and_what_to_do(incident, recording):
    before = stored(recording.control_plane, incident.trace_id)
    plan = chronicle.ReplayPlan().run("delete_file", 1)
    with pytest.raises(chronicle.ReplayDivergenceError) as raised:
        replay_the_fix(incident, plan, strict=True)
    message = str(raised.value)
    assert "the input of call 2 of 'model' differs from its recording" in message
    assert "messages[3].content:" in message and "blocked" in message
    assert "ReplayPlan().run('model', 2)" in message
    assert "ReplayPlan().expect_change('model', 2)" in message
    assert [d.kind for d in raised.value.divergences] == ["input"]
    assert isinstance(raised.value, chronicle.ReplayError)
    assert chronicle.flush(10)
    assert stored(recording.control_plane, incident.trace_id) == before


def test_a_strict_replay_of_a_real_fix_passes_when_the_plan_expects_the_change(incident):
    plan = chronicle.ReplayPlan().run("delete_file", 1).expect_change("model", 2)
    run, _ = replay_the_fix(incident, plan, strict=True)
    result: Any = run.captured_result("delete_file", 1)
    assert result["blocked"] is True
    (found,) = run.divergences()
    assert (found.name, found.index, found.kind, found.expected) == ("model", 2, "input", True)


def test_the_unchanged_code_replays_with_no_divergence_even_in_strict_mode(incident):
    agent.TOOLS["delete_file"] = agent.delete_file
    with chronicle.replay_trace(incident.trace_id, incident.span_id, strict=True) as run:
        agent.run_agent("clean up my files")
    assert run.divergences() == []


def test_recordings_never_used_are_reported_at_exit(incident, caplog):
    with (
        caplog.at_level(logging.WARNING, logger="chronicle"),
        chronicle.replay_trace(incident.trace_id, incident.span_id) as run,
    ):
        agent.model(model="gpt-4o-mini", messages=[
            {"role": "system", "content": "You are a careful support agent."},
            {"role": "user", "content": "clean up my files"},
        ])  # fmt: skip
        assert run.divergences() == []  # only known once the replay is over
    assert [(d.name, d.index, d.kind) for d in run.divergences()] == [
        ("delete_file", 1, "unused"),  # in the recording's call order
        ("model", 2, "unused"),
    ]
    assert "/var/data/customers.db" in run.divergences()[0].diff
    assert "call 1 of 'delete_file' was recorded but not made" in caplog.text


def test_unused_recordings_fail_a_strict_replay_on_exit(incident):
    with (
        pytest.raises(
            chronicle.ReplayDivergenceError, match="call 1 of 'delete_file' was recorded"
        ),
        chronicle.replay_trace(incident.trace_id, incident.span_id, strict=True),
    ):
        pass


def test_a_misspelt_cut_point_is_reported_and_fails_a_strict_replay(incident):
    agent.TOOLS["delete_file"] = agent.delete_file
    plan = chronicle.ReplayPlan().run("delete_fle")
    with chronicle.replay_trace(incident.trace_id, incident.span_id, plan) as run:
        agent.run_agent("clean up my files")
    (found,) = run.divergences()
    assert (found.name, found.index, found.kind) == ("delete_fle", None, "plan")
    assert "run('delete_fle') matched no call" in found.diff
    assert "did you mean 'delete_file'?" in found.diff
    with (
        pytest.raises(chronicle.ReplayDivergenceError, match="did you mean 'delete_file'"),
        chronicle.replay_trace(incident.trace_id, incident.span_id, plan, strict=True),
    ):
        agent.run_agent("clean up my files")


def test_a_plan_entry_for_a_call_number_that_never_came_is_reported(incident):
    plan = chronicle.ReplayPlan().stub("delete_file", 2)
    with chronicle.replay_trace(incident.trace_id, incident.span_id, plan) as run:
        agent.run_agent("clean up my files")
    (found,) = run.divergences()
    assert (found.kind, found.name, found.index) == ("plan", "delete_file", 2)
    assert "there was no call 2 of 'delete_file'" in found.diff


def test_a_strict_error_swallowed_by_the_code_under_test_is_raised_again_at_exit(incident):
    agent.TOOLS["delete_file"] = agent.delete_file_gated
    plan = chronicle.ReplayPlan().run("delete_file", 1)
    scope = chronicle.replay_trace(incident.trace_id, incident.span_id, plan, strict=True)
    scope.__enter__()
    with contextlib.suppress(Exception):  # an agent that catches everything its tools raise
        agent.run_agent("clean up my files")
    with pytest.raises(chronicle.ReplayDivergenceError, match="call 2 of 'model'"):
        scope.__exit__(None, None, None)


def test_what_the_recording_could_not_hold_is_not_a_divergence(recording):
    chronicle.configure(
        control_plane_url=recording.control_plane.url, flush_interval=0.05, max_payload_bytes=400
    )

    class Opaque:
        def __repr__(self) -> str:
            return f"<Opaque at {id(self):#x}>"

    @chronicle.boundary("ingest", kind="tool")
    def ingest(handle: object, token: str, text: str, rows: list[int]) -> str:
        return "ok"

    @chronicle.boundary("tally", kind="tool")
    def tally(rows: list[int]) -> int:
        return len(rows)

    secret, long_text, rows = "sk-proj-" + "a" * 40, "x" * 2000, list(range(500))
    with chronicle.record("lossy") as session:
        ingest(Opaque(), secret, long_text, rows)
        tally(rows)
    ingested, tallied = recording.saved(session.trace_id, 2)
    assert ingested["metadata"]["chronicle.truncated"] is True
    assert ingested["metadata"]["chronicle.lossy_input"] is True
    assert secret not in str(ingested["input"]["raw"])
    assert "…[truncated 1 keys]" in ingested["input"]["raw"]  # rows did not fit at all
    assert tallied["input"]["raw"]["rows"][-1].startswith("…[truncated ")  # a cut list

    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        assert ingest(Opaque(), secret, long_text, rows) == "ok"
        assert tally(rows) == 500
    assert run.divergences() == []
    plan = chronicle.ReplayPlan().stub("tally")
    with chronicle.replay_trace(session.trace_id, session.span_id, plan) as changed:
        ingest(Opaque(), secret, long_text, rows)
        tally([-1, *rows[1:]])
    assert [d.diff for d in changed.divergences()] == ["rows[0]: 0 -> -1"]
    with (
        pytest.raises(chronicle.ReplayDivergenceError, match=r"text: \"x+"),
        chronicle.replay_trace(session.trace_id, session.span_id, strict=True),
    ):
        ingest(Opaque(), secret, "y" + long_text, rows)


def test_match_input_serves_forty_shuffled_parallel_calls_their_own_recording(recording):
    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: int) -> dict[str, Any]:
        return {"key": key, "value": key * key}

    keys = list(range(40))
    with chronicle.record("parallel") as session:
        for key in keys:
            lookup(key)
    recording.saved(session.trace_id, 40)

    @chronicle.boundary("lookup", kind="tool")
    def lookup_stubbed(key: int) -> dict[str, Any]:
        raise AssertionError("stubbed")

    random.Random(7).shuffle(keys)
    start = threading.Barrier(8)

    def call(key: int) -> tuple[int, Any]:
        if key < 8:
            start.wait(5)  # the first calls start together
        return key, lookup_stubbed(key)

    with chronicle.replay_trace(
        session.trace_id, session.span_id, match="input", strict=True
    ) as run:
        with ThreadPoolExecutor(max_workers=8) as pool:
            served = list(pool.map(call, keys))
    assert all(result["key"] == key and result["value"] == key * key for key, result in served)
    assert run.divergences() == []
    assert sorted(c.recording or 0 for c in run.call_log()) == list(range(1, 41))

    with chronicle.replay_trace(session.trace_id, session.span_id) as by_order:
        in_order = [lookup_stubbed(key)["key"] for key in keys]
    assert in_order == list(range(40))  # by order the shuffled calls get the wrong recordings
    assert len([d for d in by_order.divergences() if d.kind == "input"]) > 30


def test_match_input_falls_back_to_order_and_reports_the_input_divergence(recording):
    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: int) -> int:
        return key

    with chronicle.record("fallback") as session:
        lookup(1)
        lookup(2)
    recording.saved(session.trace_id, 2)
    with chronicle.replay_trace(session.trace_id, session.span_id, match="input") as run:
        assert lookup(2) == 2
        assert lookup(3) == 1  # no recording has key 3: the first unused one answers
    (found,) = run.divergences()
    assert (found.name, found.index, found.kind) == ("lookup", 1, "input")
    assert found.diff == "key: 1 -> 3"
    assert "the input of call 1 of 'lookup' differs" in found.describe()
    assert [(c.invocation_index, c.recording) for c in run.call_log()] == [(2, 2), (1, 1)]
    with pytest.raises(ValueError, match="'order' or 'input'"):
        chronicle.replay_trace(session.trace_id, session.span_id, match="name")  # type: ignore[arg-type]
