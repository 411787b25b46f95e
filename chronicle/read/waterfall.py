"""The terminal view of traces: the ``chronicle traces`` table, the ``chronicle show`` waterfall
and one envelope in full.

Everything renders to plain text at a given width (100 columns reads well; the CLI uses the
terminal's). Colour is ANSI and only when asked for: the CLI asks when it writes to a terminal
and ``NO_COLOR`` is not set (``use_color``). Block characters fall back to ASCII on streams
that cannot encode them (``can_draw``).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Sequence
from datetime import datetime
from typing import IO, Any, Protocol

from chronicle.wire import AGENT

__all__ = ["can_draw", "format_ms", "render_envelope", "render_table", "render_tree", "use_color"]


# ---- what is drawn: read-only views of read/traces.py's models, so this module needs none -----


class CallNode(Protocol):
    """One row of the call tree as it is drawn (``traces.CallNode``)."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def service(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def ended_at(self) -> datetime | None: ...
    @property
    def duration_ms(self) -> float | None: ...
    @property
    def envelope(self) -> dict[str, Any] | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def called_by(self) -> str | None: ...
    @property
    def depth(self) -> int: ...


class TraceTree(Protocol):
    """A trace as the waterfall draws it (``traces.TraceTree``)."""

    @property
    def trace_id(self) -> str: ...
    @property
    def trace(self) -> dict[str, Any]: ...
    @property
    def spans(self) -> list[dict[str, Any]]: ...
    @property
    def nodes(self) -> Sequence[CallNode]: ...
    @property
    def status(self) -> str: ...
    @property
    def url(self) -> str | None: ...


class TraceSummary(Protocol):
    """One row of the ``chronicle traces`` table (``traces.TraceSummary``)."""

    @property
    def trace_id(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def duration_ms(self) -> float | None: ...
    @property
    def envelope_count(self) -> int: ...
    @property
    def services(self) -> tuple[str, ...]: ...
    @property
    def agents(self) -> tuple[str, ...]: ...
    @property
    def labels(self) -> dict[str, str]: ...


_GAP = "  "
_STATUS = {"success": "ok", "failure": "FAILED", "open": "open"}


def use_color(stream: IO[str]) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set or ``TERM`` is ``dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def can_draw(stream: IO[str]) -> bool:
    """Whether ``stream`` can encode the block and box characters of the waterfall."""
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "█▒─✗…·".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class _Pen:
    """ANSI styles, or plain text when colour is off; the glyphs, or ASCII stand-ins."""

    def __init__(self, color: bool, ascii_only: bool) -> None:
        self.color = color
        self.bar, self.open_bar, self.rule, self.cross, self.more, self.dot = (
            ("#", ".", "-", "x", "~", "|") if ascii_only else ("█", "▒", "─", "✗", "…", "·")
        )

    def _style(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text

    def bold(self, text: str) -> str:
        return self._style("1", text)

    def dim(self, text: str) -> str:
        return self._style("2", text)

    def red(self, text: str) -> str:
        return self._style("1;31", text)

    def yellow(self, text: str) -> str:
        return self._style("33", text)

    def fit(self, text: str, width: int) -> str:
        """``text`` cut to ``width`` characters, marked when cut."""
        if width <= 0:
            return ""
        return text if len(text) <= width else text[: width - 1] + self.more


def format_ms(ms: float | None) -> str:
    """``164.5 ms``, ``12,345.6 ms``; ``open`` when there is no end yet."""
    return "open" if ms is None else f"{ms:,.1f} ms"


def _local(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value is not None else "?"


def _labels(labels: dict[str, str]) -> str:
    """``k=v`` pairs, the ids a ticket gives first (session, message, user), then the rest."""
    first = [k for k in ("session_id", "message_id", "user_id") if k in labels]
    rest = sorted(k for k in labels if k not in first)
    return " ".join(f"{k}={labels[k]}" for k in first + rest)


def _status(pen: _Pen, status: str, width: int = 0) -> str:
    text = _STATUS.get(status, status).ljust(width)
    if status == "failure":
        return pen.red(text)
    if status == "open":
        return pen.yellow(text)
    return text


# ---- chronicle traces ------------------------------------------------------------------------


def render_table(
    summaries: Sequence[TraceSummary],
    *,
    width: int | None = 100,
    color: bool = False,
    ascii_only: bool = False,
) -> str:
    """One trace per entry, newest first: id, start (local time), duration, envelope count,
    status and name, then a second line with its services, agents and labels. ``width``: cut
    the name and wrap the second line to it; ``None`` (a pipe, a file): nothing cut, one line
    each."""
    pen = _Pen(color, ascii_only)
    width = width if width is not None else sys.maxsize
    head = (
        f"{'TRACE ID':<32}{_GAP}{'STARTED':<19}{_GAP}{'DURATION':>11}{_GAP}{'CALLS':>5}{_GAP}"
        f"{'STATUS':<6}{_GAP}NAME"
    )
    indent = " " * (32 + len(_GAP))
    lines = [pen.bold(pen.fit(head, width))]
    for s in summaries:
        fixed = (
            f"{s.trace_id:<32}{_GAP}{_local(s.started_at):<19}{_GAP}"
            f"{format_ms(s.duration_ms):>11}{_GAP}{s.envelope_count:>5}{_GAP}"
        )
        name = pen.fit(s.name or "", max(width - len(fixed) - 6 - len(_GAP), 0))
        lines.append(f"{fixed}{_status(pen, s.status, 6)}{_GAP}{name}".rstrip())
        about = [_labels(s.labels)] if s.labels else []
        about.append(", ".join(s.services) or "no spans")
        if s.agents:
            about.append("agent " + ", ".join(s.agents))
        text = f" {pen.dot} ".join(about)
        for part in textwrap.wrap(text, max(width - len(indent), 20), break_on_hyphens=False):
            lines.append(pen.dim(indent + part))
    return "\n".join(lines)


# ---- chronicle show --------------------------------------------------------------------------


def _header(tree: TraceTree, pen: _Pen, width: int, nodes: Sequence[CallNode]) -> list[str]:
    trace = tree.trace
    calls = [n for n in nodes if n.envelope is not None]
    failed = sum(1 for n in calls if n.status == "failure")
    starts = [n.started_at for n in nodes if n.started_at is not None]
    ends = [n.ended_at for n in nodes if n.ended_at is not None]
    total = (max(ends) - min(starts)).total_seconds() * 1000 if starts and ends else None
    title = pen.bold(f"trace {tree.trace_id}")
    if trace.get("name"):
        title += f"  {trace['name']}"
    summary = [
        f"started {_local(min(starts) if starts else None)}",
        format_ms(total if tree.status != "open" else None),
        _status(pen, tree.status),
        f"{len(calls)} call{'s' if len(calls) != 1 else ''}"
        + (pen.red(f", {failed} failed") if failed else ""),
    ]
    lines = [title, f" {pen.dot} ".join(summary)]
    labels = trace.get("metadata") or {}
    if labels:
        lines.append(pen.fit(f"labels  {_labels(labels)}", width))
    agents: dict[str, str] = {}
    for span in tree.spans:
        profile = (span.get("metadata") or {}).get(AGENT)
        if isinstance(profile, dict):
            agents[str(profile.get("name"))] = str(profile.get("agent_id"))
    for name, agent_id in agents.items():
        lines.append(pen.fit(f"agent   {name} ({agent_id})", width))
    for node in nodes:
        if node.kind == "span":
            text = f"span    {node.id} {node.label}"
            if node.called_by:
                text += f" (called by {node.called_by})"
            lines.append(text)  # whole: the call it names is needed as printed
    if tree.url:
        lines.append(pen.fit(f"page    {tree.url}", width))
    return lines


def render_tree(
    tree: TraceTree, *, width: int = 100, color: bool = False, ascii_only: bool = False
) -> str:
    """The header (id, name, start, duration, status, calls, labels, agents, spans, page) and
    one row per span and envelope: the name indented under its parent, kind, status, duration
    in ms and a bar on the trace's time axis. A failed envelope is marked and followed by a line
    with its error.

    A name is never cut (``--envelope``, ``run=`` and ``expect_change=`` need all of it, ``#n``
    included): the name column widens to the longest name up to a third of ``width``, and a
    name longer than that is written whole on a line of its own, its columns on the next."""
    pen = _Pen(color, ascii_only)
    nodes = tree.nodes
    lines = _header(tree, pen, width, nodes)
    if not nodes:
        lines.append("")
        lines.append("no spans or envelopes saved for this trace yet")
        return "\n".join(lines)
    starts = [n.started_at for n in nodes if n.started_at is not None]
    ends = [t for t in (n.ended_at or n.started_at for n in nodes) if t is not None]
    origin = min(starts) if starts else None
    total = (max(ends) - origin).total_seconds() if origin is not None and ends else 0.0
    total = max(total, 1e-6)
    names = ["  " * n.depth + n.label for n in nodes]
    name_w = min(max(max(len(n) for n in names), 12), max(int(width * 0.35), 16))
    fixed = name_w + len(_GAP) + 4 + len(_GAP) + 6 + len(_GAP) + 11 + len(_GAP)
    bar_w = max(width - fixed, 10)
    left, right = "0 ms", format_ms(total * 1000)
    axis = left + " " + pen.rule * max(bar_w - len(left) - len(right) - 2, 0) + " " + right
    head = f"{'CALL':<{name_w}}{_GAP}KIND{_GAP}{'STATUS':<6}{_GAP}{'DURATION':>11}{_GAP}"
    lines.append("")
    lines.append(pen.bold(head) + pen.dim(axis))
    for node, name in zip(nodes, names, strict=True):
        failed = node.status == "failure"
        label = name.ljust(name_w)
        if len(name) > name_w:  # whole, on its own line; the columns under it
            lines.append(pen.red(name) if failed else name)
            label = " " * name_w
        bar = _bar(node, origin, total, bar_w, pen)
        row = (
            f"{pen.red(label) if failed else label}{_GAP}{pen.dim(node.kind[:4].ljust(4))}{_GAP}"
            f"{_status(pen, node.status, 6)}{_GAP}{format_ms(node.duration_ms):>11}{_GAP}{bar}"
        )
        lines.append(row.rstrip())
        if failed and node.error:
            detail = "  " * (node.depth + 1) + f"{pen.cross} {node.error}"
            lines.append(pen.red(pen.fit(detail, width)))
    return "\n".join(lines)


def _bar(node: CallNode, origin: datetime | None, total: float, bar_w: int, pen: _Pen) -> str:
    if origin is None or node.started_at is None:
        return ""
    begin = (node.started_at - origin).total_seconds() / total * bar_w
    if node.ended_at is None:
        end, glyph = float(bar_w), pen.open_bar
    else:
        end, glyph = (node.ended_at - origin).total_seconds() / total * bar_w, pen.bar
    first = min(int(begin), bar_w - 1)
    last = max(min(round(end), bar_w), first + 1)
    text = " " * first + glyph * (last - first)
    return pen.red(text) if node.status == "failure" else text


# ---- chronicle show --envelope ----------------------------------------------------------------


def render_envelope(
    envelope: dict[str, Any], node: CallNode | None = None, *, color: bool = False
) -> str:
    """One envelope in full: what it was, when, its error, then its input, output and metadata
    as stored (redacted before it was sent)."""
    pen = _Pen(color, False)
    status = envelope.get("envelope_status") or {}
    title = node.label if node is not None else str(envelope.get("name"))
    state = str(status.get("status") or "open") if status.get("state") == "closed" else "open"
    duration = format_ms(node.duration_ms) if node is not None else ""
    lines = [
        f"{pen.bold(title)}  {envelope.get('kind')}  {_status(pen, state)}  {duration}".rstrip(),
        f"envelope  {envelope.get('envelope_id')}",
        f"span      {envelope.get('span_id')}" + (f" ({node.service})" if node is not None else ""),
    ]
    if envelope.get("parent_envelope_id"):
        lines.append(f"parent    {envelope['parent_envelope_id']}")
    lines.append(f"started   {status.get('started_at')}")
    if status.get("ended_at"):
        lines.append(f"ended     {status.get('ended_at')}")
    if envelope.get("attempt", 1) != 1:
        lines.append(f"attempt   {envelope.get('attempt')}")
    if node is not None and node.error:
        lines.append(pen.red(f"error     {node.error}"))
    for part in ("input", "output", "metadata"):
        lines.append("")
        lines.append(pen.bold(part))
        lines.append(json.dumps(envelope.get(part), indent=2, ensure_ascii=False))
    return "\n".join(lines)
