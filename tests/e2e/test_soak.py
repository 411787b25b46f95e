"""Soak: many processes record into one control plane that restarts; nothing goes unaccounted.

Two ``multiprocessing`` workers (one forked, one spawned) and two plain subprocesses record at
once into one real control plane, which is stopped and started again twice while they run; one
subprocess is sent SIGTERM halfway. Afterwards every call any of them recorded is on the control
plane, or counted as dropped or rejected by the process that recorded it: never neither.

``make test`` runs a short version (about 5 s of recording); set ``SOAK_SECONDS`` (for example
300) for a long one. (Not a ``CHRONICLE_*`` name: the workers would take it for a setting.)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

from chronicle.testing import LocalControlPlane
from tests.support.load_worker import worker_output
from tests.support.soak_worker import record_for

ROOT = Path(__file__).resolve().parents[2]
SECONDS = float(os.environ.get("SOAK_SECONDS", "5"))


def read_output(path: Path) -> tuple[dict[str, set[str]], dict[str, object] | None]:
    """The calls a worker recorded (by trace) and its summary line, if it got to write one."""
    calls, summary = worker_output(path)
    recorded: dict[str, set[str]] = defaultdict(set)
    for trace_id, call_id in calls:
        recorded[trace_id].add(call_id)
    return recorded, summary


def stored_calls(control_plane: LocalControlPlane, trace_ids: set[str]) -> set[str]:
    found: set[str] = set()
    for trace_id in trace_ids:
        for envelope in control_plane.trace_envelopes(trace_id):
            found.add(envelope["input"]["raw"]["call_id"])
    return found


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (3.12+)
def test_every_recorded_call_is_stored_or_counted_through_restarts_and_a_sigterm(
    fresh_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    url = fresh_control_plane.url
    outputs: dict[str, Path] = {}

    def out(name: str) -> str:
        outputs[name] = tmp_path / f"{name}.txt"
        return str(outputs[name])

    workers = [
        context.Process(target=record_for, args=(url, SECONDS, f"mp-{kind}", out(f"mp-{kind}")))
        for kind, context in (
            ("fork", multiprocessing.get_context("fork")),
            ("spawn", multiprocessing.get_context("spawn")),
        )
    ]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    environ["PYTHONPATH"] = str(ROOT)
    scripts = {
        name: subprocess.Popen(
            [sys.executable, "-m", "tests.support.soak_worker", url, str(SECONDS), name, out(name)],
            cwd=ROOT,
            env=environ,
            stderr=subprocess.DEVNULL,
        )
        for name in ("plain", "sigtermed")
    }
    for worker in workers:
        worker.start()
    try:
        _run(fresh_control_plane, workers, scripts, outputs)
    finally:  # whatever failed, no process outlives the test
        for worker in workers:
            if worker.is_alive():
                worker.kill()
            worker.join(10)
        for process in scripts.values():
            if process.poll() is None:
                process.kill()
            process.wait(10)


def _run(
    control_plane: LocalControlPlane,
    workers: Sequence[multiprocessing.process.BaseProcess],
    scripts: dict[str, subprocess.Popen[bytes]],
    outputs: dict[str, Path],
) -> None:
    """Restart the control plane twice and SIGTERM one script while all record; then check."""
    started = time.monotonic()
    while not all(p.exists() and p.stat().st_size for p in outputs.values()):
        assert time.monotonic() - started < 60, "the recording processes did not start"
        time.sleep(0.05)  # every process is recording from here on

    def restart_twice() -> None:
        for _ in range(2):
            time.sleep(SECONDS / 3)
            control_plane.stop()
            time.sleep(min(1.0, SECONDS / 10))
            control_plane.start()

    restarts = threading.Thread(target=restart_twice)
    restarts.start()
    time.sleep(SECONDS / 2)
    scripts["sigtermed"].send_signal(signal.SIGTERM)
    restarts.join()

    bound = SECONDS + 120
    for worker in workers:
        worker.join(bound)
        assert worker.exitcode == 0
    for name, process in scripts.items():
        code = process.wait(bound)
        assert code == (-signal.SIGTERM if name == "sigtermed" else 0), name

    total = 0
    for name, path in outputs.items():
        recorded, summary = read_output(path)
        calls = set().union(*recorded.values()) if recorded else set()
        assert calls, f"{name} recorded nothing"
        total += len(calls)
        missing = calls - stored_calls(control_plane, set(recorded))
        if name == "sigtermed":
            assert summary is None  # it ended by the signal, not by finishing
            assert not missing, f"{name}: {len(missing)} of {len(calls)} calls lost"
        else:
            assert summary is not None, name
            counted = int(summary["dropped"]) + int(summary["rejected"])  # type: ignore[call-overload]
            assert len(missing) <= counted, f"{name}: {len(missing)} lost, {counted} counted"
            assert summary["flushed"] is True or counted, name
    assert total > 0
