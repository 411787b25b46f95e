"""Section 7 of ``make bench``: how Chronicle's costs grow (``--only growth``).

Four curves, each from ``ours.py`` scenarios and each printed as a small table, with one target:

- **calls**: the per-call cost of a ``tool`` call in request spans of 100 to 100,000 calls,
  timed until ``flush()`` returned (discarding sink). Flat: the costliest size within 1.2x of
  the cheapest.
- **payload**: a ``tool`` call taking 100 B to 1 MB of JSON (``common.documents_of``), beside
  ``json.dumps`` of the same arguments. Grows no faster than ``json.dumps``: for each step to the
  next size, the boundary's growth factor over ``json.dumps``'s stays within 1.2 (the same noise
  band as "flat").
- **replay**: ``replay_trace`` entry (fetch, validate, index) for spans of 100, 1,000 and 10,000
  envelopes on the real control plane. Linear: the cost per envelope at the largest span within
  1.2x of that at the size before (the smallest pays the round trip's fixed cost).
- **memory**: peak RSS growth per queued ``tool`` envelope with delivery held, at 1,000 to
  100,000 queued envelopes, each size in a fresh process. Flat: the costliest size within 1.2x
  of the cheapest.

``chart`` draws the four curves into one PNG when matplotlib is installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import med, ok, ratio

FLAT = 1.2
"""The noise band of every growth target: "flat" means within this factor."""


def _values(run: dict[str, Any], field: str) -> dict[int, float | None]:
    return {int(size): med(values) for size, values in run.get(field, {}).items()}


def calls_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    runs = ok(raw.get("calls", []))
    if not runs:
        return []
    found: dict[int, list[float]] = {}
    for run in runs:
        for size, values in run["per_call_us"].items():
            found.setdefault(int(size), []).extend(values)
    sizes = sorted(found)
    base = med(found[sizes[0]])
    return [
        {
            "size": size,
            "spans": len(found[size]),
            "us": med(found[size]),
            "x_first": ratio(med(found[size]), base),
        }
        for size in sizes
    ]


def payload_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    runs = ok(raw.get("payload", []))
    if not runs:
        return []
    run = runs[0]
    samples, json_bytes = run["samples_us"], run["json_bytes"]
    rows: list[dict[str, Any]] = []
    for size in sorted(int(s) for s in json_bytes):
        boundary = med(samples[f"boundary/{size}"])
        dumps = med(samples[f"dumps/{size}"])
        row = {
            "size": size,
            "bytes": json_bytes[str(size)],
            "us": boundary,
            "dumps_us": dumps,
            "x_dumps": ratio(boundary, dumps),
            "growth": None,
            "dumps_growth": None,
            "growth_over_dumps": None,
        }
        if rows:
            previous = rows[-1]
            row["growth"] = ratio(boundary, previous["us"])
            row["dumps_growth"] = ratio(dumps, previous["dumps_us"])
            row["growth_over_dumps"] = ratio(row["growth"], row["dumps_growth"])
        rows.append(row)
    return rows


def replay_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    runs = ok(raw.get("replay", []))
    setup = raw.get("replay_setup", {})
    if not runs:
        return []
    found: dict[int, list[float]] = {}
    for run in runs:
        for size, values in run["entry_ms"].items():
            found.setdefault(int(size), []).extend(values)
    stored = {int(s): span.get("stored") for s, span in setup.get("spans", {}).items()}
    rows: list[dict[str, Any]] = []
    for size in sorted(found):
        entry = med(found[size])
        envelopes = stored.get(size) or size
        row = {
            "size": size,
            "stored": stored.get(size),
            "ms": entry,
            "per_envelope_us": None if entry is None else entry * 1e3 / envelopes,
            "x_previous": None,
        }
        if rows:
            row["x_previous"] = ratio(row["per_envelope_us"], rows[-1]["per_envelope_us"])
        rows.append(row)
    return rows


def memory_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size, run in sorted(raw.get("memory", {}).items(), key=lambda item: int(item[0])):
        if "error" in run or not run.get("queued"):
            continue
        per = run["peak_delta_kib"] * 1024 / run["queued"]
        rows.append(
            {
                "size": int(size),
                "queued": run["queued"],
                "dropped": run.get("dropped"),
                "mib": run["peak_delta_kib"] / 1024,
                "bytes_per_envelope": per,
            }
        )
    base = min((r["bytes_per_envelope"] for r in rows), default=None)
    for row in rows:
        row["x_min"] = ratio(row["bytes_per_envelope"], base)
    return rows


def figures(raw: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The four curves as rows (``raw`` is what ``run.py`` collected for the section)."""
    return {
        "calls": calls_rows(raw),
        "payload": payload_rows(raw),
        "replay": replay_rows(raw),
        "memory": memory_rows(raw),
    }


def _spread(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return ratio(max(kept), min(kept)) if len(kept) > 1 else None


def targets(curves: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One target per curve (see the module docstring), MET/MISS with its ratio."""
    calls, payload = curves.get("calls", []), curves.get("payload", [])
    replay, memory = curves.get("replay", []), curves.get("memory", [])
    steps = [r["growth_over_dumps"] for r in payload if r["growth_over_dumps"] is not None]
    found = [
        (
            f"per-call cost flat from {calls[0]['size']:,} to {calls[-1]['size']:,} calls in a "
            f"span (costliest ÷ cheapest <= {FLAT})"
            if calls
            else "per-call cost flat in long spans",
            _spread([r["us"] for r in calls]),
        ),
        (
            "payload: grows no faster than json.dumps (worst step: boundary growth ÷ json.dumps "
            f"growth <= {FLAT})",
            max(steps) if steps else None,
        ),
        (
            "replay_trace entry linear in envelopes (per envelope, largest span ÷ the size "
            f"before <= {FLAT})",
            replay[-1]["x_previous"] if len(replay) > 1 else None,
        ),
        (
            f"memory per queued envelope flat (costliest ÷ cheapest <= {FLAT})",
            _spread([r["bytes_per_envelope"] for r in memory]),
        ),
    ]
    return [
        {
            "target": text,
            "value": value,
            "limit": FLAT,
            "met": None if value is None else value <= FLAT,
            "ratio": True,
        }
        for text, value in found
    ]


# ---- printing ---------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _count(value: int) -> str:
    return f"{value:,}"


Column = tuple[str, str, Callable[[Any], str]]
"""A table column: its header, the row's field it shows and how the value is written."""

_TABLES: dict[str, tuple[str, list[Column]]] = {
    "calls": (
        "7a. Per-call cost by calls in one request span (`tool`, until flushed)",
        [
            ("calls in the span", "size", _count),
            ("spans timed", "spans", str),
            ("µs/call", "us", _num),
            ("x the 100-call span", "x_first", _times),
        ],
    ),
    "payload": (
        "7b. Payload size: a `tool` call taking N bytes of JSON, beside json.dumps",
        [
            ("payload (JSON bytes)", "bytes", _count),
            ("boundary µs/call", "us", _num),
            ("json.dumps µs", "dumps_us", _num),
            ("x json.dumps", "x_dumps", _times),
            ("boundary growth", "growth", _times),
            ("json.dumps growth", "dumps_growth", _times),
            ("growth ÷ json.dumps growth", "growth_over_dumps", _times),
        ],
    ),
    "replay": (
        "7c. replay_trace entry by envelopes in the span (real control plane)",
        [
            ("envelopes", "size", _count),
            ("entry ms", "ms", _num),
            ("µs per envelope", "per_envelope_us", _num),
            ("x per envelope, size before", "x_previous", _times),
        ],
    ),
    "memory": (
        "7d. Memory per queued `tool` envelope (delivery held, peak RSS growth)",
        [
            ("queued envelopes", "queued", _count),
            ("peak RSS growth MiB", "mib", _num),
            ("bytes per envelope", "bytes_per_envelope", _num),
            ("x cheapest", "x_min", _times),
        ],
    ),
}
"""Each curve's table: its title and its columns."""


def tables(curves: dict[str, list[dict[str, Any]]]) -> list[tuple[str, list[str], list[list[str]]]]:
    """``(title, header, rows of cells)`` for each curve that was measured."""
    return [
        (
            title,
            [header for header, _, _ in columns],
            [[write(row[field]) for _, field, write in columns] for row in curves[name]],
        )
        for name, (title, columns) in _TABLES.items()
        if curves.get(name)
    ]


def text_tables(curves: dict[str, list[dict[str, Any]]]) -> str:
    """The curves as plain-text tables."""
    lines: list[str] = []
    for title, head, rows in tables(curves):
        widths = [max(len(h), *(len(c[i]) for c in rows)) for i, h in enumerate(head)]
        lines += ["", f"## {title}", "  ".join(h.rjust(widths[i]) for i, h in enumerate(head))]
        lines += ["  ".join(c[i].rjust(widths[i]) for i in range(len(head))) for c in rows]
    return "\n".join(lines)


def markdown_tables(curves: dict[str, list[dict[str, Any]]]) -> str:
    """The curves as Markdown tables."""
    lines: list[str] = []
    for title, head, rows in tables(curves):
        lines += ["", f"### {title}", "", "| " + " | ".join(head) + " |"]
        lines.append("|" + "---:|" * len(head))
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


Line = tuple[list[float], list[float], str, "str | None"]
"""A curve on a chart: its x values, its y values, its matplotlib style and its legend label."""


def _panel(ax: Any, lines: list[Line], title: str, xlabel: str, ylabel: str, log_y: bool) -> None:
    """Draw ``lines`` on ``ax`` on a log x scale; the y scale logarithmic with ``log_y``, else
    linear from 0; a legend when a line is labelled."""
    for xs, ys, style, label in lines:
        ax.plot(xs, ys, style, label=label)
    scale = {"yscale": "log"} if log_y else {"ylim": (0, None)}
    ax.set(xscale="log", title=title, xlabel=xlabel, ylabel=ylabel, **scale)
    if any(label for *_, label in lines):
        ax.legend()


def chart(curves: dict[str, list[dict[str, Any]]], path: Path, log: Callable[[str], None]) -> bool:
    """Draw the four curves into ``path`` (PNG); ``False`` when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no growth chart (pip install -e '.[dev]')")
        return False
    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    (calls_ax, payload_ax), (replay_ax, memory_ax) = axes

    def of(curve: str, field: str) -> list[float]:
        return [row[field] for row in curves.get(curve, [])]

    sizes, entry = of("replay", "size"), of("replay", "ms")
    linear = [entry[-1] * size / sizes[-1] for size in sizes] if sizes else []
    panels: list[tuple[Any, list[Line], tuple[str, str, str], bool]] = [
        (
            calls_ax,
            [(of("calls", "size"), of("calls", "us"), "o-", None)],
            (
                "per-call cost by calls in one span",
                "calls in the request span",
                "µs per call (until flushed)",
            ),
            False,
        ),
        (
            payload_ax,
            [
                (of("payload", "bytes"), of("payload", "us"), "o-", "tool boundary"),
                (of("payload", "bytes"), of("payload", "dumps_us"), "s--", "json.dumps"),
            ],
            ("cost by payload size", "payload (JSON bytes)", "µs per call"),
            True,
        ),
        (
            replay_ax,
            [(sizes, entry, "o-", "replay_trace entry"), (sizes, linear, ":", "linear")],
            ("replay_trace entry by span size", "envelopes in the span", "ms"),
            True,
        ),
        (
            memory_ax,
            [(of("memory", "queued"), of("memory", "bytes_per_envelope"), "o-", None)],
            (
                "memory per queued envelope",
                "queued tool envelopes",
                "bytes of peak RSS per envelope",
            ),
            False,
        ),
    ]
    for ax, lines, (title, xlabel, ylabel), log_y in panels:
        with contextlib.suppress(Exception):
            _panel(ax, lines, title, xlabel, ylabel, log_y)
    figure.suptitle("Chronicle growth curves (make bench --only growth)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True
