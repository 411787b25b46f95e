"""The pytest plugin (registered through the ``pytest11`` entry point): incidents as tests.

Save a recorded span once (``python -m chronicle save TRACE_ID SPAN_ID -o tests/incidents/x.json``)
and commit the file. Then either mark a test, and the whole test body runs inside the replay::

    @pytest.mark.chronicle_replay("incidents/x.json", run=["delete_file"])
    def test_the_fix_holds(chronicle_run):
        run_agent("clean up")
        assert chronicle_run.captured_result("delete_file", 1)["blocked"] is True

or open the replay where you want it with the ``chronicle_replay`` fixture::

    def test_the_fix_holds(chronicle_replay):
        with chronicle_replay("incidents/x.json", chronicle.ReplayPlan().run("delete_file")) as run:
            run_agent("clean up")

A relative path is read from the test file's folder. Instead of a file, ``trace_id=`` and
``span_id=`` read the span from the configured control plane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import ReplayRun, ReplayScope, replay, replay_trace

MARKER = "chronicle_replay"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``chronicle_replay`` marker."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(source=None, *, trace_id=None, span_id=None, run=(), stub=()): run the test "
        "inside a Chronicle replay of a saved span file or a recorded span; use the "
        "chronicle_run fixture to read the run",
    )


def _plan(
    run: Iterable[str | tuple[str, int]], stub: Iterable[str | tuple[str, int]]
) -> ReplayPlan:
    plan = ReplayPlan()
    for mode, targets in (("stub", stub), ("run", run)):
        for target in targets:
            name, n = (target, None) if isinstance(target, str) else target
            getattr(plan, mode)(name, n)
    return plan


def _opener(request: pytest.FixtureRequest) -> Callable[..., ReplayScope]:
    folder = Path(str(request.path)).parent

    def open_replay(
        source: str | Path | None = None,
        plan: ReplayPlan | None = None,
        *,
        trace_id: str | None = None,
        span_id: str | None = None,
    ) -> ReplayScope:
        if source is not None:
            path = Path(source)
            return replay(path if path.is_absolute() else folder / path, plan, span_id=span_id)
        if trace_id is None or span_id is None:
            raise pytest.UsageError(
                "chronicle_replay needs a saved span file, or both trace_id= and span_id="
            )
        return replay_trace(trace_id, span_id, plan)

    return open_replay


@pytest.fixture
def chronicle_replay(request: pytest.FixtureRequest) -> Callable[..., ReplayScope]:
    """Open a replay: ``chronicle_replay(path_or_None, plan=None, *, trace_id=, span_id=)``."""
    return _opener(request)


@pytest.fixture
def chronicle_run(request: pytest.FixtureRequest) -> Iterator[ReplayRun]:
    """The replay the ``chronicle_replay`` marker opened around this test."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        raise pytest.UsageError(
            f"the chronicle_run fixture needs @pytest.mark.{MARKER}(...) on the test"
        )
    source = marker.args[0] if marker.args else marker.kwargs.get("source")
    plan = _plan(marker.kwargs.get("run", ()), marker.kwargs.get("stub", ()))
    scope = _opener(request)(
        source, plan, trace_id=marker.kwargs.get("trace_id"), span_id=marker.kwargs.get("span_id")
    )
    with scope as run:
        yield run
