"""A trace and a diff as web pages: ``chronicle show TRACE --html PATH`` and ``chronicle diff A B
--html PATH``.

Each page is one self-contained HTML file: its styles and its small script are inline, and its
Content-Security-Policy lets it load nothing else, so it reads the same from a CI artifact, an
email or a folder with no network, and no request leaves the machine that opens it. Everything
is readable without JavaScript: a call's input and output open in a ``<details>`` element, the
tree folds with checkboxes; the script only adds "expand all" and "collapse all", opens the call a
link's ``#anchor`` names, and scrolls a diff to its first divergence.

``trace_page(tree)`` draws a ``TraceTree`` (the model ``chronicle show`` draws as text): the calls
nested as they were made, each an element with ``data-call="name#n"`` holding the elements of the
calls it made (a downstream service's span inside the call that reached it, ``data-span``), on
one time axis; a lane per service when several took part; labels, agents, token totals, and a
link from a recorded replay (a what-if) to the trace it replayed. ``diff_page(result)`` draws a
``TraceDiff``: both call trees side by side, aligned line by line, each changed call with its
changed paths and the JSON diff of each changed value, the first divergence marked, open and
scrolled to. ``report_page(report)`` draws a corpus replay's ``chronicle.whatif.report.Report``:
the counts and the usage recorded beside replayed, a row per recording, and each recording's
call tree and diff on the same page.

The pages are rendered from the Jinja2 templates in ``templates/`` (autoescaped: every recorded
value is text, never markup). Jinja2 is imported only here, when a page is rendered, never on the
recording path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from difflib import SequenceMatcher
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chronicle.config import trace_page as trace_page_url
from chronicle.errors import plural
from chronicle.wire import AGENT, REPLAY_OF, REPLAYED_FROM, SERVICE_VERSION

if TYPE_CHECKING:
    from chronicle.read.traces import CallNode, TraceSummary, TraceTree
    from chronicle.whatif.diff import CallDiff, TraceCall, TraceDiff
    from chronicle.whatif.report import Report

__all__ = [
    "control_plane_link",
    "diff_page",
    "index_page",
    "report_page",
    "trace_page",
    "write_page",
]

Link = Callable[[str], str | None]
"""How a page links another trace: its id to an address (``None``: no link)."""

_JSON_LIMIT = 200_000
"""Characters of one value shown on a page; the rest is cut, with how to read it whole."""
_DIFF_LINES = 400
"""Lines of one JSON diff shown on a page."""
_SERVICES = 8
"""Service colours; a ninth service reuses the first colour."""
_STATUS = {"success": "ok", "failure": "failed", "open": "open"}


# ---- rendering ---------------------------------------------------------------------------------


def _render(template: str, script: str, **values: Any) -> str:
    """``template`` rendered with ``values``, its ``script`` inline and allowed by hash alone."""
    # Kept off the recording path: Jinja2 is loaded only when a page is written.
    import jinja2
    import markupsafe  # Jinja2's own dependency, loaded with it

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("chronicle.read", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    folder = resources.files("chronicle.read").joinpath("templates")
    code = folder.joinpath(script).read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii")
    style = folder.joinpath("page.css").read_text(encoding="utf-8")
    return environment.get_template(template).render(
        script=markupsafe.Markup(code),
        style=markupsafe.Markup(style),
        script_hash=f"sha256-{digest}",
        written=_when(datetime.now(UTC)),
        **values,
    )


def write_page(html: str, path: str | os.PathLike[str]) -> Path:
    """Write ``html`` to ``path`` whole or not at all (a temporary file beside it, then renamed);
    returns the path. Raises ``OSError`` when the folder does not exist or is not writable."""
    target = Path(path)
    handle, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent if target.parent else None
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(html)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


# ---- values as text ----------------------------------------------------------------------------


def _when(value: datetime | None) -> str:
    """``2026-12-04 23:00:34.422 UTC`` (a page is read anywhere: UTC, to the millisecond)."""
    if value is None:
        return "?"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _ms(value: float | None) -> str:
    return "open" if value is None else f"{value:,.1f} ms"


def _json(value: object) -> str:
    """``value`` as indented JSON, keys sorted, cut to ``_JSON_LIMIT`` characters."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > _JSON_LIMIT:
        more = len(text) - _JSON_LIMIT
        text = text[:_JSON_LIMIT] + f"\n… {more:,} more characters (--json prints it whole)"
    return text


def _tokens(usage: object) -> str | None:
    """``10 in · 5 out`` (and cache and reasoning tokens when any) from a recorded usage."""
    if not isinstance(usage, Mapping):
        return None
    parts = [f"{usage.get('input', 0)} in", f"{usage.get('output', 0)} out"]
    for key, word in (("cached_read", "cached"), ("cache_write", "cache write")):
        if usage.get(key):
            parts.append(f"{usage[key]} {word}")
    if usage.get("reasoning"):
        parts.append(f"{usage['reasoning']} reasoning")
    return " · ".join(parts)


# ---- the trace page ----------------------------------------------------------------------------


@dataclass
class _Part:
    """A part of a call shown on the page: its name, its JSON, and the provider's raw form."""

    name: str
    text: str
    raw: str | None = None


@dataclass
class _Row:
    """One span or call of the trace page, as the template draws it."""

    anchor: str
    label: str
    kind: str
    service: str
    colour: int
    status: str
    duration: str
    left: str
    width: str
    depth: int
    calls: int
    span_id: str
    envelope_id: str | None
    error: str | None = None
    mode: str | None = None
    """In a what-if: ``served`` (from the recording) or ``live``."""
    facts: list[tuple[str, str]] = field(default_factory=list)
    parts: list[_Part] = field(default_factory=list)


@dataclass
class _Lane:
    """A service's lane: its spans and its calls on the trace's time axis."""

    service: str
    colour: int
    spans: list[tuple[str, str, str]]
    """``(left, width, title)`` of each span, in percent of the axis."""
    calls: list[tuple[str, str, str]]
    """``(left, anchor, title)`` of each call."""


class _Axis:
    """The trace's time axis: from its first start to its last end."""

    def __init__(self, nodes: list[CallNode]) -> None:
        starts = [n.started_at for n in nodes if n.started_at is not None]
        ends = [t for t in (n.ended_at or n.started_at for n in nodes) if t is not None]
        self.origin = min(starts) if starts else None
        total = (max(ends) - self.origin).total_seconds() if self.origin and ends else 0.0
        self.total = max(total, 1e-6)

    def place(self, start: datetime | None, end: datetime | None) -> tuple[str, str]:
        """``(left, width)`` in percent; an open one runs to the end, a short one stays seen."""
        if self.origin is None or start is None:
            return "0%", "0%"
        left = (start - self.origin).total_seconds() / self.total * 100
        right = 100.0 if end is None else (end - self.origin).total_seconds() / self.total * 100
        left = min(max(left, 0.0), 99.7)
        width = max(min(right, 100.0) - left, 0.3)
        return f"{left:.3f}%", f"{width:.3f}%"

    def ticks(self) -> list[tuple[str, str]]:
        """``(left, text)`` of the axis' five marks."""
        return [(f"{p}%", _ms(self.total * 1000 * p / 100)) for p in (0, 25, 50, 75, 100)]


def _parts(envelope: Mapping[str, Any]) -> list[_Part]:
    """Input and output as a person reads them (a model call's normalized form, its provider's
    raw request or response folded under it; a tool's arguments and result), then metadata."""
    parts: list[_Part] = []
    for name in ("input", "output"):
        value = envelope.get(name)
        if isinstance(value, Mapping) and "raw" in value and len(value) > 1:
            shown = {k: v for k, v in value.items() if k != "raw"}
            raw = value.get("raw")
            parts.append(_Part(name, _json(shown), None if raw is None else _json(raw)))
        elif isinstance(value, Mapping) and set(value) == {"raw"}:
            parts.append(_Part(name, _json(value["raw"])))
        else:
            parts.append(_Part(name, _json(value)))
    parts.append(_Part("metadata", _json(envelope.get("metadata") or {})))
    return parts


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _facts(node: CallNode, replay: bool) -> list[tuple[str, str]]:
    envelope = node.envelope or {}
    output = _mapping(envelope.get("output"))
    given = _mapping(envelope.get("input"))
    status = envelope.get("envelope_status") or {}
    facts: list[tuple[str, str]] = []
    model = output.get("model") or given.get("model")
    if model:
        facts.append(("model", str(model)))
    tokens = _tokens(output.get("usage"))
    if tokens:
        facts.append(("tokens", tokens))
    if node.error:
        facts.append(("error", node.error))
    facts.append(("started", _when(node.started_at)))
    facts.append(("duration", _ms(node.duration_ms)))
    facts.append(("service", node.service))
    facts.append(("envelope", node.id))
    facts.append(("span", str(node.span.get("span_id"))))
    if envelope.get("attempt", 1) != 1:
        facts.append(("attempt", str(envelope.get("attempt"))))
    if replay:
        served = (envelope.get("metadata") or {}).get(REPLAYED_FROM)
        facts.append(
            ("replay", f"served from recorded envelope {served}" if served else "ran live")
        )
    if status.get("state") != "closed":
        facts.append(("state", "still open when read"))
    return facts


def _mode(node: CallNode) -> str:
    """How a what-if's call ran: ``served`` from the recording, or ``live``."""
    served = ((node.envelope or {}).get("metadata") or {}).get(REPLAYED_FROM)
    return "served" if served else "live"


def _span_facts(node: CallNode) -> list[tuple[str, str]]:
    span = node.span
    facts = [
        ("span", str(span.get("span_id"))),
        ("service", _service(span)),
        ("started", _when(node.started_at)),
        ("duration", _ms(node.duration_ms)),
    ]
    if node.called_by:
        facts.append(("called by", node.called_by))
    profile = (span.get("metadata") or {}).get(AGENT)
    if isinstance(profile, Mapping):
        facts.append(("agent", f"{profile.get('name')} ({profile.get('agent_id')})"))
    replayed = (span.get("metadata") or {}).get(REPLAY_OF)
    if isinstance(replayed, Mapping):
        facts.append(
            ("replay of", f"trace {replayed.get('trace_id')} span {replayed.get('span_id')}")
        )
    return facts


def _service(span: Mapping[str, Any]) -> str:
    version = (span.get("metadata") or {}).get(SERVICE_VERSION)
    service = str(span.get("service") or "?")
    return f"{service}@{version}" if isinstance(version, str) and version else service


def _events(
    tree: TraceTree, axis: _Axis, colours: dict[str, int], replay: bool
) -> Iterator[tuple[str, _Row]]:
    """``("open", row)`` for each node in display order and ``("close", row)`` after the last
    of the calls it made: the template nests without recursion, so any depth renders."""
    work: list[CallNode | _Row] = list(reversed(tree.roots))  # a node to open, a row to close
    while work:
        item = work.pop()
        if isinstance(item, _Row):
            yield "close", item
            continue
        row = _row(item, axis, colours, replay)
        yield "open", row
        work.append(row)
        work.extend(reversed(item.children))


def _row(node: CallNode, axis: _Axis, colours: dict[str, int], replay: bool) -> _Row:
    left, width = axis.place(node.started_at, node.ended_at)
    span = node.kind == "span"
    return _Row(
        anchor=f"span-{node.id}" if span else f"call-{node.id}",
        label=_service(node.span) if span else node.label,
        kind=node.kind,
        service=node.service,
        colour=colours.get(node.service, 0),
        status=node.status,
        duration=_ms(node.duration_ms),
        left=left,
        width=width,
        depth=node.depth,
        calls=len(node.children),
        span_id=str(node.span.get("span_id")),
        envelope_id=None if span else node.id,
        error=node.error,
        mode=_mode(node) if replay and not span else None,
        facts=_span_facts(node) if span else _facts(node, replay),
        parts=[] if span else _parts(node.envelope or {}),
    )


def _lanes(tree: TraceTree, axis: _Axis, colours: dict[str, int]) -> list[_Lane]:
    lanes: dict[str, _Lane] = {}
    for node in tree.nodes:
        lane = lanes.get(node.service)
        if lane is None:
            lane = lanes[node.service] = _Lane(node.service, colours[node.service], [], [])
        if node.kind == "span":
            left, width = axis.place(node.started_at, node.ended_at)
            lane.spans.append((left, width, f"span {node.id}: {_ms(node.duration_ms)}"))
        else:
            left, _ = axis.place(node.started_at, node.ended_at)
            title = f"{node.label}: {_ms(node.duration_ms)}"
            lane.calls.append((left, f"call-{node.id}", title))
    return list(lanes.values())


def control_plane_link(control_plane_url: str) -> Link:
    """Links to each trace's page on the control plane at ``control_plane_url``."""
    return lambda trace_id: trace_page_url(control_plane_url, trace_id)


def _default_link(tree: TraceTree) -> Link:
    """Another trace on the control plane this one was read from (its page's address)."""
    page = tree.url or ""
    mine = tree.trace_id
    if not page.endswith(mine):
        return lambda trace_id: None
    base = page[: -len(mine)]
    return lambda trace_id: base + trace_id


def trace_page(tree: TraceTree, *, link: Link | None = None, usage: str | None = None) -> str:
    """The page of one trace: its header (name, status, duration, calls, services, tokens,
    labels, agents, the trace a what-if replayed), a lane per service when several took part,
    and the call tree on one time axis, each call opening to its model, tokens, error, input,
    output and metadata.

    ``link`` gives another trace's address (the original of a what-if); by default its page on
    the control plane ``tree`` was read from. ``usage`` is the trace's tokens and cost in words
    (``chronicle.whatif.usage`` prices them; this layer cannot), shown in the header instead of
    the tokens alone. Returns the HTML text (``write_page`` writes it).
    """
    nodes = tree.nodes
    axis = _Axis(nodes)
    colours: dict[str, int] = {}
    for node in nodes:
        colours.setdefault(node.service, len(colours) % _SERVICES)
    link = link if link is not None else _default_link(tree)
    calls = [n for n in nodes if n.envelope is not None]
    failed = sum(1 for n in calls if n.status == "failure")
    priced = usage
    tokens: dict[str, int] = {"input": 0, "output": 0}
    models: dict[str, None] = {}
    for node in calls:
        output = (node.envelope or {}).get("output")
        if isinstance(output, Mapping):
            if isinstance(output.get("usage"), Mapping):
                for key in tokens:
                    value = output["usage"].get(key)
                    tokens[key] += value if isinstance(value, int) else 0
            if output.get("model"):
                models[str(output["model"])] = None
    originals: list[tuple[str, str | None]] = []
    agents: dict[str, str] = {}
    for span in tree.spans:
        metadata = span.get("metadata") or {}
        replayed = metadata.get(REPLAY_OF)
        if isinstance(replayed, Mapping) and replayed.get("trace_id"):
            original = str(replayed["trace_id"])
            text = f"trace {original} span {replayed.get('span_id')}"
            originals.append((text, link(original)))
        profile = metadata.get(AGENT)
        if isinstance(profile, Mapping):
            agents[str(profile.get("name"))] = str(profile.get("agent_id"))
    total = None
    if tree.status != "open" and axis.origin is not None:
        total = axis.total * 1000
    summary = [
        f"started {_when(axis.origin)}",
        _ms(total),
        plural(len(calls), "call") + (f", {failed} failed" if failed else ""),
        plural(len(colours), "service"),
    ]
    if priced is not None:
        summary.append(priced)
    elif any(tokens.values()):
        summary.append(f"tokens {tokens['input']:,} in · {tokens['output']:,} out")
    labels = {str(k): str(v) for k, v in (tree.trace.get("metadata") or {}).items()}
    return _render(
        "trace.html.j2",
        "trace.js",
        title=str(tree.trace.get("name") or f"trace {tree.trace_id}"),
        trace_id=tree.trace_id,
        status=tree.status,
        status_text=_STATUS.get(tree.status, tree.status),
        summary=summary,
        labels=labels,
        agents=agents,
        models=list(models),
        originals=originals,
        url=tree.url,
        ticks=axis.ticks(),
        lanes=_lanes(tree, axis, colours) if len(colours) > 1 else [],
        services=list(colours.items()),
        events=list(_events(tree, axis, colours, bool(originals))),
        empty=not nodes,
    )


# ---- the diff page -----------------------------------------------------------------------------

_MARK = {"same": "=", "changed": "~", "only_a": "-", "only_b": "+"}
_WORDS = {"same": "same", "changed": "changed", "only_a": "only in A", "only_b": "only in B"}


@dataclass
class _Change:
    """What changed in one part of a call: its paths and its JSON diff lines."""

    name: str
    paths: tuple[str, ...]
    lines: list[tuple[str, str]]
    """``(kind, text)``: ``hunk``, ``context``, ``removed``, ``added`` or ``note``."""


@dataclass
class _Line:
    """One line of the diff page: a call of A, of B or of both."""

    anchor: str
    change: str
    mark: str
    word: str
    depth: int
    a: dict[str, str] | None
    b: dict[str, str] | None
    delta: str
    first: bool
    status: tuple[str, str] | None
    changes: list[_Change]
    whole: list[tuple[str, _Part]]
    """For a call on one side only: its input and output, whole."""


def _call_cell(call: TraceCall | None) -> dict[str, str] | None:
    if call is None:
        return None
    facts: list[str] = [call.status]
    if call.latency_ms is not None:
        facts.append(_ms(call.latency_ms))
    if call.tokens:
        facts.append(f"{call.tokens.get('input', 0)}/{call.tokens.get('output', 0)} tokens")
    if call.mode:
        facts.append(call.mode)
    return {"label": call.label, "facts": " · ".join(facts), "status": call.status}


def json_diff(old: object, new: object) -> list[tuple[str, str]]:
    """The line diff of two values' indented JSON (keys sorted), three lines of context around
    each change, as ``(kind, text)`` lines; at most ``_DIFF_LINES`` lines, then a note."""
    before = _json(old).splitlines()
    after = _json(new).splitlines()
    lines: list[tuple[str, str]] = []
    matcher = SequenceMatcher(None, before, after, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        first, last = group[0], group[-1]
        lines.append(("hunk", f"@@ A {first[1] + 1}-{last[2]}, B {first[3] + 1}-{last[4]} @@"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(("context", "  " + text) for text in before[i1:i2])
                continue
            if tag in ("replace", "delete"):
                lines.extend(("removed", "- " + text) for text in before[i1:i2])
            if tag in ("replace", "insert"):
                lines.extend(("added", "+ " + text) for text in after[j1:j2])
    if len(lines) > _DIFF_LINES:
        more = len(lines) - _DIFF_LINES
        lines[_DIFF_LINES:] = [("note", f"… and {more:,} more lines of diff")]
    return lines


def _diff_line(entry: CallDiff, index: int, first: CallDiff | None) -> _Line:
    changes: list[_Change] = []
    a, b = entry.a, entry.b
    if entry.change == "changed" and a is not None and b is not None:
        if entry.input:
            changes.append(_Change("input", entry.input, json_diff(a.input, b.input)))
        if entry.output:
            changes.append(_Change("output", entry.output, json_diff(a.output, b.output)))
    whole: list[tuple[str, _Part]] = []
    if entry.change in ("only_a", "only_b"):
        call = a or b
        assert call is not None
        side = "A" if a is not None else "B"
        whole = [
            (side, _Part("input", _json(call.input))),
            (side, _Part("output", _json(call.output))),
        ]
        if call.error:
            whole.append((side, _Part("error", call.error)))
    deltas: list[str] = []
    if entry.latency_ms is not None and entry.change != "same":
        deltas.append(f"{entry.latency_ms:+.1f} ms")
    if entry.tokens is not None and any(entry.tokens.values()):
        deltas.append(f"tokens {entry.tokens['input']:+d}/{entry.tokens['output']:+d}")
    return _Line(
        anchor="first-divergence" if entry is first else f"line-{index}",
        change=entry.change,
        mark=_MARK[entry.change],
        word=_WORDS[entry.change],
        depth=entry.depth,
        a=_call_cell(a),
        b=_call_cell(b),
        delta=", ".join(deltas),
        first=entry is first,
        status=entry.status,
        changes=changes,
        whole=whole,
    )


def _verdict(result: TraceDiff) -> str:
    """``differ: 2 calls differ; the first divergence is issue_refund#1``: the last line of the
    diff's compact form, so the page says it in the terminal's words (one rule, spelled once)."""
    return result.render(changed_only=True).rsplit("\n", 1)[-1]


def diff_page(result: TraceDiff, *, link: Link | None = None) -> str:
    """The page of a diff: A and B (what each is, linked through ``link`` when it is a trace),
    the verdict, the counts and totals, then both call trees side by side, one line per aligned
    call. A changed call opens to its status change and, for its input and output, the changed
    paths and the JSON diff; a call on one side only opens to its input and output. The first
    divergence is marked, open and scrolled to (``#first-divergence``). Returns the HTML text."""
    counts = {kind: 0 for kind in _MARK}
    for entry in result.calls:
        counts[entry.change] += 1
    first = result.first_divergence
    sides = []
    for name, side in (("A", result.a), ("B", result.b)):
        href = link(side.trace_id) if link is not None and side.trace_id else None
        sides.append((name, side.source, plural(len(side.calls), "call"), href))
    totals: list[str] = []
    if result.latency_ms is not None:
        totals.append(f"latency {result.latency_ms:+.1f} ms")
    if any(result.tokens.values()):
        tokens = result.tokens
        totals.append(f"tokens in {tokens.get('input', 0):+d}, out {tokens.get('output', 0):+d}")
    return _render(
        "diff.html.j2",
        "diff.js",
        title=_verdict(result),
        same=result.same,
        sides=sides,
        counts=[(_WORDS[k], n, k) for k, n in counts.items()],
        totals=totals,
        first=None if first is None else (first.a or first.b).label,  # type: ignore[union-attr]
        lines=[_diff_line(entry, i, first) for i, entry in enumerate(result.calls)],
    )


# ---- the corpus report -------------------------------------------------------------------------

_SHORT = 160
"""Characters of an output shown in the report's table (the recording's section shows it all)."""


@dataclass
class _Recording:
    """One recording of the report page: its row in the table and its section below."""

    number: int
    source: str
    outcome: str
    first: str
    recorded: str
    replayed: str
    calls: list[tuple[str, int, str, str]]
    """``(call, depth, kind, mode)`` in the recording's tree order."""
    divergences: list[tuple[str, str, str, bool]]
    """``(call, kind, diff, expected)``."""
    output: list[tuple[str, str]] | None
    """The JSON diff of the entry's result, recorded to replayed (``None``: the same)."""
    stopped: bool
    """The replay ended before the entry returned: no result to compare."""
    usage: list[str]
    details: str
    trace_id: str | None
    href: str | None


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def report_page(report: Report, *, link: Link | None = None) -> str:
    """The page of a corpus replay (``chronicle replay --report``, ``chronicle report``): the
    headline (``4 recordings: 2 passed, 2 diverged``), the usage change and totals, then one
    table row per recording (status, first divergence, the entry's output recorded and
    replayed) linking to its call tree (``#tree-N``) and its diff (``#diff-N``) further down the
    same page; ``link`` makes a recorded trace id an address. Returns the HTML text."""
    totals = report.totals
    recordings: list[_Recording] = []
    for number, row in enumerate(report.rows, 1):
        stopped = row.outcome != "passed" and row.live_output is None  # nothing returned
        same = row.recorded_output == row.live_output or stopped
        pair = row.usage
        recordings.append(
            _Recording(
                number=number,
                source=row.source,
                outcome=row.outcome,
                first=row.first_divergence,
                recorded=_short(row.recorded_output),
                replayed="—" if stopped else _short(row.live_output),
                calls=[
                    (
                        str(c.get("call")),
                        int(c.get("depth") or 0),
                        str(c.get("kind")),
                        str(c.get("mode")),
                    )
                    for c in row.calls
                ],
                divergences=[
                    (
                        f"{d.get('name')}#{d.get('index')}",
                        str(d.get("kind")),
                        str(d.get("diff") or ""),
                        bool(d.get("expected")),
                    )
                    for d in row.divergences
                ],
                output=None if same else json_diff(row.recorded_output, row.live_output),
                stopped=stopped,
                usage=[
                    f"recorded {pair.recorded.describe()}",
                    f"replayed {pair.replayed.describe()}",
                ],
                details=row.details(),
                trace_id=row.trace_id,
                href=link(row.trace_id) if link is not None and row.trace_id else None,
            )
        )
    return _render(
        "report.html.j2",
        "report.js",
        title=f"chronicle replay: {report.headline()}",
        passed=report.passed,
        counts=[(outcome, n) for outcome, n in report.counts.items() if n],
        change=totals.change(),
        seconds=f"{report.seconds:,.2f} s",
        figures=report.figures(),
        unmatched=report.unmatched,
        recordings=recordings,
    )


# ---- the index of recent traces ----------------------------------------------------------------


def index_page(traces: Sequence[TraceSummary], *, control_plane: str) -> str:
    """The index ``chronicle serve`` shows at ``/``: the most recent traces, newest first, each
    linking to its page (``/trace/<id>``) with its start, duration, calls, status, services and
    labels. Returns the HTML text."""
    rows = [
        {
            "href": f"/trace/{t.trace_id}",
            "trace_id": t.trace_id,
            "name": t.name or f"trace {t.trace_id}",
            "started": _when(t.started_at),
            "duration": _ms(t.duration_ms),
            "calls": plural(t.envelope_count, "call"),
            "status": t.status,
            "status_text": _STATUS.get(t.status, t.status),
            "services": ", ".join(t.services),
            "labels": [f"{k}={v}" for k, v in t.labels.items()],
        }
        for t in traces
    ]
    return _render(
        "index.html.j2",
        "trace.js",
        title=f"Recent traces on {control_plane}",
        control_plane=control_plane,
        rows=rows,
    )
