"""``make bench``: Chronicle's costs next to their references and the prior implementation.

Every figure is the median of several repetitions, shown beside a reference measured in the same
run (a plain OpenTelemetry span, the bare SDK call, the control plane's own latency, ...), and
beside the prior implementation, ``agent-chronicle==1.1.1``, run through the same scenario. The
machines this runs on are shared and noisy, so absolute times drift; the ratios are the result.

How it is run:

- Each scenario runs in a fresh process: ``ours.py`` with this venv's Python, ``prior.py`` with
  the Python of a throwaway virtual environment built here (in a temporary directory) holding
  ``agent-chronicle==1.1.1`` and the same versions of openai, httpx and pydantic. Both import
  ``chronicle``, which is why they never share a venv.
- For each section, the two implementations' processes alternate (ours, prior, prior, ours, ...)
  for ``--rounds`` rounds. Inside a process the variants of a figure are interleaved block by
  block, in a rotating order. A ratio to a reference pairs blocks of the same process; a ratio to
  the prior pairs the two processes of one round; then the median is taken.
- One real control plane (``chronicle.testing.LocalControlPlane``) serves sections 1 to 4; each
  20,000-call burst gets a fresh one. ``LlmServer`` runs in a process of its own.

Writes ``bench-results.json`` at the repository root (git-ignored) and prints the table.
``--quick`` runs a smaller version (for checking the harness, not for the numbers).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import corpus_bench  # noqa: E402  (this folder is not a package)
import evaluate_bench  # noqa: E402
import growth  # noqa: E402
import keep_bench  # noqa: E402
import peers  # noqa: E402
import report_bench  # noqa: E402
from common import llm_server, med, ok, percentile, ratio  # noqa: E402

PRIOR_SPEC = "agent-chronicle==1.1.1"
SHARED_PINS = ("openai", "httpx", "pydantic", "agentplane-primitives")
"""Installed in the prior's venv at the versions this venv has, so only Chronicle differs."""

DEFAULT: dict[str, Any] = {
    "rounds": 3,
    "blocks": 8,
    "calls_tool": 20_000,
    "calls_llm": 5_000,
    "wrap_calls": 120,
    "stream_chunks": 500,
    "stream_pairs": 20,
    "replay_calls": 1_000,
    "replay_reps": 2,
    "registration_samples": 80,
    "registration_warmup": 5,
    "burst_calls": 20_000,
    "ceiling_envelopes": 500,
    "memory_calls_tool": 10_000,
    "memory_calls_llm": 5_000,
    "flush_timeout": 900,
    # section 6, peers: calls per figure (each process runs its blocks of them)
    "peers_calls_tool": 12_000,
    "peers_calls_llm": 3_000,
    # section 7, growth
    "growth_call_sizes": [100, 1_000, 10_000, 100_000],
    "growth_calls_per_size": 100_000,
    "growth_payload_sizes": [100, 1_000, 10_000, 100_000, 1_000_000],
    "growth_payload_bytes_per_block": 2_000_000,
    "growth_payload_blocks": 5,
    "growth_replay_sizes": [100, 1_000, 10_000],
    "growth_replay_reps": 2,
    "growth_memory_sizes": [1_000, 10_000, 100_000],
    # section 8, corpus replay and diff
    "corpus_recordings": 200,
    "corpus_reps": 4,
    "corpus_xdist": True,
    "corpus_pytest_recordings": 1_000,
    "corpus_memory_sizes": [100, 10_000],
    "diff_sizes": [1_000, 10_000],
    "diff_reps": 3,
    # section 9, keep on incident
    "keep_requests": 300,
    "keep_calls_per_request": 10,
    "keep_memory_requests": 500,
    # section 10, chronicle evaluate --agent over many traces
    "evaluate_traces": 2_000,
    # section 11, the reports of a corpus replay
    "report_recordings": 1_000,
}
QUICK: dict[str, Any] = {
    **DEFAULT,
    "rounds": 2,
    "calls_tool": 2_000,
    "calls_llm": 400,
    "wrap_calls": 20,
    "stream_pairs": 3,
    "blocks": 2,
    "replay_calls": 100,
    "replay_reps": 1,
    "registration_samples": 20,
    "burst_calls": 1_000,
    "ceiling_envelopes": 100,
    "memory_calls_tool": 1_000,
    "memory_calls_llm": 250,
    "peers_calls_tool": 1_000,
    "peers_calls_llm": 200,
    "growth_call_sizes": [100, 1_000, 5_000],
    "growth_calls_per_size": 5_000,
    "growth_payload_sizes": [100, 10_000, 100_000],
    "growth_payload_bytes_per_block": 300_000,
    "growth_payload_blocks": 2,
    "growth_replay_sizes": [50, 500],
    "growth_replay_reps": 1,
    "growth_memory_sizes": [1_000, 5_000],
    "corpus_recordings": 20,
    "corpus_reps": 2,
    "corpus_pytest_recordings": 100,
    "corpus_memory_sizes": [50, 500],
    "diff_sizes": [200, 2_000],
    "diff_reps": 2,
    "keep_requests": 40,
    "keep_memory_requests": 100,
    "evaluate_traces": 300,
    "report_recordings": 200,
}
SECTIONS = "calls,wrap,stream,replay,registration,delivery,peers,growth,corpus,keep,evaluate,report"

OURS, PRIOR = "chronicle", "prior"
T0 = time.monotonic()


def log(message: str) -> None:
    sys.stderr.write(f"[{time.monotonic() - T0:6.0f}s] {message}\n")
    sys.stderr.flush()


# ---- the machine ------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average_start": load_average(),
    }


# ---- the processes ----------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """This environment without anything that would change what the children import or record."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(
            (
                "OTEL_",
                "CHRONICLE_",
                "PYTHON",
                "CONTROL_PLANE_",
                "LANGFUSE_",
                "LOGFIRE_",
                "TRACELOOP_",
            )
        )
    } | {"TRACELOOP_TELEMETRY": "false"}  # the peers never phone home


def build_prior_venv(root: Path) -> Path:
    """A fresh virtual environment with the prior implementation; returns its Python."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    log(f"building the prior's venv in {root} ({PRIOR_SPEC})")
    subprocess.run([base, "-m", "venv", str(root)], check=True, env=child_env())
    python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    pins = []
    for name in SHARED_PINS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            pins.append(f"{name}=={importlib.metadata.version(name)}")
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run([*install, PRIOR_SPEC, *pins], env=child_env(), capture_output=True)
    if done.returncode != 0:
        log("pinned install failed; installing the prior with its own dependency versions")
        subprocess.run([*install, PRIOR_SPEC, "openai"], check=True, env=child_env())
    return python


class Runner:
    """Runs one scenario in a fresh process of one implementation and returns its JSON."""

    def __init__(self, pythons: dict[str, Path | None], workdir: Path) -> None:
        self.pythons = pythons
        self.workdir = workdir
        self.scripts = {OURS: HERE / "ours.py", PRIOR: HERE / "prior.py"}

    def add(self, impl: str, python: Path, script: Path) -> None:
        """Run ``impl``'s scenarios as ``python script`` (the peers)."""
        self.pythons[impl] = python
        self.scripts[impl] = script

    def available(self, impl: str) -> bool:
        return self.pythons.get(impl) is not None

    def run(self, impl: str, cfg: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
        python = self.pythons[impl]
        assert python is not None
        started = time.monotonic()
        try:
            done = subprocess.run(
                [str(python), str(self.scripts[impl]), json.dumps(cfg)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=child_env(),
                cwd=self.workdir,
            )
        except subprocess.TimeoutExpired:
            log(f"  {impl} {cfg['scenario']}: timed out after {timeout:.0f}s")
            return {"error": f"timed out after {timeout:.0f}s"}
        for line in done.stdout.splitlines():
            if line.startswith("BENCH-RESULT "):
                result: dict[str, Any] = json.loads(line.removeprefix("BENCH-RESULT "))
                log(f"  {impl} {cfg['scenario']}: {time.monotonic() - started:.0f}s")
                return result
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-25:])
        log(f"  {impl} {cfg['scenario']} failed (exit {done.returncode}):\n{tail}")
        return {"error": f"exit {done.returncode}: {tail[-2000:]}"}

    def rounds(self, cfg: dict[str, Any], rounds: int) -> dict[str, list[dict[str, Any]]]:
        """``rounds`` alternating runs of both implementations (ours first in even rounds)."""
        found: dict[str, list[dict[str, Any]]] = {OURS: [], PRIOR: []}
        for index in range(rounds):
            order = (OURS, PRIOR) if index % 2 == 0 else (PRIOR, OURS)
            for impl in order:
                if self.available(impl):
                    found[impl].append(self.run(impl, cfg))
        return found


# ---- figures ----------------------------------------------------------------------------------


Getter = Callable[[dict[str, Any]], "float | None"]


def stub_us_of(kind: str) -> Getter:
    """The median stubbed-call time of ``kind`` in one run."""
    return lambda run: med(run["stub_us"][kind])


def per_round(
    runs: dict[str, list[dict[str, Any]]], get: Getter, prior_get: Getter | None = None
) -> tuple[float | None, float | None, float | None]:
    """``(our median, prior median, median over rounds of our/prior)`` of a per-run value."""
    prior_get = prior_get or get
    ours = [get(r) if "error" not in r else None for r in runs.get(OURS, [])]
    prior = [prior_get(r) if "error" not in r else None for r in runs.get(PRIOR, [])]
    pairs = [ratio(a, b) for a, b in zip(ours, prior, strict=False)]
    return (
        med([v for v in ours if v is not None]),
        med([v for v in prior if v is not None]),
        med([v for v in pairs if v is not None]),
    )


class Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(
        self,
        section: str,
        figure: str,
        unit: str,
        chronicle: float | str | None,
        *,
        reference: str | None = None,
        reference_value: float | None = None,
        ratio_to_reference: float | None = None,
        prior: float | str | None = None,
        ratio_to_prior: float | None = None,
        key: str | None = None,
        note: str | None = None,
    ) -> None:
        self.rows.append(
            {
                "key": key,
                "section": section,
                "figure": figure,
                "unit": unit,
                "chronicle": chronicle,
                "reference": reference,
                "reference_value": reference_value,
                "ratio_to_reference": ratio_to_reference,
                "prior": prior,
                "ratio_to_prior": ratio_to_prior,
                "note": note,
            }
        )

    def get(self, key: str) -> dict[str, Any] | None:
        for row in self.rows:
            if row["key"] == key:
                return row
        return None


def section_calls(runs: dict[str, list[dict[str, Any]]], table: Table) -> None:
    title = "1. Per-call overhead (agent thread)"

    def samples(impl: str, variant: str) -> list[list[float]]:
        return [r["samples_us"].get(variant, []) for r in ok(runs.get(impl, []))]

    def flat(impl: str, variant: str) -> list[float]:
        return [v for block in samples(impl, variant) for v in block]

    def paired(variant: str, ref: str) -> float | None:
        ratios: list[float | None] = []
        for a_blocks, b_blocks in zip(samples(OURS, variant), samples(OURS, ref), strict=False):
            ratios.extend(ratio(a, b) for a, b in zip(a_blocks, b_blocks, strict=False))
        return med([r for r in ratios if r is not None])

    def vs_prior(variant: str, prior_variant: str) -> tuple[float | None, float | None]:
        _, p, r = per_round(
            runs,
            lambda run: med(run["samples_us"].get(variant, [])),
            lambda run: med(run["samples_us"].get(prior_variant, [])),
        )
        return p, r

    rows = [
        ("bare", "bare function, tool payload", "bare/tool", None, "bare/tool"),
        ("bare_llm", "bare function, llm payload", "bare/llm", None, "bare/llm"),
        (
            "otel_span",
            "plain OTel span (BatchSpanProcessor, discarding exporter)",
            "otel_span/tool",
            None,
            None,
        ),
        (
            "otel_json",
            "plain span + 2 JSON attributes, tool payload",
            "otel_json/tool",
            "otel_span/tool",
            None,
        ),
        (
            "otel_json_llm",
            "plain span + 2 JSON attributes, llm payload",
            "otel_json/llm",
            "otel_span/tool",
            None,
        ),
        (
            "tool_discard",
            "`tool` boundary, discarding sink",
            "chronicle/tool/discard",
            "otel_json/tool",
            "prior/tool/discard",
        ),
        (
            "tool_cp",
            "`tool` boundary, real control plane",
            "chronicle/tool/cp",
            "otel_json/tool",
            "prior/tool/cp",
        ),
        (
            "llm_discard",
            "`llm` boundary, discarding sink",
            "chronicle/llm/discard",
            "otel_json/llm",
            "prior/llm/discard",
        ),
        (
            "llm_cp",
            "`llm` boundary, real control plane",
            "chronicle/llm/cp",
            "otel_json/llm",
            "prior/llm/cp",
        ),
        (
            "tool_held",
            "`tool` boundary, delivery held (backed up: each record measured)",
            "chronicle/tool/held",
            "otel_json/tool",
            None,
        ),
        (
            "llm_held",
            "`llm` boundary, delivery held (backed up: each record measured)",
            "chronicle/llm/held",
            "otel_json/llm",
            None,
        ),
        (
            "tool_thread",
            "`tool` boundary, agent thread CPU, delivery keeping up",
            "chronicle/tool/thread",
            "otel_json_thread/tool",
            None,
        ),
        (
            "llm_thread",
            "`llm` boundary, agent thread CPU, delivery keeping up",
            "chronicle/llm/thread",
            "otel_json_thread/llm",
            None,
        ),
    ]
    names = {
        "otel_span/tool": "plain span",
        "otel_json/tool": "span + JSON attrs (tool)",
        "otel_json/llm": "span + JSON attrs (llm)",
        "otel_json_thread/tool": "span + JSON attrs (tool), CPU",
        "otel_json_thread/llm": "span + JSON attrs (llm), CPU",
    }
    for key, label, variant, ref, prior_variant in rows:
        value = med(flat(OURS, variant))
        prior_value = prior_ratio = None
        if prior_variant is not None:
            prior_value, prior_ratio = vs_prior(variant, prior_variant)
        table.add(
            title,
            label,
            "µs/call",
            value,
            reference=names.get(ref) if ref else None,
            reference_value=med(flat(OURS, ref)) if ref else None,
            ratio_to_reference=paired(variant, ref) if ref else None,
            prior=prior_value,
            ratio_to_prior=prior_ratio,
            key=key,
        )
    drops = [d for r in ok(runs.get(PRIOR, [])) for v in r.get("dropped", {}).values() for d in v]
    if drops and max(drops):
        table.rows[-1]["note"] = f"the prior dropped up to {max(drops)} envelopes in a block"


def section_wrap(runs: dict[str, list[dict[str, Any]]], table: Table) -> None:
    title = "2. chronicle.wrap(OpenAI()) against LlmServer"
    ours = ok(runs.get(OURS, []))
    if not ours or not all(r.get("available") for r in ours):
        reason = next((r.get("reason") for r in ours if r.get("reason")), None)
        reason = reason or next((r.get("error") for r in runs.get(OURS, [])), "no result")
        prior_wrapped, _, _ = (None, None, None)
        prior_runs = ok(runs.get(PRIOR, []))
        if prior_runs:
            prior_wrapped = med([med(r["samples_us"]["wrapped"]) for r in prior_runs])
        table.add(
            title,
            "wrapped chat.completions.create",
            "µs/call",
            "not available",
            prior=prior_wrapped,
            key="wrap",
            note=str(reason)[:200],
        )
        return

    def slowdown(run: dict[str, Any]) -> float | None:
        s = run["samples_us"]
        return ratio(med(s["wrapped"]), med(s["bare_sdk"]))

    def overhead(run: dict[str, Any]) -> float | None:
        s = run["samples_us"]
        return med([a - b for a, b in zip(s["wrapped"], s["bare_sdk"], strict=False)])

    wrapped, prior_wrapped, r_prior = per_round(runs, lambda r: med(r["samples_us"]["wrapped"]))
    where = ours[0].get("where")
    table.add(
        title,
        "wrapped chat.completions.create (10 x 500-char messages)",
        "µs/call",
        wrapped,
        reference="bare SDK call",
        reference_value=med([med(r["samples_us"]["bare_sdk"]) for r in ours]),
        ratio_to_reference=med([slowdown(r) for r in ours]),
        prior=prior_wrapped,
        ratio_to_prior=r_prior,
        key="wrap",
        note=None if where == "chronicle.wrap" else where,
    )
    o, p, r = per_round(runs, overhead)
    table.add(
        title,
        "wrap overhead (median of call-by-call differences, wrapped - bare)",
        "µs/call",
        o,
        prior=p,
        ratio_to_prior=r,
        key="wrap_overhead",
    )


def section_stream(runs: list[dict[str, Any]], table: Table) -> None:
    """Our runs only: the prior does not record streams."""
    title = "2b. a streamed call through chronicle.wrap(OpenAI()) against LlmServer"
    ours = ok(runs)
    if not ours:
        reason = next((r.get("error") for r in runs), "no result")
        table.add(title, "stream", "ms", "not available", key="stream_wall", note=str(reason))
        return
    chunks = sorted({c for r in ours for c in r["chunks"]})

    def paired(field: str) -> float | None:
        # the ratio of medians in each run (its streams alternate wrapped/bare), then the median
        return med([ratio(med(r[field]["wrapped"]), med(r[field]["bare_sdk"])) for r in ours])

    for field, figure, key in (
        ("wall_ms", "wall time to consume the stream", "stream_wall"),
        ("first_chunk_ms", "time to first chunk", "stream_ttfc"),
        ("thread_cpu_ms", "CPU time of the consuming thread", "stream_cpu"),
    ):
        table.add(
            title,
            f"{figure} ({'/'.join(map(str, chunks))} chunks), wrapped",
            "ms",
            med([med(r[field]["wrapped"]) for r in ours]),
            reference="bare SDK",
            reference_value=med([med(r[field]["bare_sdk"]) for r in ours]),
            ratio_to_reference=paired(field),
            key=key,
        )


def section_replay(
    runs: dict[str, list[dict[str, Any]]], setup: dict[str, Any], table: Table
) -> None:
    title = "3. Replay"
    calls = setup.get("calls")
    f, pf, rf = per_round(runs, lambda r: med(r["fetch_ms"]))
    table.add(
        title,
        f"replay_trace entry (fetch), {calls}-call span",
        "ms",
        f,
        prior=pf,
        ratio_to_prior=rf,
        key="replay_fetch",
    )
    for kind in ("tool", "llm"):
        v, p, r = per_round(runs, stub_us_of(kind))
        table.add(
            title,
            f"stubbed `{kind}` call",
            "µs/call",
            v,
            prior=p,
            ratio_to_prior=r,
            key=f"stub_{kind}",
        )


def section_registration(runs: dict[str, list[dict[str, Any]]], table: Table) -> None:
    title = "4. Trace registration at the root (empty body)"

    def stat(field: str, q: float) -> Callable[[dict[str, Any]], float]:
        return lambda run: percentile(run[field], q)

    ours = ok(runs.get(OURS, []))
    for q, tag in ((50, "p50"), (99, "p99")):
        raw = med([stat("raw_post_ms", q)(r) for r in ours])
        entry, prior_entry, r_entry = per_round(runs, stat("entry_ms", q))
        table.add(
            title,
            f"record() entry {tag}",
            "ms",
            entry,
            reference=f"POST /v1/traces {tag} (httpx)",
            reference_value=raw,
            ratio_to_reference=med(
                [ratio(stat("entry_ms", q)(r), stat("raw_post_ms", q)(r)) for r in ours]
            ),
            prior=prior_entry,
            ratio_to_prior=r_entry,
            key=f"registration_{tag}",
        )
    timed = (  # the figure, its row's label ({} its percentile), key and note
        (
            "exit_ms",
            "record() exit {}",
            "exit",
            "the prior flushes at exit (waits for its span writes)",
        ),
        (
            "raw_post_ms",
            "control plane POST /v1/traces {} (plain httpx)",
            "raw_post",
            "same request from both processes: a check that they are comparable",
        ),
    )
    for field, label, key, note in timed:
        for q, tag in ((50, "p50"), (99, "p99")):
            v, p, r = per_round(runs, stat(field, q))
            table.add(
                title,
                label.format(tag),
                "ms",
                v,
                prior=p,
                ratio_to_prior=r,
                key=f"{key}_{tag}",
                note=note if tag == "p50" else None,
            )


def section_delivery(
    burst: dict[str, dict[str, Any]], memory: dict[str, dict[str, Any]], table: Table
) -> None:
    title = "5. Delivery"
    ours, prior = burst.get(OURS, {}), burst.get(PRIOR, {})

    def get(run: dict[str, Any], field: str) -> Any:
        return None if "error" in run else run.get(field)

    calls = ours.get("recorded") or prior.get("recorded")
    ceiling = med(get(ours, "ceiling_per_s") or [])
    rate, prior_rate = get(ours, "delivered_per_s"), get(prior, "delivered_per_s")
    table.add(
        title,
        f"envelopes/s reaching the control plane ({calls}-call burst, until flush)",
        "env/s",
        rate,
        reference="raw httpx batches of 100",
        reference_value=ceiling,
        ratio_to_reference=ratio(rate, ceiling),
        prior=prior_rate,
        ratio_to_prior=ratio(rate, prior_rate),
        key="delivery_rate",
        note=(
            f"prior's own ceiling run: {med(get(prior, 'ceiling_per_s') or []):.0f} env/s"
            if get(prior, "ceiling_per_s")
            else None
        ),
    )
    table.add(
        title,
        f"envelopes lost on a {calls}-call burst (default settings)",
        "envelopes",
        get(ours, "lost"),
        prior=get(prior, "lost"),
        key="lost",
        note=f"dropped counter: chronicle {get(ours, 'dropped')}, prior {get(prior, 'dropped')}",
    )
    table.add(
        title,
        "span close write stored (span state on the control plane)",
        "",
        get(ours, "span_state"),
        prior=get(prior, "span_state"),
        key="span_closed",
    )
    table.add(
        title,
        f"record() exit after the {calls}-call burst",
        "ms",
        get(ours, "record_exit_ms"),
        prior=get(prior, "record_exit_ms"),
        ratio_to_prior=ratio(get(ours, "record_exit_ms"), get(prior, "record_exit_ms")),
        key="burst_exit",
        note=f"still queued at exit: chronicle {get(ours, 'queued_at_exit')}, "
        f"prior {get(prior, 'queued_at_exit')}",
    )
    for kind in ("tool", "llm"):
        o, p = memory.get(f"{OURS}/{kind}", {}), memory.get(f"{PRIOR}/{kind}", {})

        def per_10k(run: dict[str, Any]) -> float | None:
            queued = get(run, "queued")
            peak = get(run, "peak_delta_kib")
            return peak / 1024 * 10_000 / queued if queued and peak is not None else None

        a, b = per_10k(o), per_10k(p)
        table.add(
            title,
            f"peak memory per 10,000 queued `{kind}` envelopes (RSS)",
            "MiB",
            a,
            prior=b,
            ratio_to_prior=ratio(a, b),
            key=f"memory_{kind}",
            note=f"{get(o, 'calls')} calls recorded with delivery held (queued: chronicle "
            f"{get(o, 'queued')}, prior {get(p, 'queued')}), VmHWM growth scaled to 10,000",
        )


TARGETS = [
    (
        "tool_discard",
        "ratio_to_reference",
        1.3,
        "`tool` boundary <= 1.3x plain span + 2 JSON attrs (discarding sink)",
    ),
    (
        "tool_cp",
        "ratio_to_reference",
        1.3,
        "`tool` boundary <= 1.3x plain span + 2 JSON attrs (real control plane)",
    ),
    (
        "tool_thread",
        "ratio_to_reference",
        1.3,
        "`tool` boundary, agent thread CPU <= 1.3x plain span + 2 JSON attrs (keeping up)",
    ),
    ("tool_discard", "ratio_to_prior", 0.5, "`tool` boundary <= 0.5x the prior (discarding sink)"),
    ("tool_cp", "ratio_to_prior", 0.5, "`tool` boundary <= 0.5x the prior (real control plane)"),
    ("llm_discard", "ratio_to_prior", 0.4, "`llm` boundary <= 0.4x the prior (discarding sink)"),
    ("llm_cp", "ratio_to_prior", 0.4, "`llm` boundary <= 0.4x the prior (real control plane)"),
    (
        "keep_unsampled_off",
        "ratio_to_reference",
        0.1,
        "unsampled request, keeping off: its calls <= 0.1x a sampled request's (timed)",
    ),
    (
        "keep_unsampled_kept",
        "ratio_to_reference",
        0.4,
        "unsampled request, held (keeping on): its calls <= 0.4x a sampled request's (timed)",
    ),
    (
        "keep_instructions_off",
        "ratio_to_reference",
        0.1,
        "unsampled request, keeping off: <= 0.1x a sampled one's instructions (callgrind)",
    ),
    (
        "keep_instructions_kept",
        "ratio_to_reference",
        0.4,
        "unsampled request, held: <= 0.4x a sampled one's instructions (callgrind)",
    ),
    ("stub_tool", "ratio_to_prior", 1.0, "stubbed `tool` call no slower than the prior"),
    ("stub_llm", "ratio_to_prior", 1.0, "stubbed `llm` call no slower than the prior"),
    ("replay_fetch", "ratio_to_prior", 1.0, "replay_trace entry (fetch) no slower than the prior"),
    (
        "stream_wall",
        "ratio_to_reference",
        1.1,
        "a 500-chunk stream through wrap() <= 1.1x the bare SDK (wall time)",
    ),
    (
        "stream_ttfc",
        "ratio_to_reference",
        1.05,
        "time to first chunk through wrap() <= 1.05x the bare SDK",
    ),
    (
        "registration_p50",
        "ratio_to_reference",
        1.2,
        "registration p50 <= 1.2x the control plane's POST p50",
    ),
    (
        "registration_p99",
        "ratio_to_reference",
        1.2,
        "registration p99 <= 1.2x the control plane's POST p99",
    ),
    ("delivery_rate", "ratio_to_reference", -0.9, "delivery >= 90% of the raw ceiling"),
]


def evaluate(table: Table) -> list[dict[str, Any]]:
    found = []
    for key, field, limit, text in TARGETS:
        row = table.get(key)
        value = row.get(field) if row else None
        met = None if value is None else value >= -limit if limit < 0 else value <= limit
        found.append(
            {"target": text, "value": value, "limit": abs(limit), "met": met, "ratio": True}
        )
    lost, closed, exit_row = table.get("lost"), table.get("span_closed"), table.get("burst_exit")
    lost_value = lost.get("chronicle") if lost else None
    found.append(
        {
            "target": "zero envelopes lost on the burst (default settings)",
            "value": lost_value,
            "limit": 0,
            "met": None if lost_value is None else lost_value == 0,
        }
    )
    state = closed.get("chronicle") if closed else None
    found.append(
        {
            "target": "the span's close write is stored (never the one dropped)",
            "value": state,
            "limit": "closed",
            "met": None if state is None else state == "closed",
        }
    )
    exit_ms = exit_row.get("chronicle") if exit_row else None
    note = exit_row.get("note") if exit_row else ""
    queued = None
    if note and "chronicle " in note:
        with contextlib.suppress(ValueError):
            queued = int(note.split("chronicle ")[1].split(",")[0])
    found.append(
        {
            "target": "record() exit does not wait for delivery "
            "(returns in < 100 ms with envelopes still queued)",
            "value": exit_ms,
            "limit": 100,
            "met": None if exit_ms is None else (exit_ms < 100 and bool(queued)),
        }
    )
    return found


# ---- printing ---------------------------------------------------------------------------------


def fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    if unit == "envelopes":
        return f"{value:.0f}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def text_table(table: Table) -> str:
    head = ["figure", "unit", "Chronicle", "reference", "ref value", "x ref", "prior", "x prior"]
    lines: list[list[str]] = []
    section = None
    out: list[str] = []
    for row in table.rows:
        if row["section"] != section:
            section = row["section"]
            lines.append([f"## {section}"])
        lines.append(
            [
                row["figure"],
                row["unit"],
                fmt(row["chronicle"], row["unit"]),
                row["reference"] or "-",
                fmt(row["reference_value"], row["unit"]),
                fmt_ratio(row["ratio_to_reference"]),
                fmt(row["prior"], row["unit"]),
                fmt_ratio(row["ratio_to_prior"]),
            ]
        )
    widths = [
        max(len(h), *(len(line[i]) for line in lines if len(line) > 1)) for i, h in enumerate(head)
    ]
    widths[0] = min(widths[0], 70)

    def render(cells: list[str]) -> str:
        return "  ".join(
            (c[: widths[i]].ljust(widths[i]) if i == 0 else c.rjust(widths[i]))
            for i, c in enumerate(cells)
        )

    out.append(render(head))
    out.append("  ".join("-" * w for w in widths))
    for line in lines:
        out.append(line[0] if len(line) == 1 else render(line))
    notes = [f"  - {row['figure']}: {row['note']}" for row in table.rows if row.get("note")]
    if notes:
        out += ["", "notes:", *notes]
    return "\n".join(out)


def markdown_table(table: Table) -> str:
    out = []
    section = None
    for row in table.rows:
        if row["section"] != section:
            section = row["section"]
            out += [
                "",
                f"### {section}",
                "",
                "| figure | Chronicle | reference | x ref | prior 1.1.1 | x prior | note |",
                "|---|---:|---|---:|---:|---:|---|",
            ]
        unit = f" {row['unit']}" if row["unit"] and not isinstance(row["chronicle"], str) else ""
        ref = (
            "-"
            if not row["reference"]
            else f"{row['reference']}: {fmt(row['reference_value'], row['unit'])}{unit}"
        )
        prior_unit = unit if not isinstance(row["prior"], str) and row["prior"] is not None else ""
        ours_unit = unit if row["chronicle"] is not None else ""
        cells = [
            row["figure"],
            f"{fmt(row['chronicle'], row['unit'])}{ours_unit}",
            ref,
            fmt_ratio(row["ratio_to_reference"]),
            f"{fmt(row['prior'], row['unit'])}{prior_unit}",
            fmt_ratio(row["ratio_to_prior"]),
            row.get("note") or "",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def text_targets(targets: list[dict[str, Any]]) -> str:
    out = []
    for t in targets:
        mark = {True: "MET ", False: "MISS", None: "n/a "}[t["met"]]
        value = t["value"]
        shown = fmt_ratio(value) if t.get("ratio") else fmt(value)
        out.append(f"  [{mark}] {t['target']}: {shown}")
    return "\n".join(out)


# ---- main -------------------------------------------------------------------------------------


def run_peers(runner: Runner, cfg: dict[str, Any], venvs: Path) -> dict[str, Any]:
    """Section 6: ours and each peer, alternating round by round (each in its own venv)."""
    log("section 6: beside the peers (building their venvs)")
    unavailable: dict[str, str] = {}
    names = [OURS]
    for name in peers.PEERS:
        built = peers.build_peer_venv(name, venvs / name, child_env(), log)
        if isinstance(built, str):
            log(f"  {name}: {built}; left out")
            unavailable[name] = built
            continue
        runner.add(name, built, HERE / "peer.py")
        names.append(name)
    rounds = cfg["rounds"]
    scenario = {
        "scenario": "peers",
        "n_tool": max(1, cfg["peers_calls_tool"] // (rounds * cfg["blocks"])),
        "n_llm": max(1, cfg["peers_calls_llm"] // (rounds * cfg["blocks"])),
        "blocks": cfg["blocks"],
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for index in range(rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            runs[name].append(runner.run(name, {**scenario, "peer": name}))
    return {"runs": runs, "unavailable": unavailable}


def run_growth(runner: Runner, cfg: dict[str, Any]) -> dict[str, Any]:
    """Section 7: the growth curves (ours only), replay on a control plane of its own."""
    from chronicle.testing import LocalControlPlane

    raw: dict[str, Any] = {}
    log("section 7: growth (calls per span)")
    raw["calls"] = [
        runner.run(
            OURS,
            {
                "scenario": "growth_calls",
                "sizes": cfg["growth_call_sizes"],
                "calls_per_size": cfg["growth_calls_per_size"],
            },
        )
    ]
    log("section 7: growth (payload size)")
    raw["payload"] = [
        runner.run(
            OURS,
            {
                "scenario": "growth_payload",
                "sizes": cfg["growth_payload_sizes"],
                "bytes_per_block": cfg["growth_payload_bytes_per_block"],
                "blocks": cfg["growth_payload_blocks"],
            },
        )
    ]
    log("section 7: growth (memory per queued envelope)")
    raw["memory"] = {
        str(size): runner.run(OURS, {"scenario": "memory", "kind": "tool", "calls": size})
        for size in cfg["growth_memory_sizes"]
    }
    log("section 7: growth (replay_trace entry; recording the spans first)")
    with LocalControlPlane() as fresh:
        setup = runner.run(
            OURS,
            {
                "scenario": "growth_replay_setup",
                "control_plane_url": fresh.url,
                "sizes": cfg["growth_replay_sizes"],
                "flush_timeout": cfg["flush_timeout"],
            },
            timeout=cfg["flush_timeout"] + 600,
        )
        raw["replay_setup"] = setup
        raw["replay"] = []
        if "error" not in setup:
            for _ in range(cfg["rounds"]):
                raw["replay"].append(
                    runner.run(
                        OURS,
                        {
                            "scenario": "growth_replay",
                            "control_plane_url": fresh.url,
                            "spans": setup["spans"],
                            "reps": cfg["growth_replay_reps"],
                        },
                    )
                )
    return raw


def run_corpus(runner: Runner, cfg: dict[str, Any], llm_url: str) -> dict[str, Any]:
    """Section 8: corpus replay throughput, then diff growth (ours only, a process each)."""
    log("section 8: corpus replay (recording the requests live, then replaying them)")
    corpus = runner.run(
        OURS,
        {
            "scenario": "corpus",
            "llm_url": llm_url,
            "recordings": cfg["corpus_recordings"],
            "reps": cfg["corpus_reps"],
            "xdist": cfg["corpus_xdist"],
            "pytest_recordings": cfg["corpus_pytest_recordings"],
            "memory_sizes": cfg["corpus_memory_sizes"],
        },
        timeout=3600,
    )
    log("section 8: chronicle.diff growth")
    diff = runner.run(
        OURS, {"scenario": "diff", "sizes": cfg["diff_sizes"], "reps": cfg["diff_reps"]}
    )
    return {"corpus": [corpus], "diff": [diff]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run to check the harness")
    parser.add_argument("--rounds", type=int, help="process alternations per section")
    parser.add_argument("--skip-prior", action="store_true", help="do not build or run the prior")
    parser.add_argument(
        "--prior-venv", type=Path, help="reuse this venv for the prior (not deleted)"
    )
    parser.add_argument(
        "--keep-prior-venv", action="store_true", help="do not delete the venv built"
    )
    parser.add_argument("--only", help=f"comma-separated sections to run: {SECTIONS}")
    parser.add_argument("--skip-peers", action="store_true", help="leave the peers section out")
    parser.add_argument(
        "--peer-venvs",
        type=Path,
        help="keep the peers' venvs in this folder and reuse them next time (not deleted)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench-results.json")
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = parser.parse_args()
    cfg = dict(QUICK if args.quick else DEFAULT)
    if args.rounds:
        cfg["rounds"] = args.rounds
    sections = set((args.only or SECTIONS).split(","))
    if args.skip_peers:
        sections.discard("peers")
    unknown = sections - set(SECTIONS.split(","))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {SECTIONS}")
    needs_prior = bool(sections & {"calls", "wrap", "replay", "registration", "delivery"})

    from chronicle.testing import LocalControlPlane

    info = machine()
    log(f"{info['nproc']} CPUs, {info['cpu']}, Python {info['python']}")
    log(f"load average {info['load_average_start']}")
    workdir = Path(tempfile.mkdtemp(prefix="chronicle-bench-"))
    prior_python: Path | None = None
    built_venv: Path | None = None
    raw: dict[str, Any] = {}
    table = Table()
    peer_rows: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, Any]]] = {}
    corpus_table = Table()
    corpus_targets: list[dict[str, Any]] = []
    evaluate_targets: list[dict[str, Any]] = []
    try:
        if not args.skip_prior and needs_prior:
            if args.prior_venv:
                prior_python = args.prior_venv / "bin" / "python"
            else:
                built_venv = workdir / "prior-venv"
                prior_python = build_prior_venv(built_venv)
        runner = Runner({OURS: Path(sys.executable), PRIOR: prior_python}, workdir)
        rounds = cfg["rounds"]
        per_block = rounds * cfg["blocks"]
        with LocalControlPlane() as control_plane, llm_server(child_env()) as llm_url:
            url = control_plane.url

            def in_rounds(
                name: str, title: str, config: dict[str, Any], section: Callable[..., None]
            ) -> None:
                """Section ``name`` (when asked for): its scenario in ``rounds`` alternations
                of the implementations, given ``config``, then its rows."""
                if name in sections:
                    log(title)
                    raw[name] = runner.rounds({"scenario": name, **config}, rounds)
                    section(raw[name], table)

            calls = {
                "control_plane_url": url,
                "n_tool": max(1, cfg["calls_tool"] // per_block),
                "n_llm": max(1, cfg["calls_llm"] // per_block),
                "blocks": cfg["blocks"],
            }
            in_rounds("calls", "section 1: per-call overhead", calls, section_calls)
            wrap = {"llm_url": llm_url, "n": cfg["wrap_calls"]}
            in_rounds("wrap", "section 2: chronicle.wrap", wrap, section_wrap)
            if "stream" in sections:
                log("section 2b: a streamed call through chronicle.wrap")
                stream = {
                    "scenario": "stream",
                    "llm_url": llm_url,
                    "n": cfg["stream_pairs"],
                    "chunks": cfg["stream_chunks"],
                }
                raw["stream"] = [runner.run(OURS, stream) for _ in range(rounds)]
                section_stream(raw["stream"], table)
            if "replay" in sections:
                log("section 3: replay (recording the spans to replay)")
                setup = {
                    "scenario": "replay_setup",
                    "control_plane_url": url,
                    "calls": cfg["replay_calls"],
                }
                spans = {
                    impl: runner.run(impl, setup)
                    for impl in (OURS, PRIOR)
                    if runner.available(impl)
                }
                raw["replay_setup"] = spans
                replay_runs: dict[str, list[dict[str, Any]]] = {OURS: [], PRIOR: []}
                for index in range(rounds):
                    for impl in (OURS, PRIOR) if index % 2 == 0 else (PRIOR, OURS):
                        span = spans.get(impl)
                        if not span or "error" in span:
                            continue
                        replay_runs[impl].append(
                            runner.run(
                                impl,
                                {
                                    "scenario": "replay",
                                    "control_plane_url": url,
                                    "trace_id": span["trace_id"],
                                    "span_id": span["span_id"],
                                    "calls": cfg["replay_calls"],
                                    "reps": cfg["replay_reps"],
                                },
                            )
                        )
                raw["replay"] = replay_runs
                section_replay(replay_runs, {"calls": cfg["replay_calls"]}, table)
            registration = {
                "control_plane_url": url,
                "samples": cfg["registration_samples"],
                "warmup": cfg["registration_warmup"],
            }
            in_rounds(
                "registration", "section 4: trace registration", registration, section_registration
            )
            if "corpus" in sections:
                raw["corpus"] = run_corpus(runner, cfg, llm_url)
                corpus_targets = corpus_bench.figures(raw["corpus"], corpus_table)
            if "evaluate" in sections:
                raw["evaluate"] = evaluate_bench.run(cfg, url, log)
                evaluate_targets = evaluate_bench.figures(raw["evaluate"], table)
            if "report" in sections:
                raw["report"] = report_bench.run(cfg, log)
                evaluate_targets += report_bench.figures(raw["report"], table)
        if "delivery" in sections:
            log("section 5: delivery (memory, then the bursts)")
            memory: dict[str, dict[str, Any]] = {}
            for kind in ("tool", "llm"):
                for impl in (OURS, PRIOR):
                    if runner.available(impl):
                        memory[f"{impl}/{kind}"] = runner.run(
                            impl,
                            {
                                "scenario": "memory",
                                "kind": kind,
                                "calls": cfg[f"memory_calls_{kind}"],
                            },
                        )
            burst: dict[str, dict[str, Any]] = {}
            for impl in (OURS, PRIOR):
                if not runner.available(impl):
                    continue
                with LocalControlPlane() as fresh:
                    burst[impl] = runner.run(
                        impl,
                        {
                            "scenario": "burst",
                            "control_plane_url": fresh.url,
                            "calls": cfg["burst_calls"],
                            # the raw ceiling is measured around our burst only: it does not
                            # depend on the client, and the run is long enough already
                            "ceiling_envelopes": cfg["ceiling_envelopes"] if impl == OURS else 0,
                            "batch": int(fresh.health().get("max_batch") or 100),
                            "flush_timeout": cfg["flush_timeout"],
                            "quiet_s": 10,
                        },
                        timeout=cfg["flush_timeout"] + 600,
                    )
            raw["memory"], raw["burst"] = memory, burst
            section_delivery(burst, memory, table)
        if "peers" in sections:
            raw["peers"] = run_peers(runner, cfg, args.peer_venvs or workdir / "peers")
            peer_rows = peers.figures(raw["peers"])
        if "growth" in sections:
            raw["growth"] = run_growth(runner, cfg)
            curves = growth.figures(raw["growth"])
        if "keep" in sections:
            raw["keep"] = keep_bench.run(runner, cfg, OURS, log)
            keep_bench.figures(raw["keep"], table)
    finally:
        if built_venv is not None and not args.keep_prior_venv:
            shutil.rmtree(workdir, ignore_errors=True)
        elif built_venv is not None:
            log(f"kept the prior's venv: {built_venv}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    targets = evaluate(table) if table.rows else []
    if peer_rows:
        targets += peers.targets(peer_rows)
    targets += corpus_targets + evaluate_targets
    if curves:
        targets += growth.targets(curves)
        chart_path = args.out.with_name("bench-growth.png")
        if growth.chart(curves, chart_path, log):
            log(f"wrote {chart_path}")
    info["load_average_end"] = load_average()
    duration = time.monotonic() - T0
    result = {
        "machine": info,
        "config": cfg,
        "prior": PRIOR_SPEC if prior_python else None,
        "duration_s": round(duration, 1),
        "figures": table.rows + corpus_table.rows,
        "peers": peer_rows,
        "growth": curves,
        "targets": targets,
        "raw": raw,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(
        f"Chronicle benchmarks: {info['nproc']} CPUs, {info['cpu']}, Python {info['python']}; "
        f"load {info['load_average_start']} -> {info['load_average_end']}; {duration:.0f}s"
    )
    print("medians; 'x ref' pairs blocks of one process, 'x prior' the two processes of a round")

    def show(
        as_table: Callable[[Table], str],
        as_peers: Callable[[list[dict[str, Any]]], str],
        as_curves: Callable[[dict[str, list[dict[str, Any]]]], str],
    ) -> None:
        """Print the tables that have rows, each written by the formatter given for it."""
        if table.rows:
            print()
            print(as_table(table))
        if peer_rows:
            print()
            print(as_peers(peer_rows))
        if curves:
            print(as_curves(curves))
        if corpus_table.rows:
            print()
            print(as_table(corpus_table))

    show(text_table, peers.text_table, growth.text_tables)
    print()
    print("Targets:")
    print(text_targets(targets))
    if args.markdown:
        show(markdown_table, peers.markdown_table, growth.markdown_tables)
    print()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
