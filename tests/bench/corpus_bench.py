"""Section 8: corpus replay throughput (issue 27) and ``chronicle.diff`` growth (issue 28).

Scenarios (run in a fresh process of this venv by ``ours.py``, which dispatches to them):

- ``corpus``: ``recordings`` live requests of ``examples/triage_agent.py`` (its wrapped
  ``openai.OpenAI`` client pointed at the harness's ``LlmServer``), each recorded in this process
  with ``chronicle.testing.capture()`` and written as an incident file by the real code, then the
  folder replayed with ``replay_corpus`` ``reps`` times (one core, this process), then, when
  ``xdist`` is set, a larger corpus (the recordings repeated) through fresh processes timed
  from outside (wall time, start-up included; CPU time; the load average as each ended):
  ``pytest --chronicle-corpus DIR --chronicle-entry ...`` with ``--collect-only`` (its
  start-up), ``-n 0``, ``-n 2`` and ``-n 0 --chronicle-jobs 2``; ``chronicle replay DIR`` with
  and without ``-j 2`` (the same start-up without pytest); and, for reference, 10,000 empty
  tests through ``pytest -n 0`` and ``-n 2`` (what pytest-xdist costs per item, whatever the
  item). Peak memory of ``-n 0`` and of ``--chronicle-jobs 2`` at each of ``memory_sizes``.
- ``diff``: for each size, two recordings of a nested agent (``agent`` > ``step`` x k > 9
  ``lookup`` tool calls each; a flat shape too: every ``lookup`` directly under ``agent``) made
  with ``capture()``, the second with the result of the middle ``lookup`` changed; then
  ``chronicle.diff(a, b)`` on the two envelope lists and on the two incident files, timed
  (``reps``, median of wall time; the process's CPU time, min, in the notes) and, in separate
  runs, its peak of traced allocations (``tracemalloc``).

``run.py`` turns their results into rows (``figures``) and targets (``targets``).
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from common import med, ok, ratio

REPO = Path(__file__).resolve().parents[2]
ENTRY = "examples.triage_agent:triage"
TITLE_CORPUS = "8a. Corpus replay (examples/triage_agent.py, incident files)"
TITLE_DIFF = "8b. chronicle.diff of two recordings (one changed call in the middle)"
JOBS = 2
"""``--chronicle-jobs`` and ``chronicle replay -j`` of the rows that spread a corpus."""
PROCESS_REPS = 3
"""Runs of each fresh-process way over the large corpus (the fastest is kept)."""
DIFF_GROWTH_LIMIT = 12.0
"""10x the calls may cost at most this many times the time (or memory): linear, plus noise."""


# ---- scenario: corpus ---------------------------------------------------------------------------


def _timed(command: list[str], cwd: Path) -> tuple[float, Any, int, str]:
    """``command`` in a fresh process of this venv (``PYTHONPATH`` the repo, so the entry's
    module imports as ``python -m`` from the repo would see it): its wall time, the resource
    usage of it and its waited-for children (``os.wait4``: a shared machine stretches the wall
    time, not the CPU time), its exit code, and its output's last line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "CHRONICLE_"))}
    env["PYTHONPATH"] = str(REPO)
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    out = process.stdout.read() if process.stdout is not None else ""
    _, status, usage = os.wait4(process.pid, 0)  # this child only, its waited-for workers in it
    wall = time.perf_counter() - started
    return wall, usage, os.waitstatus_to_exitcode(status), (out.strip().splitlines() or [""])[-1]


def _load() -> float:
    """The machine's load average over the last minute: how many processes wanted its CPUs
    (2 here) while a row ran."""
    return os.getloadavg()[0]


def _pytest_corpus(
    folder: Path, workers: int, expected: int, *, collect_only: bool = False, jobs: int = 0
) -> dict[str, Any]:
    """``pytest --chronicle-corpus`` over ``folder`` in a fresh process (``-n workers``, and
    ``--chronicle-jobs jobs`` when given): wall time, CPU time and peak resident memory of it
    and its waited-for children, outcome. ``collect_only``: start-up and collection only."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    command += ["--chronicle-corpus", str(folder), "--chronicle-entry", ENTRY, str(folder)]
    command += ["-n", str(workers), *(["--collect-only"] if collect_only else [])]
    command += ["--chronicle-jobs", str(jobs)] if jobs else []
    wall, usage, code, last = _timed(command, folder.parent)
    wanted = f"{expected} tests collected" if collect_only else f"{expected} passed"
    said = re.search(r" in ([0-9.]+)s", last)
    return {
        "workers": workers,
        "jobs": jobs,
        "recordings": expected,
        "wall_s": wall,
        "session_s": float(said.group(1)) if said else None,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mib": usage.ru_maxrss / 1024,
        "load": _load(),
        "passed": code == 0 and wanted in last,
        "summary": last[-200:],
    }


def _chronicle_replay(folder: Path, expected: int, jobs: int = 1) -> dict[str, Any]:
    """``chronicle replay DIR --entry ...`` in a fresh process (the same start-up a pytest run
    pays: an interpreter, Chronicle, the entry's module), timed as ``_pytest_corpus``."""
    command = [sys.executable, "-m", "chronicle", "replay", str(folder), "--entry", ENTRY]
    command += ["-j", str(jobs)] if jobs > 1 else []
    wall, usage, code, last = _timed(command, folder.parent)
    return {
        "jobs": jobs,
        "recordings": expected,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "passed": code == 0 and f"{expected} recordings: {expected} passed" in last,
        "summary": last[-200:],
    }


TRIVIAL_TESTS = 10_000
"""The xdist reference: this many parametrized tests that do nothing."""


def _trivial_suite(root: Path, workers: int) -> dict[str, Any]:
    """``TRIVIAL_TESTS`` empty tests through ``pytest -n workers`` in a fresh process: what
    pytest-xdist costs per item when an item costs nothing."""
    folder = root / "trivial"
    if not folder.exists():
        folder.mkdir()
        (folder / "test_trivial.py").write_text(
            "import pytest\n\n\n"
            f"@pytest.mark.parametrize('n', range({TRIVIAL_TESTS}))\n"
            "def test_nothing(n):\n    pass\n",
            encoding="utf-8",
        )
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", str(workers)]
    wall, usage, code, last = _timed([*command, "test_trivial.py"], folder)
    return {
        "workers": workers,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "passed": code == 0 and f"{TRIVIAL_TESTS} passed" in last,
        "summary": last[-200:],
    }


def _copies(source: Path, folder: Path, count: int) -> Path:
    """``folder`` holding ``count`` incident files: the recordings of ``source`` repeated
    (each a copy under a name of its own), for the larger corpora of the pytest rows."""
    recorded = sorted(source.glob("*.json"))
    folder.mkdir(parents=True)
    for n in range(count):
        shutil.copyfile(recorded[n % len(recorded)], folder / f"request-{n:05d}.json")
    return folder


def scenario_corpus(cfg: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    import chronicle
    from chronicle.save.incident import Incident
    from chronicle.testing import capture
    from chronicle.whatif.corpus import replay_corpus
    from examples import triage_agent
    from tests.test_corpus import request  # the requests the corpus tests record

    count, warmup = int(cfg["recordings"]), int(cfg.get("warmup", 3))
    root = Path(tempfile.mkdtemp(prefix="chronicle-bench-corpus-"))
    folder = root / "incidents"
    try:
        triage_agent.client.base_url = cfg["llm_url"]
        for n in range(warmup):  # connection, imports, first-call caches: not timed
            with capture(), chronicle.record(f"warm-up {n}"):
                triage_agent.triage(**request(n))
        live_s: list[float] = []
        for n in range(count):
            with capture() as sent:
                with chronicle.record(f"triage-{n}", labels={"suite": "bench"}):
                    started = time.perf_counter()
                    triage_agent.triage(**request(n))
                    live_s.append(time.perf_counter() - started)
            Incident.of(sent.envelopes).write(folder / f"request-{n:04d}.json")
        calls = len(sent.envelopes)
        # Any model call the replay failed to serve from the recording now fails loudly.
        triage_agent.client.base_url = "http://127.0.0.1:9/v1"
        replay_s: list[float] = []
        outcomes: list[dict[str, int]] = []
        for _ in range(int(cfg["reps"])):
            gc.collect()
            started = time.perf_counter()
            results = replay_corpus([folder], ENTRY)
            replay_s.append(time.perf_counter() - started)
            tally: dict[str, int] = {}
            for result in results:
                tally[result.outcome] = tally.get(result.outcome, 0) + 1
            outcomes.append(tally)
        pytest_runs: list[dict[str, Any]] = []
        memory_runs: list[dict[str, Any]] = []
        replay_runs: list[dict[str, Any]] = []
        trivial_runs: list[dict[str, Any]] = []
        big_count = int(cfg.get("pytest_recordings", count))
        big_replay_s: list[float] = []
        if cfg.get("xdist"):
            # The pytest rows run a larger corpus (the recordings repeated), so that a process's
            # start-up is not most of what is timed; the in-process rate is measured on it too.
            big = _copies(folder, root / f"corpus-{big_count}" / "incidents", big_count)
            for _ in range(2):
                gc.collect()
                started = time.perf_counter()
                replay_corpus([big], ENTRY)
                big_replay_s.append(time.perf_counter() - started)
            # Start-up and collection alone, in one process (under xdist, --collect-only does
            # not start the workers, so it would not measure theirs).
            # Each way in turn, PROCESS_REPS times (alternating, so a burst of load elsewhere
            # falls on all of them); the fastest run of each is kept, all walls in its figures.
            ways: list[tuple[str, Any]] = [
                ("collect", lambda: _pytest_corpus(big, 0, big_count, collect_only=True)),
                *[
                    (f"n{w}", lambda w=w: _pytest_corpus(big, int(w), big_count))
                    for w in cfg.get("workers", [0, 2])
                ],
                ("jobs", lambda: _pytest_corpus(big, 0, big_count, jobs=JOBS)),
                *[
                    (f"replay{j}", lambda j=j: _chronicle_replay(big, big_count, j))
                    for j in (1, JOBS)  # the same corpus through chronicle replay
                ],
            ]
            tried: dict[str, list[dict[str, Any]]] = {}
            for _ in range(PROCESS_REPS):
                for name, way in ways:
                    tried.setdefault(name, []).append(way())
            for name, found in tried.items():
                fastest = min(found, key=lambda f: f["wall_s"]) | {
                    "walls": [f["wall_s"] for f in found]
                }
                if name == "collect":
                    pytest_runs.append(fastest | {"collect_only": True})
                elif name.startswith("replay"):
                    replay_runs.append(fastest)
                else:
                    pytest_runs.append(fastest)
            trivial_runs += [_trivial_suite(root, workers) for workers in (0, 2)]
            for size in cfg.get("memory_sizes", []):
                corpus = _copies(folder, root / f"memory-{size}" / "incidents", int(size))
                memory_runs.append(_pytest_corpus(corpus, 0, int(size)))
                memory_runs.append(_pytest_corpus(corpus, 0, int(size), jobs=JOBS))
                shutil.rmtree(corpus.parent, ignore_errors=True)
        return {
            "recordings": count,
            "calls_per_recording": calls,
            "live_s": live_s,
            "live_total_s": sum(live_s),
            "replay_s": replay_s,
            "outcomes": outcomes,
            "pytest_recordings": big_count,
            "pytest_replay_s": big_replay_s,
            "pytest": pytest_runs,
            "memory": memory_runs,
            "replay_fresh": replay_runs,
            "trivial": trivial_runs,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- scenario: diff -----------------------------------------------------------------------------

_CHANGED: list[int | None] = [None]
"""The global index of the ``lookup`` call whose result differs (``None``: recording A)."""
_COUNTER = [0]


def _agents() -> tuple[Any, Any]:
    """The nested and the flat agent, as boundaries (built after ``chronicle`` is imported)."""
    import chronicle

    @chronicle.boundary("lookup", kind="tool")
    def lookup(query: str, limit: int = 3) -> dict[str, Any]:
        index = _COUNTER[0]
        _COUNTER[0] += 1
        hits = [f"doc-{index}-{k}" for k in range(limit)]
        if index == _CHANGED[0]:
            hits[1] = "doc-changed"
        return {"query": query, "hits": hits}

    @chronicle.boundary("step")
    def step(number: int, lookups: int) -> int:
        return sum(len(lookup(f"step {number} query {i}")["hits"]) for i in range(lookups))

    @chronicle.boundary("agent")
    def nested(task: str, steps: int, per_step: int) -> int:
        return sum(step(number, per_step) for number in range(steps))

    @chronicle.boundary("agent")
    def flat(task: str, steps: int, per_step: int) -> int:
        return sum(len(lookup(f"query {i}")["hits"]) for i in range(steps * (per_step + 1)))

    return nested, flat


def _label(call: Any) -> str:
    """``name#n`` of a diff line (A's call, else B's)."""
    side = call.a or call.b
    return "?" if side is None else str(side.label)


def _record(agent: Any, steps: int, per_step: int, changed: int | None) -> list[Any]:
    import chronicle
    from chronicle.testing import capture

    _CHANGED[0], _COUNTER[0] = changed, 0
    with capture(max_queue=1_000_000) as sent:
        with chronicle.record("diff-bench"):
            agent("answer the question", steps, per_step)
    return sent.envelopes


def scenario_diff(cfg: dict[str, Any]) -> dict[str, Any]:
    import chronicle
    from chronicle.save.incident import Incident

    nested, flat = _agents()
    per_step = 9
    root = Path(tempfile.mkdtemp(prefix="chronicle-bench-diff-"))
    found: dict[str, Any] = {}
    try:
        for shape, agent in (("nested", nested), ("flat", flat)):
            for size in cfg["sizes"]:
                steps = max(1, int(size) // (per_step + 1))
                lookups = steps * (per_step if shape == "nested" else per_step + 1)
                a = _record(agent, steps, per_step, None)
                b = _record(agent, steps, per_step, lookups // 2)
                path_a, path_b = root / f"{shape}-{size}-a.json", root / f"{shape}-{size}-b.json"
                Incident.of(a).write(path_a)
                Incident.of(b).write(path_b)
                entry: dict[str, Any] = {"calls": len(a), "calls_b": len(b)}
                for source, left, right in (("envelopes", a, b), ("files", path_a, path_b)):
                    seconds: list[float] = []
                    cpu: list[float] = []
                    peaks: list[float] = []
                    result: Any = None
                    for _ in range(int(cfg["reps"])):
                        gc.collect()
                        started, cpu_started = time.perf_counter(), time.process_time()
                        result = chronicle.diff(left, right)
                        seconds.append(time.perf_counter() - started)
                        cpu.append(time.process_time() - cpu_started)
                    gc_off: list[float] = []
                    for _ in range(int(cfg.get("gc_off_reps", 1))):
                        gc.collect()
                        gc.disable()
                        try:
                            started = time.perf_counter()
                            chronicle.diff(left, right)
                            gc_off.append(time.perf_counter() - started)
                        finally:
                            gc.enable()
                    for _ in range(int(cfg.get("memory_reps", 1))):
                        del result
                        gc.collect()
                        tracemalloc.start()
                        before = tracemalloc.get_traced_memory()[0]
                        result = chronicle.diff(left, right)
                        peaks.append((tracemalloc.get_traced_memory()[1] - before) / 2**20)
                        tracemalloc.stop()
                    first = result.first_divergence
                    entry[source] = {
                        "seconds": seconds,
                        "cpu_seconds": cpu,
                        "seconds_gc_off": gc_off,
                        "peak_mib": peaks,
                        "changed": [_label(c) for c in result.changed()],
                        "first_divergence": None if first is None else _label(first),
                    }
                    del result
                found[f"{shape}/{size}"] = entry
        return {"sizes": cfg["sizes"], "diff": found}
    finally:
        shutil.rmtree(root, ignore_errors=True)


SCENARIOS = {"corpus": scenario_corpus, "diff": scenario_diff}


# ---- figures ------------------------------------------------------------------------------------


def _rows_corpus(run: dict[str, Any], table: Any) -> list[dict[str, Any]]:
    if "error" in run:
        table.add(TITLE_CORPUS, "corpus replay", "", "failed", key="corpus", note=run["error"])
        return []
    count = run["recordings"]
    live = run["live_total_s"]
    live_rate = count / live if live else None
    warm = run["replay_s"][1:] or run["replay_s"]
    replay = med(warm)
    rate = count / replay if replay else None
    every = all(o == {"passed": count} for o in run["outcomes"])
    table.add(
        TITLE_CORPUS,
        f"live requests, recorded ({count} x {run['calls_per_recording']} calls, local model)",
        "req/s",
        live_rate,
        key="corpus_live",
        note=f"{live:.3f} s in all, {1000 * live / count:.2f} ms a request (median "
        f"{1000 * (med(run['live_s']) or 0):.2f} ms); LlmServer answers at once",
    )
    table.add(
        TITLE_CORPUS,
        "replay_corpus, one core (in process, files read each time)",
        "rec/s",
        rate,
        reference="live requests",
        reference_value=live_rate,
        ratio_to_reference=ratio(rate, live_rate),
        key="corpus_replay",
        note=f"{replay:.3f} s for {count}; x ref = live time / replay time; "
        f"first replay {run['replay_s'][0]:.3f} s; "
        + ("all passed" if every else f"outcomes {run['outcomes']}"),
    )
    return _rows_pytest(run, table)


PYTEST_SHARE = 0.5
"""``pytest --chronicle-corpus -n 0`` at least this share of the in-process rate (issue 41)."""
XDIST_GAIN = 1.6
"""``-n 2`` at least this many times the ``-n 0`` rate."""
XDIST_WALL_S = 60.0
"""1,000 recordings through ``pytest -n 2`` in less than this."""
MEMORY_GROWTH = 1.5
"""Peak memory of the largest corpus / the smallest's at most this: flat (streamed)."""


def _ratio_target(
    text: str, value: float | None, limit: float, *, least: bool = False
) -> dict[str, Any]:
    """A target on a ratio: ``value`` at most ``limit`` (``least``: at least)."""
    met = None if value is None else (value >= limit if least else value <= limit)
    return {"target": text, "value": value, "limit": limit, "met": met, "ratio": True}


def _mode(found: dict[str, Any]) -> str:
    """How a pytest row ran: ``-n 2``, ``-n 0 --chronicle-jobs 2``."""
    jobs = found.get("jobs") or 0
    return f"-n {found['workers']}" + (f" --chronicle-jobs {jobs}" if jobs else "")


def _walls(found: dict[str, Any]) -> str:
    """The wall times of every run of a way, as the note lists them."""
    return ", ".join(f"{w:.2f}" for w in found.get("walls", [found["wall_s"]])) + " s"


def _times(value: float | None, base: float | None, mode: str, what: str) -> str:
    """``; 1.23x {what}`` for a mode other than ``-n 0``, when both figures are known."""
    found = ratio(value, base)
    return "" if mode == "-n 0" or found is None else f"; {found:.2f}x {what}"


def _rate_row(table: Any, base_rate: float | None) -> Any:
    """A function adding a row of recordings a second, beside the in-process rate."""

    def add(label: str, rate: float | None, key: str, note: str | None) -> None:
        table.add(
            TITLE_CORPUS,
            label,
            "rec/s",
            rate,
            reference="replay_corpus in process",
            reference_value=base_rate,
            ratio_to_reference=ratio(rate, base_rate),
            key=key,
            note=note,
        )

    return add


def _rows_pytest(run: dict[str, Any], table: Any) -> list[dict[str, Any]]:
    """The pytest corpus rows (issue 41 item 6) and their targets.

    Each way of running has two rows: its rate on the wall time of the whole command (start-up
    included: what a person waits for), and its rate after start-up (the wall time less that of
    ``--collect-only`` in one process: interpreter, plugins, Chronicle, collection). The
    targets are judged on both, each labelled with its figure."""
    count = run.get("pytest_recordings", run["recordings"])
    runs = [p for p in run.get("pytest", []) if not p.get("collect_only")]
    if not runs:
        return []
    in_process = min(run.get("pytest_replay_s") or [0.0]) or None
    base_rate = None if in_process is None else count / in_process
    table.add(
        TITLE_CORPUS,
        f"replay_corpus in process, {count:,} recordings (the pytest rows' corpus)",
        "rec/s",
        base_rate,
        key="corpus_pytest_in_process",
        note=None if in_process is None else f"{in_process:.2f} s, fastest of 2",
    )
    start = next((p for p in run.get("pytest", []) if p.get("collect_only")), None)
    start_s = start["wall_s"] if start is not None else None
    if start is not None:
        table.add(
            TITLE_CORPUS,
            f"pytest --chronicle-corpus --collect-only, {count:,} recordings: start-up",
            "s",
            start_s,
            key="corpus_pytest_start_s",
            note=f"fastest of {_walls(start)}; CPU {start['cpu_s']:.2f} s; interpreter, "
            "plugins, Chronicle, collection",
        )
    whole: dict[str, float] = {}
    after: dict[str, float | None] = {}
    for found in runs:
        mode, wall = _mode(found), found["wall_s"]
        whole[mode] = count / wall
        rest = None if start_s is None else wall - start_s
        after[mode] = count / rest if rest and rest > 0 else None
        notes = [
            f"{wall:.2f} s for {count:,} (fastest of {_walls(found)}), CPU {found['cpu_s']:.2f} s "
            "(its waited processes)"
        ]
        if mode != "-n 0" and whole.get("-n 0"):
            notes.append(f"{whole[mode] / whole['-n 0']:.2f}x the -n 0 rate")
        if not found["passed"]:
            notes.append(f"NOT ALL PASSED: {found['summary']}")
        named = f"pytest --chronicle-corpus {mode}, {count:,} recordings"
        key = f"corpus_pytest_{mode.replace(' ', '').replace('-', '_')}"
        rate_row = _rate_row(table, base_rate)
        rate_row(f"{named}, wall incl. start-up", whole[mode], f"{key}_rate", "; ".join(notes))
        rate_row(
            f"{named}, after start-up",
            after[mode],
            f"{key}_after_rate",
            None
            if rest is None
            else f"{rest:.2f} s after the {start_s:.2f} s of --collect-only"
            + _times(after.get(mode), after.get("-n 0"), mode, "the -n 0 rate after start-up")
            + f"; load average {found['load']:.1f} as it ended",
        )
    for found in run.get("replay_fresh", []):
        rate = count / found["wall_s"]
        what = "chronicle replay DIR --entry" + (
            f" -j {found['jobs']}" if found["jobs"] > 1 else ""
        )
        _rate_row(table, base_rate)(
            f"{what}, {count:,} recordings, a fresh process, wall incl. start-up",
            rate,
            f"corpus_replay_fresh_j{found['jobs']}_rate",
            f"fastest of {_walls(found)}, CPU {found['cpu_s']:.2f} s; the start-up a pytest "
            "run pays too, without pytest"
            + ("" if found["passed"] else f"; NOT ALL PASSED: {found['summary']}"),
        )
    trivial = {found["workers"]: found for found in run.get("trivial", [])}
    for workers, found in sorted(trivial.items()):
        per_item = found["cpu_s"] * 1000 / TRIVIAL_TESTS
        table.add(
            TITLE_CORPUS,
            f"reference: {TRIVIAL_TESTS:,} empty tests through pytest -n {workers}, wall",
            "s",
            found["wall_s"],
            key=f"corpus_trivial_n{workers}_s",
            note=f"CPU {found['cpu_s']:.2f} s, {per_item:.2f} ms a test"
            + (
                f"; {found['wall_s'] / trivial[0]['wall_s']:.2f}x the -n 0 time: xdist's cost "
                "per item, whatever the item"
                if workers and 0 in trivial
                else ""
            )
            + ("" if found["passed"] else f"; NOT ALL PASSED: {found['summary']}"),
        )
    jobs = f"-n 0 --chronicle-jobs {JOBS}"
    targets: list[dict[str, Any]] = []
    for figure, rates in (("wall incl. start-up", whole), ("after start-up", after)):
        text = f"pytest --chronicle-corpus -n 0 >= {PYTEST_SHARE}x the in-process rate"
        targets.append(
            _ratio_target(
                f"{text} ({count:,} recordings, judged on its {figure})",
                ratio(rates.get("-n 0"), base_rate),
                PYTEST_SHARE,
                least=True,
            )
        )
        for mode in ("-n 2", jobs):
            text = f"pytest --chronicle-corpus {mode} >= {XDIST_GAIN}x the -n 0 rate"
            targets.append(
                _ratio_target(
                    f"{text} ({count:,} recordings, both rates on their {figure}; 2 CPUs shared "
                    "with whatever else runs)",
                    ratio(rates.get(mode), rates.get("-n 0")),
                    XDIST_GAIN,
                    least=True,
                )
            )
    two = next((p for p in runs if _mode(p) == "-n 2"), None)
    if two is not None:
        seconds = two["wall_s"] * 1000 / count  # scaled to 1,000 recordings
        targets.append(
            {
                "target": f"1,000 recordings through pytest -n 2 in < {XDIST_WALL_S:.0f} s "
                f"(measured on {count:,}, wall incl. start-up)",
                "value": seconds,
                "limit": XDIST_WALL_S,
                "met": two["passed"] and seconds < XDIST_WALL_S,
            }
        )
    for mode in ("-n 0", jobs):
        memory = sorted(
            (p for p in run.get("memory", []) if _mode(p) == mode), key=lambda p: p["recordings"]
        )
        for found in memory:
            table.add(
                TITLE_CORPUS,
                f"pytest --chronicle-corpus {mode}, {found['recordings']:,} recordings: "
                "peak memory",
                "MiB",
                found["peak_mib"],
                key=f"corpus_pytest_memory_{mode.replace(' ', '').replace('-', '_')}_"
                f"{found['recordings']}",
                note=f"{found['wall_s']:.1f} s"
                + (
                    "; pytest's process (the replaying ones are the forkserver's)"
                    if "jobs" in mode
                    else ""
                )
                + ("" if found["passed"] else f"; NOT ALL PASSED: {found['summary']}"),
            )
        if len(memory) >= 2:
            small, large = memory[0], memory[-1]
            grown = ratio(large["peak_mib"], small["peak_mib"])
            text = (
                f"pytest {mode} corpus peak memory flat: {large['recordings']:,} / "
                f"{small['recordings']:,}"
            )
            targets.append(
                _ratio_target(f"{text} recordings <= {MEMORY_GROWTH}x", grown, MEMORY_GROWTH)
            )
    return targets


def _rows_diff(run: dict[str, Any], table: Any) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []
    if "error" in run:
        table.add(TITLE_DIFF, "diff", "", "failed", key="diff", note=run["error"])
        return targets
    sizes = run["sizes"]
    small, large = str(sizes[0]), str(sizes[-1])
    for shape in ("nested", "flat"):
        for source in ("envelopes", "files"):
            figures: dict[str, tuple[float | None, float | None, int]] = {}
            cpu_min: dict[str, float | None] = {}
            for size in sizes:
                entry = run["diff"][f"{shape}/{size}"]
                got = entry[source]
                seconds, peak = med(got["seconds"]), med(got["peak_mib"])
                figures[str(size)] = (seconds, peak, entry["calls"])
                cpu_min[str(size)] = min(got["cpu_seconds"], default=None)
                gc_off = med(got.get("seconds_gc_off", []))
                table.add(
                    TITLE_DIFF,
                    f"{shape}, {entry['calls']:,} calls, from {source}: time",
                    "ms",
                    None if seconds is None else seconds * 1000,
                    key=f"diff_{shape}_{source}_{size}_ms",
                    note=f"changed: {', '.join(got['changed'])} (first divergence "
                    f"{got['first_divergence']})"
                    + ("" if gc_off is None else f"; {gc_off * 1000:.1f} ms with gc disabled")
                    + _cpu_note(cpu_min[str(size)]),
                )
                table.add(
                    TITLE_DIFF,
                    f"{shape}, {entry['calls']:,} calls, from {source}: peak memory",
                    "MiB",
                    peak,
                    key=f"diff_{shape}_{source}_{size}_mib",
                )
            (t_small, m_small, c_small), (t_large, m_large, c_large) = (
                figures[small],
                figures[large],
            )
            ideal = c_large / c_small
            for what, a, b, unit in (
                ("time", t_small, t_large, "x"),
                ("peak memory", m_small, m_large, "x"),
            ):
                grown = ratio(b, a)
                cpu_grown = ratio(cpu_min[large], cpu_min[small]) if what == "time" else None
                table.add(
                    TITLE_DIFF,
                    f"{shape}, from {source}: {what} at {c_large:,} / at {c_small:,} calls",
                    unit,
                    grown,
                    reference="calls ratio (linear)",
                    reference_value=ideal,
                    ratio_to_reference=ratio(grown, ideal),
                    key=f"diff_{shape}_{source}_{what.replace(' ', '_')}_growth",
                    note=None if cpu_grown is None else f"CPU time (min): {cpu_grown:.2f}x",
                )
                text = f"diff ({shape}, from {source}) {what} grows no faster than the calls"
                targets.append(
                    _ratio_target(
                        f"{text}: {c_large:,}/{c_small:,} <= {DIFF_GROWTH_LIMIT:.0f}x "
                        f"(linear {ideal:.1f}x)",
                        grown,
                        DIFF_GROWTH_LIMIT,
                    )
                )
    return targets


def _cpu_note(seconds: float | None) -> str:
    """The process's CPU time (min of the timed calls): on a shared machine, wall time also
    counts the time the process waited for a core."""
    return "" if seconds is None else f"; CPU time min {seconds * 1000:.1f} ms"


def figures(raw: dict[str, Any], table: Any) -> list[dict[str, Any]]:
    """Add section 8's rows to ``table``; return its targets."""
    corpus_runs = raw.get("corpus", [])
    good = ok(corpus_runs)
    targets: list[dict[str, Any]] = []
    if good or corpus_runs:
        targets += _rows_corpus(good[0] if good else corpus_runs[0], table)
    diff_runs = raw.get("diff", [])
    if diff_runs:
        good = ok(diff_runs)
        targets += _rows_diff(good[0] if good else diff_runs[0], table)
    return targets
