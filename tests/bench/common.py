"""What both scenario scripts share: the payloads, the timing loop, and the raw-HTTP references.

Standard library only (plus ``httpx``, imported where it is used), because ``prior.py`` imports
this module from the prior implementation's own virtual environment, which has neither
OpenTelemetry nor the new Chronicle. Nothing here imports ``chronicle``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# ---- payloads -------------------------------------------------------------------------------

TOOL_NAME = "search"
TOOL_ARGS: tuple[Any, ...] = ("weather in Paris",)
TOOL_KWARGS: dict[str, Any] = {"limit": 5}
TOOL_RESULT: dict[str, Any] = {
    "results": [
        {"title": "Paris forecast", "temp_c": 18},
        {"title": "Paris, France", "temp_c": 17},
    ],
    "count": 2,
}
"""A small tool call: two arguments in, a short dict out (about 120 bytes of JSON)."""

LLM_NAME = "chat"
LLM_MODEL = "gpt-4o-mini"


def _message(index: int) -> dict[str, str]:
    role = "system" if index == 0 else ("user" if index % 2 else "assistant")
    stem = f"message {index}: "
    body = ("The quick brown fox jumps over the lazy dog. " * 12)[: 500 - len(stem)]
    return {"role": role, "content": stem + body}


LLM_MESSAGES: list[dict[str, str]] = [_message(i) for i in range(10)]
"""Ten messages of exactly 500 characters each (5,000 characters of prompt)."""

LLM_KWARGS: dict[str, Any] = {"model": LLM_MODEL, "messages": LLM_MESSAGES, "temperature": 0.2}

WRAP_REQUEST: dict[str, Any] = {"model": LLM_MODEL, "messages": LLM_MESSAGES}
"""Section 2's ``chat.completions.create`` arguments (the model call's, less its temperature)."""

LLM_RESULT: dict[str, Any] = {
    "id": "chatcmpl-bench0000000000000000",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "It is 18 degrees and sunny in Paris today, with a light breeze.",
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 1210,
        "completion_tokens": 16,
        "total_tokens": 1226,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_bench",
}
"""An OpenAI ``ChatCompletion`` in its JSON shape."""

WARMUP_CALLS = 200

INGEST_NAME = "ingest"


def documents_of(size: int) -> list[dict[str, Any]]:
    """About ``size`` bytes of JSON as a list of small search-result dicts (the growth payload).

    Each item is about 100 bytes of JSON; many small items rather than one long string, so the
    payload exercises the walk over containers and no string is ever cut by ``max_payload_bytes``.
    """
    item_count = max(1, round(size / 100))
    return [
        {
            "id": index,
            "title": f"result {index}",
            "snippet": ("Paris weather, 18 degrees and sunny. " * 2)[: 44 - len(str(index))],
            "score": 0.5,
        }
        for index in range(item_count)
    ]


def ingest_body(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The undecorated tool of the payload-growth curve: takes the payload, answers a count."""
    return {"stored": len(documents)}


def stream_request(chunks: int) -> dict[str, Any]:
    """Section 2b's ``chat.completions.create`` arguments: a ``chunks``-chunk stream from LlmServer.

    The echo reply (a ~2,000-character prose message) is split into ``chunks - 2`` deltas of 4
    characters (the role chunk and the finish chunk make up the rest).
    """
    deltas = chunks - 2
    prose = ("The quick brown fox jumps over the lazy dog. " * (deltas // 10 + 1))[
        : deltas * 4 - len("echo: ")
    ]
    return {
        "model": LLM_MODEL,
        "messages": [{"role": "user", "content": prose}],
        "stream": True,
        "extra_headers": {"x-llmserver-deltas": str(deltas)},  # LlmServer's DELTAS_HEADER
    }


def time_streams(clients: dict[str, Any], request: dict[str, Any], n: int) -> dict[str, Any]:
    """Consume ``n`` streams (after 3 warm-ups) of ``chat.completions.create(**request)`` with
    each OpenAI client of ``clients`` (by name), in a rotating order, timed from the call to
    the first chunk and to the end (wall and the thread's CPU), in ms per stream and client."""
    names = list(clients)
    perf, cpu = time.perf_counter, time.thread_time
    wall: dict[str, list[float]] = {name: [] for name in names}
    first: dict[str, list[float]] = {name: [] for name in names}
    busy: dict[str, list[float]] = {name: [] for name in names}
    counts: set[int] = set()
    warmup = 3
    for i in range(n + warmup):
        for name in rotation(names, i):
            create = clients[name].chat.completions.create
            start, start_cpu = perf(), cpu()
            first_at = None
            count = 0
            for _ in create(**request):
                if first_at is None:
                    first_at = perf()
                count += 1
            ended, ended_cpu = perf(), cpu()
            counts.add(count)
            if i >= warmup and first_at is not None:
                wall[name].append((ended - start) * 1e3)
                first[name].append((first_at - start) * 1e3)
                busy[name].append((ended_cpu - start_cpu) * 1e3)
    return {
        "wall_ms": wall,
        "first_chunk_ms": first,
        "thread_cpu_ms": busy,
        "chunks": sorted(counts),
    }


def tool_body(query: str, limit: int = 5) -> dict[str, Any]:
    """The undecorated tool function (each scenario decorates its own copy)."""
    return TOOL_RESULT


def llm_body(model: str, messages: list[dict[str, str]], temperature: float = 1.0) -> Any:
    """The undecorated model-call function."""
    return LLM_RESULT


Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
"""A timed call: the function, its positional and its keyword arguments."""


def workload(tool: Callable[..., Any], llm: Callable[..., Any]) -> dict[str, Call]:
    """The two benchmark calls by kind: ``tool`` given ``TOOL_ARGS``/``TOOL_KWARGS`` and ``llm``
    given ``LLM_KWARGS``, each through the decorated copy of its body passed in."""
    return {"tool": (tool, TOOL_ARGS, TOOL_KWARGS), "llm": (llm, (), LLM_KWARGS)}


# ---- timing -----------------------------------------------------------------------------------


def per_call_us(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    n: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Microseconds per call of ``fn(*args, **kwargs)`` over ``n`` calls on this thread, by
    ``clock`` (wall time; ``time.thread_time`` for this thread's CPU time alone)."""
    start = clock()
    for _ in range(n):
        fn(*args, **kwargs)
    return (clock() - start) / n * 1e6


def rotation(names: Sequence[T], block: int) -> list[T]:
    """``names`` rotated by ``block``: each variant runs first, middle and last in turn."""
    k = block % len(names)
    return list(names[k:]) + list(names[:k])


def settle() -> None:
    """Collect garbage before a timed block so one block does not pay for the last one."""
    gc.collect()


def sample_blocks(
    names: Sequence[str], run: Callable[[str, int | None], float], blocks: int
) -> dict[str, list[float]]:
    """Each variant's samples over ``blocks`` rounds, by name.

    ``run(name, WARMUP_CALLS)`` warms each variant up first (imports, caches, first-call paths);
    then each round runs ``run(name, None)`` (the variant's own call count) for every name, in an
    order rotated by the round, after collecting garbage, and keeps what it returns.
    """
    for name in names:
        run(name, WARMUP_CALLS)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for block in range(blocks):
        for name in rotation(names, block):
            settle()
            samples[name].append(run(name, None))
    return samples


def openai_client(llm_url: str) -> Any:
    """An ``openai.OpenAI`` client of ``LlmServer`` at ``llm_url`` that never retries."""
    import openai

    return openai.OpenAI(base_url=llm_url, api_key="bench", max_retries=0)


def alternate_calls(clients: dict[str, Any], request: dict[str, Any], n: int) -> dict[str, Any]:
    """Time single ``chat.completions.create(**request)`` calls alternating between the OpenAI
    ``clients`` (ABBA...), so each pair shares a moment: ``{"samples_us": {name: [...]}}``.

    HTTP calls to a local server on a shared machine vary by tens of percent from one second to
    the next; pairing call by call is what makes a 1 ms difference on a 15 ms call visible. The
    first ten rounds warm up connections and caches and are not kept.
    """
    names = list(clients)
    creates = {name: clients[name].chat.completions.create for name in names}
    perf = time.perf_counter
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n + 10):
        for name in rotation(names, i):
            start = perf()
            creates[name](**request)
            elapsed = (perf() - start) * 1e6
            if i >= 10:
                samples[name].append(elapsed)
    return {"samples_us": samples}


def replay_recording(
    use_control_plane: Callable[[str], None],
    record: Callable[[str], contextlib.AbstractContextManager[Any]],
    calls: dict[str, Call],
    cfg: dict[str, Any],
    delivered: Callable[[Any, Any, int], dict[str, Any]],
) -> dict[str, Any]:
    """Section 3's recording, after ``use_control_plane(cfg["control_plane_url"])``:
    ``cfg["calls"] // 2`` rounds of one call of each kind of ``calls`` in one
    ``record("bench-replay")`` span. ``delivered(http, session, recorded)`` (an httpx
    client of ``cfg["control_plane_url"]``) waits for the delivery and returns what was stored
    (``stored``, ``span_state``, ...); the result adds the span's ids and ``recorded``."""
    import httpx

    use_control_plane(cfg["control_plane_url"])
    rounds = cfg["calls"] // 2
    with record("bench-replay") as session:
        for _ in range(rounds):
            for fn, args, kwargs in calls.values():
                fn(*args, **kwargs)
    with httpx.Client(base_url=cfg["control_plane_url"], timeout=60) as http:
        found = delivered(http, session, rounds * len(calls))
    return {
        "trace_id": session.trace_id,
        "span_id": session.span_id,
        "recorded": rounds * len(calls),
        **found,
    }


def replay_timings(
    use_control_plane: Callable[[str], None],
    replay_trace: Callable[[str, str], Any],
    calls: dict[str, Call],
    cfg: dict[str, Any],
) -> dict[str, Any]:
    """Section 3, after ``use_control_plane(cfg["control_plane_url"])``: ``cfg["reps"]`` rounds
    (after one that warms up) of entering
    ``replay_trace(cfg["trace_id"], cfg["span_id"])`` (``fetch_ms``, the fetch and index) and
    making ``cfg["calls"] // 2`` stubbed calls of each kind of ``calls`` in a rotating order
    (``stub_us``, per call)."""
    use_control_plane(cfg["control_plane_url"])
    half = cfg["calls"] // 2
    fetch_ms: list[float] = []
    stub_us: dict[str, list[float]] = {kind: [] for kind in calls}
    for rep in range(cfg["reps"] + 1):  # the first one warms up and is not kept
        settle()
        start = time.perf_counter()
        scope = replay_trace(cfg["trace_id"], cfg["span_id"])
        scope.__enter__()
        fetched = (time.perf_counter() - start) * 1e3
        try:
            for kind in rotation(list(calls), rep):
                fn, args, kwargs = calls[kind]
                value = per_call_us(fn, args, kwargs, half)
                if rep:
                    stub_us[kind].append(value)
        finally:
            scope.__exit__(None, None, None)
        if rep:
            fetch_ms.append(fetched)
    return {"fetch_ms": fetch_ms, "stub_us": stub_us}


def registration_timings(
    use_control_plane: Callable[[str], None],
    record: Callable[[], contextlib.AbstractContextManager[Any]],
    cfg: dict[str, Any],
    after: Callable[[], Any] = lambda: None,
) -> dict[str, Any]:
    """Section 4, after ``use_control_plane(cfg["control_plane_url"])``: an empty
    ``with record():`` timed at its entry and its exit (ms), alternating
    with one raw ``POST /v1/traces`` to ``cfg["control_plane_url"]`` (``raw_post_ms``), for
    ``cfg["samples"]`` rounds after ``cfg["warmup"]``; ``after()`` runs after each exit, untimed."""
    import httpx

    entry: list[float] = []
    exit_: list[float] = []
    raw: list[float] = []
    perf = time.perf_counter
    use_control_plane(cfg["control_plane_url"])
    with httpx.Client(base_url=cfg["control_plane_url"], timeout=30) as http:
        for i in range(cfg["samples"] + cfg["warmup"]):
            keep = i >= cfg["warmup"]
            for step in rotation(["raw", "record"], i):
                if step == "raw":
                    value = raw_trace_post_ms(http)
                    if keep:
                        raw.append(value)
                    continue
                start = perf()
                with record():
                    entered = perf()
                done = perf()
                after()
                if keep:
                    entry.append((entered - start) * 1e3)
                    exit_.append((done - entered) * 1e3)
    return {"entry_ms": entry, "exit_ms": exit_, "raw_post_ms": raw}


def median(values: Iterable[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def percentile(values: Iterable[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` (0..100) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ok(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scenario results that did not fail."""
    return [r for r in results if "error" not in r]


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or ``None`` when either is missing, NaN, or ``b`` is zero."""
    if a is None or b is None or b == 0 or a != a or b != b:
        return None
    return a / b


def med(values: Sequence[float | None]) -> float | None:
    """The median of the values present (``None`` and NaN left out), or ``None``."""
    kept = [v for v in values if v is not None and v == v]
    return median(kept) if kept else None


# ---- memory -----------------------------------------------------------------------------------


def rss_kib() -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` of this process in KiB, from ``/proc/self/status`` (Linux)."""
    found = {"VmRSS": 0, "VmHWM": 0}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in found:
                    found[key] = int(value.split()[0])
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak, peak
    return found["VmRSS"], found["VmHWM"]


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux ``clear_refs``), so the next peak is this run's."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


# ---- raw HTTP references ------------------------------------------------------------------------


def new_hex(chars: int) -> str:
    return secrets.token_hex(chars // 2)


def raw_trace_post_ms(client: Any) -> float:
    """One ``POST /v1/traces`` of an empty trace with a fresh id, in milliseconds (plain httpx)."""
    body = json.dumps({"trace_id": new_hex(32), "state": "open", "metadata": {}}).encode()
    start = time.perf_counter()
    response = client.post("/v1/traces", content=body, headers={"content-type": "application/json"})
    elapsed = (time.perf_counter() - start) * 1e3
    if response.status_code >= 300:
        raise RuntimeError(
            f"POST /v1/traces answered {response.status_code}: {response.text[:200]}"
        )
    return elapsed


def raw_envelope_ceiling(url: str, bodies: Sequence[dict[str, Any]], batch: int) -> dict[str, Any]:
    """Post ``bodies`` (envelope JSON) to ``/v1/envelopes:batch`` in batches of ``batch``.

    Every envelope gets fresh trace, span and envelope ids (a closed envelope is immutable, so
    the originals would be deduplicated) and the bodies are serialized before the clock starts:
    what is timed is the control plane taking them over one keep-alive httpx connection, the
    ceiling any client can reach. Returns the rate and the wall time.
    """
    import httpx

    trace_id, span_id = new_hex(32), new_hex(16)
    envelopes = []
    for body in bodies:
        fresh = dict(body)
        fresh.update(trace_id=trace_id, span_id=span_id, envelope_id=new_hex(16))
        fresh["parent_envelope_id"] = None
        envelopes.append(fresh)
    payloads = [
        json.dumps({"envelopes": envelopes[i : i + batch]}, separators=(",", ":")).encode()
        for i in range(0, len(envelopes), batch)
    ]
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=120.0) as client:
        client.post("/v1/traces", json={"trace_id": trace_id, "state": "open"})
        start = time.perf_counter()
        for payload in payloads:
            response = client.post("/v1/envelopes:batch", content=payload, headers=headers)
            if response.status_code >= 300:
                raise RuntimeError(
                    f"raw batch answered {response.status_code}: {response.text[:300]}"
                )
        elapsed = time.perf_counter() - start
    return {"envelopes": len(envelopes), "seconds": elapsed, "per_s": len(envelopes) / elapsed}


@contextlib.contextmanager
def memory_growth(
    record: Callable[[str], contextlib.AbstractContextManager[Any]], call: Call, calls: int
) -> Iterator[dict[str, Any]]:
    """Section 5's memory figures: ``calls`` calls of ``call`` in one ``record("bench-memory")``
    span (delivery held by the caller), then 0.2 s for the worker to take its first batch.

    Yields, while the span is still open (the caller reads its queue), ``calls`` and the growth
    of this process's RSS and of its peak RSS (KiB) from before the first call.
    """
    fn, args, kwargs = call
    settle()
    reset_peak_rss()
    before, _ = rss_kib()
    with record("bench-memory"):
        per_call_us(fn, args, kwargs, calls)
        time.sleep(0.2)  # let the worker take (and block on) its first batch
        settle()
        after, peak = rss_kib()
        yield {"calls": calls, "rss_delta_kib": after - before, "peak_delta_kib": peak - before}


def burst_result(
    found: tuple[int, int, str | None, bool],
    queue: tuple[int, int, int],
    perf_at: tuple[float, float, float],
    deliver_s: float,
    ceilings: list[dict[str, Any]],
) -> dict[str, Any]:
    """Section 5's burst result (the keys ``run.py`` reads) from what the scenario measured:
    ``found``, the calls recorded, the envelopes stored, the span's stored state and whether the
    flush said all was delivered; ``queue``, the envelopes dropped in all, dropped by the
    ``record()`` exit and still queued then; ``perf_at``, ``time.perf_counter()`` at the burst's
    start, its last call and after the ``record()`` exit; ``deliver_s``, the seconds from the
    start until the last envelope was stored; ``ceilings``, the ``raw_envelope_ceiling``
    results measured around it."""
    recorded, stored, span_state, flush_ok = found
    dropped, dropped_at_exit, queued_at_exit = queue
    start, burst_end, exited = perf_at
    return {
        "recorded": recorded,
        "stored": stored,
        "lost": recorded - stored,
        "dropped": dropped,
        "dropped_at_exit": dropped_at_exit,
        "span_state": span_state,
        "flush_ok": flush_ok,
        "burst_s": burst_end - start,
        "record_exit_ms": (exited - burst_end) * 1e3,
        "queued_at_exit": queued_at_exit,
        "deliver_s": deliver_s,
        "delivered_per_s": stored / deliver_s if deliver_s > 0 else 0.0,
        "ceiling_per_s": [c["per_s"] for c in ceilings],
    }


def stored(client: Any, trace_id: str, span_id: str) -> tuple[int, str | None]:
    """``(envelopes the control plane holds for the trace, the span's stored state or None)``.

    Reads ``GET /v1/traces/{t}``, which counts envelopes in SQL, so polling it stays cheap even
    for a 20,000-envelope trace (the envelope list itself would be a 10 MB response).
    """
    response = client.get(f"/v1/traces/{trace_id}")
    if response.status_code == 404:
        return 0, None
    response.raise_for_status()
    found = response.json()
    state = None
    for span in found.get("spans") or []:
        if isinstance(span, dict) and span.get("span_id") == span_id:
            state = span.get("state")
    return int(found.get("envelope_count") or 0), (str(state) if state is not None else None)


def wait_for_count(
    client: Any, trace_id: str, span_id: str, expected: int, *, quiet_s: float, limit_s: float
) -> tuple[int, float]:
    """Poll until the trace holds ``expected`` envelopes, or the count stops growing.

    Returns ``(count, monotonic time the count last changed)``. "Stops growing" means no change
    for ``quiet_s`` seconds, so a loss shows up as a count below ``expected``.
    """
    count = -1
    changed = time.monotonic()
    deadline = changed + limit_s
    while True:
        now_count, _ = stored(client, trace_id, span_id)
        now = time.monotonic()
        if now_count != count:
            count, changed = now_count, now
        if count >= expected or now - changed >= quiet_s or now >= deadline:
            return count, changed
        time.sleep(0.2)


# ---- output -----------------------------------------------------------------------------------


def run_script(script: Path, config: dict[str, Any], cwd: Path) -> dict[str, Any]:
    r"""Run a section's ``script`` with ``config`` in a fresh process (this checkout's chronicle
    first on its path) and return the result it ``emit``\ ted, or ``{"error": ...}`` with the
    tail of what it printed when it printed none."""
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd)},  # this checkout's chronicle, whole
    )
    for line in done.stdout.splitlines():
        if line.startswith("BENCH-RESULT "):
            found: dict[str, Any] = json.loads(line.removeprefix("BENCH-RESULT "))
            return found
    return {"error": (done.stderr or done.stdout)[-2000:]}


def run_scenario(
    scenarios: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]], name: str
) -> None:
    """A scenario script's ``main``: run ``scenarios[config["scenario"]](config)``, the config
    being the JSON of the first argument, and ``emit`` its result named ``implementation``."""
    cfg = json.loads(sys.argv[1])
    result = scenarios[cfg["scenario"]](cfg)
    result["implementation"] = name
    emit(result)


def section_failed(raw: dict[str, Any], table: Any, title: str, label: str, key: str) -> bool:
    """Whether a section's process failed (``raw`` holds its ``error``); if so, a ``failed``
    row ``label`` (``key``) under ``title`` says why (the tail of what it printed)."""
    if "error" not in raw:
        return False
    table.add(title, label, "", "failed", key=key, note=raw["error"][-300:])
    return True


def emit(result: dict[str, Any]) -> None:
    """Print the scenario's result as the one JSON line the orchestrator reads, then exit hard.

    ``os._exit`` so no implementation's exit-time flush runs: whatever is still queued is
    deliberately dropped (a scenario that needs it delivered waits for it before returning).
    """
    sys.stdout.write("BENCH-RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@contextlib.contextmanager
def llm_server(env: dict[str, str] | None = None) -> Iterator[str]:
    """``LlmServer`` (tests/support) in a process of its own (``llm_proc.py``, run with ``env``,
    else this one's); its OpenAI base URL while the block runs."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "llm_proc.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("LLM-URL "):
            raise RuntimeError(f"LlmServer did not start: {line!r}")
        yield line.split(" ", 1)[1].strip()
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
