"""What changed between two runs of an agent: ``chronicle.diff(a, b)`` and ``chronicle diff A B``.

Each side is one request span's calls: a trace id (read from the control plane, with its span
when the trace has several), an incident file or a saved envelopes body, or a list of
envelopes, or a finished ``ReplayRun``: the calls the replay made, each placed where the
recorded call it stands for sits (a call with no recording under the live call that made it),
with its live input, its result (the recording's for a stub, whose recorded subtree follows it
as ``consumed`` calls) and its status; no latency, and tokens only for a served recording.
``chronicle.diff(run)`` alone is the replay against its recording. The two call trees are
aligned **per parent**, on the replay's tree rule (``replay/tree.py``): the children of two
aligned calls are matched by a longest common subsequence of their names, so one call inserted
or removed does not shift the calls after it.

The result, ``TraceDiff``, lists every call in tree order (A's call order, a call only in B
placed after the call it follows there), each marked ``same``, ``changed``, ``only_a`` or
``only_b``. A changed call says what changed: input and output as the replay's path diff
(``divergence.path_diff``: ``path: old -> new``, volatile fields left out), status (ok or failed,
with the error). Latency and token usage are reported per call and in total as deltas, but are
never a change by themselves (no two runs take the same time).

``first_divergence`` is the call whose first difference happened earliest in A's order, where an
input (or a call only on one side) differs when the call starts and an output or status when it
ends, after its children: so when a tool's result changes, the tool call is the first
divergence, not the agent around it whose output changed in turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentplane_primitives.enums import Status
from agentplane_primitives.models import Envelope, LlmOutput
from pydantic import JsonValue

from chronicle import runtime
from chronicle.errors import ControlPlaneError, ReplayError, plural
from chronicle.recording.capture import json_arguments, json_form
from chronicle.recording.codecs import records_types
from chronicle.recording.failure import error_fields
from chronicle.replay.divergence import Volatile, path_diff
from chronicle.replay.load import (
    FileEnvelopes,
    envelope_items,
    envelope_of,
    load_envelopes,
    streamed,
)
from chronicle.replay.run import MadeCall, ReplayRun, made_calls
from chronicle.replay.tree import TOP, RecordedTree, in_call_order

if TYPE_CHECKING:
    from chronicle.save.client import ControlPlaneClient

Change = Literal["same", "changed", "only_a", "only_b"]
_TRACE_ID = re.compile(r"[0-9a-f]{32}\Z")
_LCS_CELLS = 4_000_000
"""Above this many name pairs left after the common prefix and suffix, children are aligned by
``difflib.SequenceMatcher`` (matching blocks, near-linear) instead of an exact LCS table."""
_SHOWN_PATHS = 8
_TOKENS = ("input", "output")


@dataclass(frozen=True, slots=True)
class TraceCall:
    """One call of one side, as the diff compares it.

    ``label`` is ``name#n`` with the span-wide number; ``parent`` the parent's label (``None``
    at the top level); ``status`` ``ok`` or ``failed``, ``error`` ``"Type: message"`` when
    failed; ``latency_ms`` ``None`` when unknown; ``tokens`` ``{"input": n, "output": n}`` for a
    model call that reported usage.
    """

    name: str
    index: int
    parent: str | None
    input: JsonValue
    output: JsonValue
    status: Literal["ok", "failed"]
    error: str | None = None
    latency_ms: float | None = None
    tokens: dict[str, int] | None = None
    mode: str | None = None
    """For a replay run's side: ``stub``, ``run``, ``override``... (``None`` for a recording)."""

    @property
    def label(self) -> str:
        """``name#n``: the call as ``chronicle show`` and plans name it."""
        return f"{self.name}#{self.index}"


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a diff: what it is (``source``, for people) and its calls in call order."""

    source: str
    calls: tuple[TraceCall, ...]
    trace_id: str | None = None
    span_id: str | None = None


@dataclass(frozen=True, slots=True)
class CallDiff:
    """One line of the diff: a call of A, of B, or of both, and what changed.

    ``a``/``b`` are the call on each side (``None`` on the side it is missing from); ``depth`` its
    depth in the tree; ``input``/``output`` the changed paths; ``status`` ``(a, b)`` when it
    changed (``"ok"`` or ``"failed: Type: message"``); ``latency_ms`` and ``tokens`` the deltas
    (B minus A; ``None`` when a side does not say).
    """

    change: Change
    a: TraceCall | None
    b: TraceCall | None
    depth: int
    input: tuple[str, ...] = ()
    output: tuple[str, ...] = ()
    status: tuple[str, str] | None = None
    latency_ms: float | None = None
    tokens: dict[str, int] | None = None

    @property
    def name(self) -> str:
        """The boundary's name (the same on both sides)."""
        call = self.a or self.b
        assert call is not None
        return call.name

    def to_json(self) -> dict[str, JsonValue]:
        """This line in the ``--json`` form (docs/design.md: "Diff")."""
        return {
            "change": self.change,
            "name": self.name,
            "a": self.a.label if self.a else None,
            "b": self.b.label if self.b else None,
            "depth": self.depth,
            "input": list(self.input),
            "output": list(self.output),
            "status": list(self.status) if self.status else None,
            "latency_ms": {
                "a": self.a.latency_ms if self.a else None,
                "b": self.b.latency_ms if self.b else None,
                "delta": self.latency_ms,
            },
            "tokens": {
                "a": _tokens_json(self.a),
                "b": _tokens_json(self.b),
                "delta": dict(self.tokens) if self.tokens is not None else None,
            },
        }


@dataclass(frozen=True, slots=True)
class TraceDiff:
    """What changed from A to B (``chronicle.diff``): every call in tree order, with totals.

    ``same`` when no call is only on one side and none changed; ``first_divergence`` the call
    whose first difference happened earliest in A's order (see the module docstring), ``None``
    when the two are the same. ``latency_ms`` and ``tokens`` are totals, B minus A, over the
    calls of both sides (a call's latency includes its children's, so only top-level calls are
    summed for latency).
    """

    a: Side
    b: Side
    calls: tuple[CallDiff, ...]
    first_divergence: CallDiff | None
    latency_ms: float | None = None
    tokens: dict[str, int] = field(default_factory=dict)

    @property
    def same(self) -> bool:
        """Whether no call differs (exit status 0 of ``chronicle diff``)."""
        return self.first_divergence is None

    def changed(self) -> list[CallDiff]:
        """The lines that are not ``same``, in tree order."""
        return [c for c in self.calls if c.change != "same"]

    def to_json(self) -> dict[str, JsonValue]:
        """The stable ``--json`` form; its schema is in docs/design.md ("Diff")."""
        counts = {kind: 0 for kind in ("same", "changed", "only_a", "only_b")}
        for line in self.calls:
            counts[line.change] += 1
        first = self.first_divergence
        return {
            "schema": "chronicle.diff/1",
            "same": self.same,
            "a": _side_json(self.a),
            "b": _side_json(self.b),
            "first_divergence": None
            if first is None
            else {"a": first.a.label if first.a else None, "b": first.b.label if first.b else None},
            "counts": dict(counts),
            "totals": {
                "latency_ms": self.latency_ms,
                "tokens": dict(self.tokens),
            },
            "calls": [line.to_json() for line in self.calls],
        }

    def render(self, *, width: int = 100, color: bool = False, changed_only: bool = False) -> str:
        """The terminal form: both trees side by side, a marker per line (``=`` same, ``~``
        changed, ``-`` only in A, ``+`` only in B), the changes under each changed call, and
        the totals. ``color`` adds ANSI colours (for a terminal only). ``changed_only``: the
        compact form (a test failure's), the calls that differ only, one column (B's label
        where A has none), their changes, and the verdict line."""
        if changed_only:
            return _render_changes(self)
        return _render(self, width, color)

    def __str__(self) -> str:
        return self.render()


# ---- reading a side ---------------------------------------------------------------------------


def diff(
    a: object,
    b: object = None,
    *,
    span_a: str | None = None,
    span_b: str | None = None,
    ignore: Iterable[str] = (),
    client: ControlPlaneClient | None = None,
) -> TraceDiff:
    """What changed from ``a`` to ``b``: ``chronicle.diff(trace_id, "incident.json")``.

    Each side is a trace id (32 hex characters; read from ``client``, else the configured
    control plane; ``span_a``/``span_b`` choose the span when the trace has several), an incident
    file or saved envelopes body (a path), a list of envelopes, or a finished ``ReplayRun`` (its
    calls as the replay made them; ``ReplayError`` while it still runs). ``diff(run)`` alone is
    the replay against its recording (A the recording, B the run). ``ignore`` names volatile
    paths as for ``replay()`` (the built-in defaults always apply). Raises ``ReplayError`` with
    what to do when a side cannot be read, or when A and B share no call name (two different
    agents).
    """
    # No pause of the cyclic collector: a side keeps its calls, not its envelopes, so what the
    # diff keeps alive grows with the calls alone (docs/benchmarks.md, "8b, the collector left
    # alone"), and a paused collector would be paused for every thread of the program.
    volatile = Volatile(ignore)
    if b is None:
        if not isinstance(a, ReplayRun):
            raise TypeError(
                "diff(a, b) compares two sides; diff(run) alone takes a finished ReplayRun "
                f"(the replay against its recording), got {type(a).__name__}"
            )
        b, a = a, recording_side(a)
    left = a if isinstance(a, Side) else read_side(a, span_a, client, "A")
    right = b if isinstance(b, Side) else read_side(b, span_b, client, "B")
    tree_a, tree_b = _CallTree(left.calls), _CallTree(right.calls)
    if tree_a.names and tree_b.names and not tree_a.names & tree_b.names:
        raise ReplayError(
            f"diff: A ({left.source}) and B ({right.source}) share no call: they look like two "
            "different agents; compare two recordings of the same agent (check the ids and --span)"
        )
    return _compare(left, right, tree_a, tree_b, volatile)


def recording_side(run: ReplayRun) -> Side:
    """The recording a replay ran against, as a side (named as a trace side is)."""
    return _envelope_side(f"trace {run.trace_id} span {run.span_id}", run.envelopes)


def read_side(
    source: object, span_id: str | None, client: ControlPlaneClient | None, which: str = "A"
) -> Side:
    """One side of a diff from any of the sources ``diff`` takes."""
    if isinstance(source, ReplayRun):
        return _run_side(source)
    if isinstance(source, str) and _TRACE_ID.match(source) and not Path(source).exists():
        return _trace_side(source, span_id, client, which)
    if isinstance(source, (str, Path)) and not str(source).lstrip().startswith(("{", "[")):
        path = Path(source)
        if not path.exists():
            raise ReplayError(
                f"diff: {which} ({source}) is neither a trace id (32 hex characters) nor a file "
                "that exists; pass a trace id, or an incident file saved with `chronicle save`"
            )
    name = str(source) if isinstance(source, (str, Path)) else "envelopes"
    if span_id is None:
        side = _streamed_side(name, source, which)
        if side is not None:
            return side
    return _envelope_side(name, _load(source, span_id, which))


def _streamed_side(name: str, source: object, which: str) -> Side | None:
    """The side of a recording as recorded, saved and served (one span's envelopes in call
    order: ``in_call_order``), read in one pass that validates each envelope, makes its call
    and lets the envelope go; ``None`` for anything else (then it is loaded and placed, and
    what is wrong with it said).

    A side keeps its calls, never its envelopes: a file's JSON is decoded one envelope at a
    time (``load.streamed``), and each envelope's models (a dozen objects the cyclic collector
    tracks) live only while its call is made, so the collector's passes during a diff do not
    walk them again and again (docs/benchmarks.md, "8b, the collector left alone")."""
    if isinstance(source, (list, tuple)) and source and isinstance(source[0], Envelope):
        # Models held already (the side's calls share their payloads): read as they are.
        held = in_call_order(source, _recorded_call)
        return _side(name, source[0], held) if held else None
    envelopes: Iterable[Envelope]
    stream: FileEnvelopes | None = None
    if isinstance(source, (str, Path)) and not str(source).lstrip().startswith(("{", "[")):
        stream = streamed(Path(source))
        if stream is None:
            return None
        envelopes = stream
    else:
        try:
            items = envelope_items(source)
        except ReplayError as exc:
            raise _side_error(exc, which) from None
        envelopes = (
            envelope_of(position, item, items) for position, item in enumerate(items.items)
        )
    first: list[Envelope] = []

    def kept_first() -> Iterator[Envelope]:
        for envelope in envelopes:
            if not first:
                first.append(envelope)
            yield envelope

    try:
        calls = in_call_order(kept_first(), _recorded_call)
    except ReplayError as exc:
        raise _side_error(exc, which) from None
    if not calls or (stream is not None and not stream.complete):
        return None
    return _side(name, first[0], calls)


def _side_error(exc: ReplayError, which: str) -> ReplayError:
    return ReplayError(f"diff: {which}: {str(exc).removeprefix('replay: ')}")


def _load(source: object, span_id: str | None, which: str) -> list[Envelope]:
    try:
        found = load_envelopes(source, span_id=span_id)
    except ReplayError as exc:
        raise _side_error(exc, which) from None
    if not found:
        raise ReplayError(
            f"diff: {which} holds no envelopes"
            + (f" of span {span_id}" if span_id else "")
            + "; check the file and the span id"
        )
    return found


def _trace_side(
    trace_id: str, span_id: str | None, client: ControlPlaneClient | None, which: str
) -> Side:
    reader = client if client is not None else runtime.current().client
    if reader is None:
        raise ReplayError(
            f"diff: {which} is a trace id, and no control plane is configured to read it from: "
            "set CHRONICLE_CONTROL_PLANE_URL (or pass --url), or diff saved incident files"
        )
    try:
        if span_id is None:
            trace = reader.get_trace(trace_id)
            if trace is None:
                raise ReplayError(
                    f"diff: trace {trace_id} ({which}) is not on the control plane; check the id "
                    "(`chronicle traces` lists recent ones)"
                )
            spans = [str(s.get("span_id")) for s in trace.get("spans", []) if isinstance(s, dict)]
            if len(spans) != 1:
                option = "--span" if which == "A" else "--span-b"
                raise ReplayError(
                    f"diff: trace {trace_id} ({which}) has {len(spans)} spans "
                    f"({', '.join(spans) or 'none'}); choose one with {option}"
                )
            span_id = spans[0]
        found = reader.span_envelopes(trace_id, span_id)
    except ControlPlaneError as exc:
        raise ReplayError(f"diff: could not read trace {trace_id} ({which}): {exc}") from None
    if not found:
        raise ReplayError(
            f"diff: span {span_id} of trace {trace_id} ({which}) has no envelopes; check the "
            "ids (`chronicle show TRACE` lists the spans)"
        )
    name = f"trace {trace_id} span {span_id}"
    return _streamed_side(name, found, which) or _envelope_side(name, _load(found, None, which))


def _envelope_side(source: str, envelopes: list[Envelope]) -> Side:
    # Each envelope read once, and the rest works on what was read: every further pass over a
    # span too large for the CPU caches misses again on each envelope (docs/benchmarks.md, "8b,
    # one pass over the envelopes").
    calls = in_call_order(envelopes, _recorded_call)
    first = envelopes[0] if envelopes else None  # the first call (trace and span ids)
    if calls is None:  # not as recorded (out of order, renumbered, an id repeated): placed first
        tree = RecordedTree(envelopes)
        # One label string per parent, shared by its children (named once, not once per child).
        parents: dict[str, str | None] = {TOP: None}
        calls = []
        for envelope in tree.envelopes:
            eid = envelope.envelope_id
            parent = tree.parent_id(eid)
            if parent not in parents:
                parents[parent] = tree.label(parent)
            n = tree.index.get(eid, 0)
            calls.append(_recorded_call(envelope, envelope.name, n, parents[parent]))
        first = tree.envelopes[0] if tree.envelopes else None
    return _side(source, first, calls)


def _side(source: str, first: Envelope | None, calls: list[TraceCall]) -> Side:
    """A recording's side: its calls in call order, named by the first one's trace and span."""
    return Side(
        source,
        tuple(calls),
        first.trace_id if first else None,
        first.span_id if first else None,
    )


def _recorded_call(
    envelope: Envelope,
    name: str,
    index: int,
    parent: str | None,
    mode: str | None = None,
    timed: bool = True,
    given: JsonValue = None,
) -> TraceCall:
    """One recorded call, ``name#index`` under the call labelled ``parent`` (``None``: the top
    level). ``timed=False``: served by a replay, which took no time; ``given``: the input it
    was called with, else the recorded one."""
    output = envelope.output
    status = envelope.envelope_status
    error = None
    failed = status.status is Status.FAILURE
    if failed:
        recorded = output.error if output is not None else None
        error = f"{recorded.type}: {recorded.message}" if recorded is not None else "(no error)"
    latency = None
    ended = status.ended_at
    if timed and ended is not None:
        latency = round((ended - status.started_at).total_seconds() * 1000, 3)
    tokens = None
    if isinstance(output, LlmOutput) and output.usage is not None:
        tokens = {"input": output.usage.input, "output": output.usage.output}
    return TraceCall(
        name,
        index,
        parent,
        envelope.input.raw if given is None else given,
        output.raw if output is not None else None,
        "failed" if failed else "ok",
        error,
        latency,
        tokens,
        mode,
    )


def _run_side(run: ReplayRun) -> Side:
    """The calls a finished replay made, each where the recorded call it stands for sits (a new
    call under the live call that made it), with its live input, its result (the recording's
    for a stub) and its status; a stub's recorded subtree follows it as ``consumed`` calls. No
    latency (a replay times nothing), tokens only where the recording's response was served."""
    made = made_calls(run)
    rt = runtime.current()
    tree = run.tree
    stubbed = {c.envelope.envelope_id for c in made if c.mode == "stub" and c.envelope is not None}
    consumed: dict[str, list[TraceCall]] = {}  # stubbed envelope id -> its subtree, call order
    root: dict[str, str] = {}
    if stubbed:
        for envelope in tree.envelopes:
            eid, parent = envelope.envelope_id, tree.parent_id(envelope.envelope_id)
            top = parent if parent in stubbed else root.get(parent)
            if top is not None and eid not in stubbed:
                root[eid] = top
                label = None if parent == TOP else tree.label(parent)
                served = _recorded_call(
                    envelope, envelope.name, tree.index.get(eid, 0), label, "consumed", False
                )
                consumed.setdefault(top, []).append(served)
    calls: list[TraceCall] = []
    for call in made:
        calls.append(_made_call(call, rt))
        if call.mode == "stub" and call.envelope is not None:
            calls.extend(consumed.get(call.envelope.envelope_id, ()))
    return Side(f"the replay of span {run.span_id}", tuple(calls), run.new_trace_id, None)


def _made_call(call: MadeCall, rt: runtime.Runtime) -> TraceCall:
    envelope = call.envelope
    if call.live is not None:
        given: JsonValue = call.live.json()
    elif envelope is not None:  # a stub whose input was the recorded one (volatile aside)
        given = envelope.input.raw
    else:  # a call refused for having no recording: its arguments as JSON
        given = json_arguments(call.arguments).value
    if call.mode == "stub" and envelope is not None:
        return _recorded_call(envelope, envelope.name, call.n, call.parent, "stub", False, given)
    output: JsonValue = None
    error = None
    if call.returned:
        output = _result_json(call, rt)
    else:
        raised = call.raised
        limit = rt.settings.max_payload_bytes
        error = (
            ": ".join(error_fields(raised, rt.redaction, limit))
            if raised is not None
            else "(raised; the replay did not keep the error)"
        )
    return TraceCall(
        call.name,
        call.n,
        call.parent,
        given,
        output,
        "ok" if call.returned else "failed",
        error,
        None,
        None,
        call.mode,
    )


def _result_json(call: MadeCall, rt: runtime.Runtime) -> JsonValue:
    """A live result's JSON form, as a recording of the call stores it (``capture_result``)."""
    spec, result = call.spec, call.result
    try:
        if spec is not None and spec.extract_result is not None:
            result = spec.extract_result(result)
        limit = rt.settings.max_payload_bytes
        restore = spec.restore if spec is not None else None
        form = json_form(
            result,
            max_string_bytes=limit,
            max_total_bytes=limit,
            redaction=rt.redaction,
            types=records_types(restore),
        )
    except Exception:
        return {"$repr": "<result not comparable>"}
    return form.value


# ---- aligning and comparing -------------------------------------------------------------------


def compare(a: Side, b: Side, volatile: Volatile | None = None) -> TraceDiff:
    """The diff of two sides already read (``diff`` reads them first)."""
    volatile = volatile if volatile is not None else Volatile()
    return _compare(a, b, _CallTree(a.calls), _CallTree(b.calls), volatile)


class _CallTree:
    """One side's calls grouped by parent label (``None``: the top level), in call order, and
    the names they use; built in one pass over the calls."""

    __slots__ = ("kids", "names")

    def __init__(self, calls: Sequence[TraceCall]) -> None:
        kids: dict[str | None, list[TraceCall]] = {}
        names: set[str] = set()
        for call in calls:
            group = kids.get(call.parent)
            if group is None:
                kids[call.parent] = [call]
            else:
                group.append(call)
            names.add(call.name)
        self.kids = kids
        self.names = names


_NO_CALLS: list[TraceCall] = []


def _compare(
    a: Side, b: Side, tree_a: _CallTree, tree_b: _CallTree, volatile: Volatile
) -> TraceDiff:
    """Walk both trees once, in A's order: each aligned pair is compared as it is reached, the
    first divergence and the token totals are kept on the way (no second pass over the lines).

    The divergence clock: a line's start (an input changed, or a call only on one side) happens
    before its children, its end (an output or status changed) after them."""
    kids_a, kids_b = tree_a.kids, tree_b.kids
    lines: list[CallDiff] = []
    first: CallDiff | None = None
    tokens = dict.fromkeys(_TOKENS, 0)

    def add(line: CallDiff, sign: int, usage: dict[str, int] | None) -> None:
        nonlocal first
        lines.append(line)
        if first is None and line.change != "same" and (line.change != "changed" or line.input):
            first = line
        if usage:
            for key in _TOKENS:
                tokens[key] += sign * usage.get(key, 0)

    def walk(left: list[TraceCall], right: list[TraceCall], depth: int) -> None:
        nonlocal first
        for old, new in _align([c.name for c in left], [c.name for c in right]):
            call_a = left[old] if old is not None else None
            call_b = right[new] if new is not None else None
            if call_a is not None and call_b is not None:
                line = _compare_call(call_a, call_b, depth, volatile)
                add(line, 1, line.tokens)
                walk(
                    kids_a.get(call_a.label, _NO_CALLS),
                    kids_b.get(call_b.label, _NO_CALLS),
                    depth + 1,
                )
                if first is None and line.change != "same" and (line.output or line.status):
                    first = line
            elif call_a is not None:
                add(CallDiff("only_a", call_a, None, depth), -1, call_a.tokens)
                walk_one(kids_a, call_a.label, depth + 1, "only_a")
            elif call_b is not None:
                add(CallDiff("only_b", None, call_b, depth), 1, call_b.tokens)
                walk_one(kids_b, call_b.label, depth + 1, "only_b")

    def walk_one(
        kids: dict[str | None, list[TraceCall]], parent: str, depth: int, side: Change
    ) -> None:
        for call in kids.get(parent, _NO_CALLS):
            if side == "only_a":
                add(CallDiff(side, call, None, depth), -1, call.tokens)
            else:
                add(CallDiff(side, None, call, depth), 1, call.tokens)
            walk_one(kids, call.label, depth + 1, side)

    walk(kids_a.get(None, _NO_CALLS), kids_b.get(None, _NO_CALLS), 0)
    latency = _total_latency(kids_a.get(None, _NO_CALLS), kids_b.get(None, _NO_CALLS))
    return TraceDiff(a, b, tuple(lines), first, latency, tokens)


def _align(a: list[str], b: list[str]) -> Iterator[tuple[int | None, int | None]]:
    """Pairs ``(i, j)`` of a longest common subsequence of two name lists, with ``(i, None)``
    for a name only in ``a`` and ``(None, j)`` for one only in ``b``, in order (an unmatched
    name of ``a`` before one of ``b`` at the same place)."""
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    for i in range(start):
        yield i, i
    matched = _middle(a[start:end_a], b[start:end_b])
    i, j = start, start
    for mi, mj in matched:
        while i < start + mi:
            yield i, None
            i += 1
        while j < start + mj:
            yield None, j
            j += 1
        yield i, j
        i, j = i + 1, j + 1
    while i < end_a:
        yield i, None
        i += 1
    while j < end_b:
        yield None, j
        j += 1
    for k in range(len(a) - end_a):
        yield end_a + k, end_b + k


def _middle(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """The matched positions of an LCS of ``a`` and ``b`` (exact up to ``_LCS_CELLS``)."""
    if not a or not b:
        return []
    if len(a) * len(b) > _LCS_CELLS:
        blocks = SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        return [(x.a + k, x.b + k) for x in blocks for k in range(x.size)]
    rows, cols = len(a), len(b)
    table = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(cols - 1, -1, -1):
            row[j] = below[j + 1] + 1 if a[i] == b[j] else max(below[j], row[j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < rows and j < cols:
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _compare_call(
    a: TraceCall | None, b: TraceCall | None, depth: int, volatile: Volatile
) -> CallDiff:
    if a is None or b is None:
        return CallDiff("only_b" if a is None else "only_a", a, b, depth)
    inputs = () if a.input == b.input else tuple(_paths(a.input, b.input, volatile, "(input)"))
    outputs: tuple[str, ...] = ()
    if a.output != b.output and a.status == b.status == "ok":  # a failure's story is its status
        outputs = tuple(_paths(a.output, b.output, volatile, "(output)"))
    status = None
    if a.status != b.status or a.error != b.error:
        status = (_status_text(a), _status_text(b))
    latency = None
    if a.latency_ms is not None and b.latency_ms is not None:
        latency = round(b.latency_ms - a.latency_ms, 3)
    tokens = None
    if a.tokens is not None or b.tokens is not None:
        known_a, known_b = _known_tokens(a), _known_tokens(b)
        if known_a is not None and known_b is not None:
            tokens = {k: known_b.get(k, 0) - known_a.get(k, 0) for k in _TOKENS}
    change: Change = "changed" if inputs or outputs or status else "same"
    return CallDiff(change, a, b, depth, inputs, outputs, status, latency, tokens)


def _known_tokens(call: TraceCall) -> dict[str, int] | None:
    """A call's token usage; none reported is zero for a recording, unknown (``None``) for a
    replay's call (``mode`` set), which does not say what a live model call used."""
    if call.tokens is not None:
        return call.tokens
    return {} if call.mode is None else None


def _paths(old: JsonValue, new: JsonValue, volatile: Volatile, root: str) -> list[str]:
    """The changed paths, sorted: a saved incident file sorts its keys, a trace does not, and
    the same change must read the same from either."""
    lines = sorted(path_diff(old, new, volatile, root=root))
    if len(lines) > _SHOWN_PATHS:
        lines[_SHOWN_PATHS:] = [f"... and {len(lines) - _SHOWN_PATHS} more changed paths"]
    return lines


def _status_text(call: TraceCall) -> str:
    return "ok" if call.status == "ok" else f"failed: {call.error}"


def _total_latency(tops_a: list[TraceCall], tops_b: list[TraceCall]) -> float | None:
    """B minus A over the top-level calls (a call's latency includes its children's);
    ``None`` when a side has none or does not time one."""
    if not tops_a or not tops_b:
        return None
    times_a, times_b = [c.latency_ms for c in tops_a], [c.latency_ms for c in tops_b]
    if None in times_a or None in times_b:
        return None
    return round(sum(x or 0.0 for x in times_b) - sum(x or 0.0 for x in times_a), 3)


def _tokens_json(call: TraceCall | None) -> JsonValue:
    return dict(call.tokens) if call is not None and call.tokens is not None else None


def _side_json(side: Side) -> dict[str, JsonValue]:
    return {
        "source": side.source,
        "trace_id": side.trace_id,
        "span_id": side.span_id,
        "calls": len(side.calls),
    }


# ---- the terminal form ------------------------------------------------------------------------

_MARK: dict[Change, str] = {"same": "=", "changed": "~", "only_a": "-", "only_b": "+"}
_COLOUR: dict[Change, str] = {"same": "", "changed": "33", "only_a": "31", "only_b": "32"}


def _render(result: TraceDiff, width: int, color: bool) -> str:
    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if color and code else text

    column = max(24, (width - 4) // 2)
    lines = [
        f"A: {result.a.source} ({plural(len(result.a.calls), 'call')})",
        f"B: {result.b.source} ({plural(len(result.b.calls), 'call')})",
        "",
    ]
    for entry in result.calls:
        indent = "  " * entry.depth
        left = f"{indent}{entry.a.label}" if entry.a else ""
        right = f"{indent}{entry.b.label}" if entry.b else ""
        extra = _deltas(entry)
        row = f"{_MARK[entry.change]} {_fit(left, column)}  {_fit(right, column)}".rstrip()
        if extra:
            row += f"  {extra}"
        lines.append(paint(row, _COLOUR[entry.change]))
        if entry.change == "changed":
            pad = " " * (2 + len(indent) + 4)
            for label, paths in (("input", entry.input), ("output", entry.output)):
                for path in paths:
                    lines.append(f"{pad}{label}  {path}")
            if entry.status is not None:
                lines.append(f"{pad}status  {entry.status[0]} -> {entry.status[1]}")
    lines.append("")
    lines.append(_verdict(result))
    totals = (
        [f"latency {_signed(result.latency_ms, ' ms')}"] if result.latency_ms is not None else []
    )
    tokens = result.tokens
    if any(tokens.values()):
        totals.append(f"tokens in {_signed(tokens['input'])}, out {_signed(tokens['output'])}")
    if totals:
        lines.append("total: " + "; ".join(totals))
    return "\n".join(lines)


def _render_changes(result: TraceDiff) -> str:
    lines: list[str] = []
    for entry in result.changed():
        indent = "  " * entry.depth
        call = entry.a or entry.b
        assert call is not None
        label = call.label
        if entry.a is not None and entry.b is not None and entry.b.label != label:
            label += f" (B: {entry.b.label})"
        lines.append(f"{_MARK[entry.change]} {indent}{label}")
        pad = "  " + indent + "  "
        for what, paths in (("input", entry.input), ("output", entry.output)):
            lines.extend(f"{pad}{what}  {path}" for path in paths)
        if entry.status is not None:
            lines.append(f"{pad}status  {entry.status[0]} -> {entry.status[1]}")
    lines.append(_verdict(result))
    return "\n".join(lines)


def _verdict(result: TraceDiff) -> str:
    first = result.first_divergence
    if first is None:
        return "same: no call differs"
    where = first.a.label if first.a is not None else f"{first.b.label if first.b else '?'} (B)"
    changed = len(result.changed())
    verb = "differs" if changed == 1 else "differ"
    return f"differ: {plural(changed, 'call')} {verb}; the first divergence is {where}"


def _deltas(entry: CallDiff) -> str:
    parts: list[str] = []
    if entry.latency_ms is not None and entry.change != "same":
        parts.append(_signed(entry.latency_ms, " ms"))
    if entry.tokens is not None and any(entry.tokens.values()):
        parts.append(f"tokens {_signed(entry.tokens['input'])}/{_signed(entry.tokens['output'])}")
    return ", ".join(parts)


def _signed(value: float | None, unit: str = "") -> str:
    if value is None:
        return "?"
    number = f"{value:+.1f}" if isinstance(value, float) else f"{value:+d}"
    return number + unit


def _fit(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"


def side_of_envelopes(source: str, envelopes: Iterable[Envelope | Mapping[str, Any]]) -> Side:
    """A side from envelopes already held (models or JSON), named ``source``."""
    return _envelope_side(source, _load(list(envelopes), None, source))
