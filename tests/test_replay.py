"""Replay against the real control plane: stubs, cut-points, and nothing written."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from agentplane_primitives.utils import new_trace_id
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from examples import support_agent as agent
from tests.support.stored import stored


@pytest.fixture
def incident(recording):
    """One recorded run of the support agent: model, delete_file, model."""
    agent.TOOLS["delete_file"] = agent.delete_file
    agent.FILES["/var/data/customers.db"] = "records"
    with chronicle.record("incident") as session:
        answer = agent.run_agent("clean up my files")
    assert answer == "Done: I deleted /var/data/customers.db."
    recording.saved(session.trace_id, 3)
    yield session
    agent.TOOLS["delete_file"] = agent.delete_file


def test_the_incident_replays_with_the_fixed_tool_as_cut_point(incident, recording):
    agent.TOOLS["delete_file"] = agent.delete_file_gated
    agent.FILES["/var/data/customers.db"] = "records"
    before = stored(recording.control_plane, incident.trace_id)
    calls_before = agent.model_calls
    plan = chronicle.ReplayPlan().run("delete_file", 1)
    with chronicle.replay_trace(incident.trace_id, incident.span_id, plan) as run:
        answer = agent.run_agent("clean up my files")
    assert run.captured_result("delete_file", 1) == {
        "blocked": True,
        "reason": "/var/data/customers.db is outside /tmp",
    }
    assert run.captured_input("delete_file", 1) == {"path": "/var/data/customers.db"}
    assert agent.model_calls == calls_before  # the stubbed model code never ran
    assert "/var/data/customers.db" in agent.FILES
    assert [(c.name, c.invocation_index, c.mode) for c in run.call_log()] == [
        ("model", 1, "stub"),
        ("delete_file", 1, "run"),
        ("model", 2, "stub"),
    ]
    # the model's second answer was recorded against the old tool result: replay returns it
    assert answer == "Done: I deleted /var/data/customers.db."
    assert chronicle.flush(10)
    assert stored(recording.control_plane, incident.trace_id) == before


def test_stubbed_dict_outputs_allow_attribute_access(incident):
    with chronicle.replay_trace(incident.trace_id, incident.span_id) as run:
        reply: Any = agent.model(model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}])
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "delete_file"
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert issubclass(type(reply), dict)  # (not isinstance: reply stays Any for mypy)
    assert json.loads(json.dumps(reply))["id"] == "chatcmpl-demo-" + reply.id.rsplit("-", 1)[1]
    assert run.captured_result("model", 1) == reply
    with pytest.raises(AttributeError, match="no key 'nope'"):
        _ = reply.nope


def test_one_call_too_many_is_a_mismatch_naming_the_boundary(incident):
    with chronicle.replay_trace(incident.trace_id, incident.span_id) as run:
        agent.delete_file("/a")
        with pytest.raises(chronicle.ReplayMismatchError) as caught:
            agent.delete_file("/b")
    assert caught.value.name == "delete_file"
    assert caught.value.invocation == 2
    message = str(caught.value)
    assert "call 2 of 'delete_file'" in message and "ReplayPlan().run('delete_file', 2)" in message
    assert message.endswith(f"; the recorded trace: {incident.url}")
    assert [c.mode for c in run.call_log()] == ["stub", "stub"]


def test_a_new_boundary_runs_when_the_plan_says_so(incident):
    @chronicle.boundary("brand_new", kind="tool")
    def brand_new() -> str:
        return "live"

    with chronicle.replay_trace(incident.trace_id, incident.span_id) as _:
        with pytest.raises(chronicle.ReplayMismatchError, match="has no call to 'brand_new'"):
            brand_new()
    plan = chronicle.ReplayPlan().run("brand_new")
    with chronicle.replay_trace(incident.trace_id, incident.span_id, plan) as run:
        assert brand_new() == "live"
    assert run.captured_result("brand_new", 1) == "live"


def test_a_recorded_failure_is_raised_again(recording):
    @chronicle.boundary("charge", kind="tool")
    def charge(amount: int) -> dict[str, object]:
        raise TimeoutError(f"gateway timed out charging {amount}")

    with chronicle.record("failing") as session, pytest.raises(TimeoutError):
        charge(5)
    recording.saved(session.trace_id, 1)

    @chronicle.boundary("charge", kind="tool")
    def charge_fixed(amount: int) -> dict[str, object]:
        raise AssertionError("a stub must not run")

    with chronicle.replay_trace(session.trace_id, session.span_id):
        with pytest.raises(TimeoutError) as caught:  # the original class, rebuilt
            charge_fixed(5)
    assert str(caught.value) == "gateway timed out charging 5"
    cause = caught.value.__cause__
    assert isinstance(cause, chronicle.RecordedCallError)
    assert cause.original_type == "TimeoutError"
    assert "ReplayPlan().run('charge', 1)" in str(cause)
    # The message links the recorded trace's page on the control plane, for people.
    page = f"{recording.control_plane.url}/#chronicle/{session.trace_id}"
    assert session.url == page
    assert str(cause).endswith(f"the recorded trace: {page})")


def test_a_recorded_failure_whose_class_cannot_be_rebuilt_is_a_recorded_call_error(recording):
    class QuotaError(Exception):  # defined in a function: not importable by name
        pass

    class NeedsTwo(Exception):
        def __init__(self, code: int, text: str) -> None:
            super().__init__(f"{code}: {text}")

    @chronicle.boundary("quota", kind="tool")
    def quota(kind: str) -> None:
        raise QuotaError("out of quota") if kind == "local" else NeedsTwo(7, "no")

    with chronicle.record("failing") as session:
        for kind in ("local", "two"):
            with pytest.raises(Exception):  # noqa: B017, PT011
                quota(kind)
    recording.saved(session.trace_id, 2)
    with chronicle.replay_trace(session.trace_id, session.span_id):
        with pytest.raises(chronicle.RecordedCallError) as local:
            quota("local")
        with pytest.raises(chronicle.RecordedCallError) as two:
            quota("two")
    assert local.value.original_type == "QuotaError" and "out of quota" in str(local.value)
    assert two.value.original_type == "NeedsTwo" and "7: no" in str(two.value)


def test_a_saved_file_replays_with_no_control_plane(incident, recording, tmp_path):
    body = {
        "envelopes": recording.control_plane.span_envelopes(incident.trace_id, incident.span_id)
    }
    saved = tmp_path / "incident.json"
    saved.write_text(json.dumps(body))
    chronicle.reset()  # no control plane configured from here on
    agent.TOOLS["delete_file"] = agent.delete_file_gated
    with chronicle.replay(saved, chronicle.ReplayPlan().run("delete_file")) as run:
        agent.run_agent("clean up my files")
    result: Any = run.captured_result("delete_file", 1)
    assert result["blocked"] is True


def test_replay_trace_without_a_control_plane_says_which_setting_to_set():
    with pytest.raises(chronicle.ReplayError, match="control_plane_url"):
        chronicle.replay_trace("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def test_an_unknown_trace_or_span_fails_on_entry_naming_the_ids(incident):
    unknown = new_trace_id()
    with pytest.raises(chronicle.ReplayError, match=f"trace {unknown} is not on the control plane"):
        chronicle.replay_trace(unknown, "00f067aa0ba902b7")
    with pytest.raises(
        chronicle.ReplayError, match=f"has no span 00f067aa0ba902b7.*{incident.span_id}"
    ):
        chronicle.replay_trace(incident.trace_id, "00f067aa0ba902b7")


def test_async_replay(recording):
    @chronicle.boundary("lookup", kind="tool")
    async def lookup(key: str) -> dict[str, str]:
        await asyncio.sleep(0)
        return {"value": key.upper()}

    async def main() -> None:
        async with chronicle.record("async") as session:
            await lookup("a")
        recording.saved(session.trace_id, 1)

        @chronicle.boundary("lookup", kind="tool")
        async def lookup_never(key: str) -> Any:  # the stub reads by attribute too
            raise AssertionError("stubbed")

        async with chronicle.replay_trace(session.trace_id, session.span_id) as run:
            result = await lookup_never("a")
        assert result.value == "A"
        assert [c.mode for c in run.call_log()] == ["stub"]

    asyncio.run(main())


def test_two_concurrent_replays_are_isolated(recording):
    @chronicle.boundary("step", kind="tool")
    def step(n: int) -> int:
        return n * 10

    sessions = []
    for base in (1, 2):
        with chronicle.record(f"run-{base}") as session:
            step(base)
            step(base + 100)
        sessions.append(session)
        recording.saved(session.trace_id, 2)

    barrier = threading.Barrier(2)
    results: dict[int, list[object]] = {}

    def replay_one(index: int) -> None:
        session = sessions[index]
        with chronicle.replay_trace(session.trace_id, session.span_id) as run:
            barrier.wait()
            first = step(0)
            barrier.wait()
            second = step(0)
        results[index] = [first, second, len(run.call_log())]

    threads = [threading.Thread(target=replay_one, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {0: [10, 1010, 2], 1: [20, 1020, 2]}
    assert step(7) == 70  # outside any replay the real code runs again


def test_stubbed_calls_produce_no_spans_in_the_users_exporter(control_plane):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=chronicle.ReplaySampler(TracerProvider().sampler))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(control_plane_url=control_plane.url, tracer_provider=provider)
    tracer = provider.get_tracer("user")

    @chronicle.boundary("tool_a", kind="tool")
    def tool_a() -> str:
        with tracer.start_as_current_span("user.inside"):
            return "a"

    with chronicle.record("to-replay") as session:
        tool_a()
    chronicle.flush(10)
    control_plane.wait_for_envelopes(session.trace_id, 1)
    exporter.clear()
    with chronicle.replay_trace(
        session.trace_id, session.span_id, chronicle.ReplayPlan().run("tool_a")
    ):
        with chronicle.record("opened-by-code-under-test"):
            assert tool_a() == "a"
        with tracer.start_as_current_span("user.during_replay"):
            pass
    chronicle.flush(10)
    assert exporter.get_finished_spans() == ()


def test_the_pytest_plugin_replays_a_committed_file(incident, recording, tmp_path):
    body = {
        "envelopes": recording.control_plane.span_envelopes(incident.trace_id, incident.span_id)
    }
    (tmp_path / "incidents").mkdir()
    (tmp_path / "incidents" / "incident-001.json").write_text(json.dumps(body))
    examples = Path(__file__).resolve().parent.parent / "examples"
    (tmp_path / "test_incident.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(examples)!r})
            import pytest
            import chronicle
            import support_agent as agent

            @pytest.mark.chronicle_replay(
                "incidents/incident-001.json", run=["delete_file"], expect_change=[("model", 2)]
            )
            def test_marker(chronicle_run):
                agent.TOOLS["delete_file"] = agent.delete_file_gated
                agent.run_agent("clean up my files")
                assert chronicle_run.captured_result("delete_file", 1)["blocked"] is True
                assert agent.model_calls == 0

            def test_fixture(chronicle_replay):
                agent.TOOLS["delete_file"] = agent.delete_file
                with chronicle_replay("incidents/incident-001.json") as run:
                    agent.run_agent("clean up my files")
                assert [c.mode for c in run.call_log()] == ["stub", "stub", "stub"]
                assert agent.model_calls == 0
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_the_trace_page_link_carries_no_credentials():
    chronicle.configure(control_plane_url="http://admin:pw@127.0.0.1:9/?api_key=k3y", enabled=False)
    with chronicle.record("link") as session:
        pass
    assert session.url == f"http://127.0.0.1:9/#chronicle/{session.trace_id}"
