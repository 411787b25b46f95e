"""Section 8: corpus replay throughput (issue 27) and ``chronicle.diff`` growth (issue 28).

Scenarios (run in a fresh process of this venv by ``ours.py``, which dispatches to them):

- ``corpus``: ``recordings`` live requests of ``examples/triage_agent.py`` (its wrapped
  ``openai.OpenAI`` client pointed at the harness's ``LlmServer``), each recorded in this process
  with ``chronicle.testing.capture()`` and written as an incident file by the real code, then the
  folder replayed with ``replay_corpus`` ``reps`` times (one core, this process), then, when
  ``xdist`` is set, ``pytest --chronicle-corpus DIR --chronicle-entry ...`` in a subprocess with
  ``-n 0`` and ``-n 2``, timed from outside (wall time, start-up included).
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
TICKETS = [
    "I cannot reset my password, the link expired",
    "Your service has an outage since this morning",
    "Please refund my order from last week",
    "My invoice shows the wrong currency",
    "How do I change my billing address?",
]
TIERS = ["standard", "enterprise"]
DIFF_GROWTH_LIMIT = 12.0
"""10x the calls may cost at most this many times the time (or memory): linear, plus noise."""


def request(n: int) -> dict[str, str]:
    """The n-th request's input (as ``tests/test_corpus.py`` varies them)."""
    return {
        "ticket": f"{TICKETS[n % len(TICKETS)]} (ticket {n})",
        "customer_tier": TIERS[n % len(TIERS)],
    }


# ---- scenario: corpus ---------------------------------------------------------------------------


def _pytest_corpus(folder: Path, workers: int, expected: int) -> dict[str, Any]:
    """``pytest --chronicle-corpus`` over ``folder`` in a fresh process: wall time, outcome."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "CHRONICLE_"))}
    env["PYTHONPATH"] = str(REPO)  # the entry's module, as `python -m` from the repo would see
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    command += ["--chronicle-corpus", str(folder), "--chronicle-entry", ENTRY, str(folder)]
    command += ["-n", str(workers)]
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=folder.parent, env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - started
    last = (done.stdout.strip().splitlines() or [""])[-1]
    passed = done.returncode == 0 and f"{expected} passed" in last
    said = re.search(r" in ([0-9.]+)s", last)
    return {
        "workers": workers,
        "wall_s": wall,
        "session_s": float(said.group(1)) if said else None,
        "passed": passed,
        "summary": last[-200:],
    }


def scenario_corpus(cfg: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    import chronicle
    from chronicle.save.incident import Incident
    from chronicle.testing import capture
    from chronicle.whatif.corpus import replay_corpus
    from examples import triage_agent

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
        if cfg.get("xdist"):
            for workers in cfg.get("workers", [0, 2]):
                pytest_runs.append(_pytest_corpus(folder, int(workers), count))
        return {
            "recordings": count,
            "calls_per_recording": calls,
            "live_s": live_s,
            "live_total_s": sum(live_s),
            "replay_s": replay_s,
            "outcomes": outcomes,
            "pytest": pytest_runs,
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


def _rows_corpus(run: dict[str, Any], table: Any) -> None:
    if "error" in run:
        table.add(TITLE_CORPUS, "corpus replay", "", "failed", key="corpus", note=run["error"])
        return
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
    by_workers = {p["workers"]: p for p in run.get("pytest", [])}
    single = by_workers.get(0)
    for workers, label in ((0, "one process (-n 0)"), (2, "two workers (-n 2)")):
        found = by_workers.get(workers)
        if found is None:
            continue
        wall = found["wall_s"]
        table.add(
            TITLE_CORPUS,
            f"pytest --chronicle-corpus, {label}, wall incl. start-up",
            "rec/s",
            count / wall,
            reference="live requests",
            reference_value=live_rate,
            ratio_to_reference=ratio(count / wall, live_rate),
            key=f"corpus_pytest_{workers}",
            note=f"{wall:.2f} s for {count}"
            + (
                ""
                if found.get("session_s") is None
                else f" (pytest's own session time {found['session_s']:.2f} s)"
            )
            + (
                f"; {ratio(single['wall_s'], wall):.2f}x the -n 0 rate"
                if workers and single and ratio(single["wall_s"], wall)
                else ""
            )
            + ("" if found["passed"] else f"; NOT ALL PASSED: {found['summary']}"),
        )


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
                targets.append(
                    {
                        "target": f"diff ({shape}, from {source}) {what} grows no faster than the "
                        f"calls: {c_large:,}/{c_small:,} <= {DIFF_GROWTH_LIMIT:.0f}x "
                        f"(linear {ideal:.1f}x)",
                        "value": grown,
                        "limit": DIFF_GROWTH_LIMIT,
                        "met": None if grown is None else grown <= DIFF_GROWTH_LIMIT,
                        "ratio": True,
                    }
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
    if good or corpus_runs:
        _rows_corpus(good[0] if good else corpus_runs[0], table)
    diff_runs = raw.get("diff", [])
    if diff_runs:
        good = ok(diff_runs)
        return _rows_diff(good[0] if good else diff_runs[0], table)
    return []
