"""Reading traces back: find them from what a ticket gives you, and build the call tree of one.

``find_traces(user_id="ada", since="2h")`` asks the control plane for matching traces, newest
first, each a ``TraceSummary`` (name, times, status, services, envelope count, labels, agents).
``show(trace_id)`` reads one trace and its envelopes into a ``TraceTree``: spans and envelopes
nested the way they were called, a downstream service's span under the envelope that called it.
``print(tree)`` draws the waterfall; ``chronicle traces`` and ``chronicle show`` print the same.

The control plane filters by ``session_id``, ``message_id``, ``user_id`` and any label; the time
window and the agent are filtered here, over its results (which come most recently active
first, so a ``since`` ends the scan early).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from chronicle.config import trace_page
from chronicle.errors import ControlPlaneError, plural
from chronicle.read.connection import (
    Connection,
    instant,
    iso,
    not_a_control_plane,
    parse_time,
    read_trace,
    span_ms,
)
from chronicle.read.verdicts import latest_evaluations
from chronicle.read.waterfall import render_tree
from chronicle.save.client import HttpControlPlane
from chronicle.wire import (
    AGENT,
    EVALUATION,
    INVOCATION,
    KEPT,
    REPLAY_OF,
    SEQUENCE,
    SERVICE_VERSION,
)

__all__ = [
    "CallNode",
    "Match",
    "TraceSummary",
    "TraceTree",
    "agent_names",
    "envelope_node",
    "find_traces",
    "matching_traces",
    "parse_time",
    "recent_traces",
    "show",
]

logger = logging.getLogger("chronicle")

_PAGE = 100
_SCAN_LIMIT = 5000
"""Most traces looked at for a filter the server cannot apply (time window, agent)."""

Status = str
"""``success``, ``failure`` or ``open``."""
# ---- summaries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceSummary:
    """One trace as ``find_traces`` returns it. ``status`` is ``failure`` when a span failed,
    ``open`` while a span is open, else ``success``; ``agents`` are the names of the agent
    profiles its spans carry."""

    trace_id: str
    name: str | None
    started_at: datetime | None
    ended_at: datetime | None
    status: Status
    services: tuple[str, ...]
    span_count: int
    envelope_count: int
    labels: dict[str, str]
    agents: tuple[str, ...]
    url: str
    """The trace's page on the control plane."""
    _connection: Connection = field(repr=False, compare=False)

    @property
    def duration_ms(self) -> float | None:
        """From the first span's start to the last one's end; ``None`` while open."""
        return span_ms(self.started_at, self.ended_at)

    def show(self) -> TraceTree:
        """The call tree of this trace (``print()`` it for the waterfall)."""
        with closing(self._connection.client()) as client:
            return _build_tree(client, self.trace_id)

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON values (times in ISO 8601, UTC)."""
        return {
            "trace_id": self.trace_id,
            "name": self.name,
            "started_at": iso(self.started_at),
            "ended_at": iso(self.ended_at),
            "duration_ms": self.duration_ms,
            "status": self.status,
            "services": list(self.services),
            "span_count": self.span_count,
            "envelope_count": self.envelope_count,
            "labels": dict(self.labels),
            "agents": list(self.agents),
            "url": self.url,
        }


def _span_status(spans: Sequence[Mapping[str, Any]]) -> Status:
    if any(span.get("status") == "failure" for span in spans):
        return "failure"
    if not spans or any(span.get("state") != "closed" for span in spans):
        return "open"
    return "success"


def _agent_names(spans: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for span in spans:
        profile = (span.get("metadata") or {}).get(AGENT)
        if isinstance(profile, dict) and isinstance(profile.get("name"), str):
            names[profile["name"]] = None
    return tuple(names)


def agent_names(spans: Sequence[object]) -> list[str]:
    """The names and ``agent_id``s of the agent profiles ``spans`` (a trace's, as the control
    plane returns them) carry, each once, in the spans' order."""
    found: dict[str, None] = {}
    for span in spans:
        profile = (span.get("metadata") or {}).get(AGENT) if isinstance(span, dict) else None
        if isinstance(profile, dict):
            for key in ("name", "agent_id"):
                if isinstance(profile.get(key), str):
                    found[profile[key]] = None
    return list(found)


def _agent_matches(spans: Sequence[Mapping[str, Any]], agent: str) -> bool:
    return agent in agent_names(spans)


def _replays(spans: Sequence[Mapping[str, Any]], trace_id: str) -> bool:
    """Whether one of ``spans`` is a recorded replay of trace ``trace_id``."""
    for span in spans:
        replayed = (span.get("metadata") or {}).get(REPLAY_OF)
        if isinstance(replayed, dict) and replayed.get("trace_id") == trace_id:
            return True
    return False


def _service_of(span: Mapping[str, Any]) -> str:
    """A span's service as listed: ``support-agent``, or ``support-agent@1.4.2`` when the span
    recorded its build (``service_version``)."""
    version = (span.get("metadata") or {}).get(SERVICE_VERSION)
    service = str(span.get("service"))
    return f"{service}@{version}" if isinstance(version, str) and version else service


def _summary(detail: Mapping[str, Any], connection: Connection) -> TraceSummary:
    spans = [s for s in detail.get("spans") or [] if isinstance(s, dict)]
    services: dict[str, None] = {_service_of(s): None for s in spans if s.get("service")}
    trace_id = str(detail.get("trace_id"))
    return TraceSummary(
        trace_id=trace_id,
        name=detail.get("name"),
        started_at=instant(detail.get("started_at")),
        ended_at=instant(detail.get("ended_at")) if _span_status(spans) != "open" else None,
        status=_span_status(spans),
        services=tuple(services),
        span_count=len(spans),
        envelope_count=int(detail.get("envelope_count") or 0),
        labels={str(k): str(v) for k, v in (detail.get("metadata") or {}).items()},
        agents=_agent_names(spans),
        url=trace_page(connection.url, trace_id),
        _connection=connection,
    )


def find_traces(
    *,
    session_id: str | None = None,
    message_id: str | None = None,
    user_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    agent: str | None = None,
    since: datetime | timedelta | str | None = None,
    until: datetime | timedelta | str | None = None,
    limit: int = 20,
    url: str | None = None,
    api_key: str | None = None,
    replays_of: str | None = None,
    failing: str | None = None,
    evaluated: bool = False,
) -> list[TraceSummary]:
    """The traces that match every filter given, newest first, at most ``limit``.

    ``session_id``, ``message_id``, ``user_id`` and ``labels`` match the trace's labels;
    ``agent`` matches the name (or ``agent_id``) of an agent profile on one of its spans;
    ``since`` / ``until`` bound its start (``"2h"``, ``"2026-12-01T14:00"``, a ``datetime`` or a
    ``timedelta``; see ``parse_time``); ``replays_of`` keeps the recorded replays of that trace
    (``replay(..., record=True)``: a span whose ``chronicle.replay_of`` names it);
    ``evaluated=True`` keeps the traces with a saved evaluation (``evaluate(..., save=True)``),
    ``failing`` those whose latest saved evaluation failed that check (its name, ``constraint``,
    or words of its rule: ``failing="approval"``; see ``chronicle.read.verdicts``). The control
    plane is ``url`` (with ``api_key``) when given, else the one ``configure()`` set, else
    ``CHRONICLE_CONTROL_PLANE_URL`` (and the config file). Raises ``ControlPlaneError`` when it
    cannot be read (saying so when the server there is not a control plane) and
    ``ConfigurationError`` when none is set.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a whole number from 1, got {limit!r}")
    now = datetime.now(UTC)
    start = parse_time(since, now=now) if since is not None else None
    end = parse_time(until, now=now) if until is not None else None
    wanted = {
        key: value
        for key, value in (
            ("session_id", session_id),
            ("message_id", message_id),
            ("user_id", user_id),
        )
        if value
    }
    for key, value in (labels or {}).items():
        if not isinstance(key, str) or not key or ":" in key or not isinstance(value, str):
            raise ValueError(f"labels are str keys (without ':') and str values, got {key!r}")
        wanted[key] = value
    connection = Connection.resolve(url, api_key)
    match = Match(wanted, start, end, agent, replays_of)
    found: list[TraceSummary] = []
    with closing(connection.client()) as client:
        if failing is not None or evaluated:
            details = _by_verdict(client, match, failing)
        else:
            details = matching_traces(client, match, limit=limit)
        for detail in details:
            found.append(_summary(detail, connection))
            if len(found) >= limit:
                break
    epoch = datetime.min.replace(tzinfo=UTC)
    found.sort(key=lambda s: s.started_at or s.ended_at or epoch, reverse=True)
    return found


@dataclass(frozen=True)
class Match:
    """What a trace must match: ``labels`` (all), a start within ``start``..``end``, an agent
    profile named ``agent`` on a span, a span replaying ``replays_of``, and with ``kept`` a span
    keep-on-incident kept (``chronicle.kept``). A saved evaluation never matches ``agent``."""

    labels: dict[str, str]
    start: datetime | None = None
    end: datetime | None = None
    agent: str | None = None
    replays_of: str | None = None
    kept: bool = False

    @property
    def client_side(self) -> bool:
        """Whether a filter is applied here, over the control plane's results."""
        return any((self.start, self.end, self.agent, self.replays_of, self.kept))

    def started_in(self, item: Mapping[str, Any]) -> bool:
        """Whether a listed trace started within the window."""
        began = instant(item.get("started_at")) or instant(item.get("ended_at"))
        return began is None or not (
            (self.start is not None and began < self.start)
            or (self.end is not None and began > self.end)
        )

    def keeps(self, detail: Mapping[str, Any]) -> bool:
        """Whether a trace read whole (``GET /v1/traces/{id}``) matches the filters that need
        its spans, and its labels (read here too: a trace found by verdict was not listed by
        them)."""
        spans = [s for s in detail.get("spans") or [] if isinstance(s, dict)]
        labels = detail.get("metadata") or {}
        if any(labels.get(key) != value for key, value in self.labels.items()):
            return False
        if self.agent is not None and not _agent_matches(spans, self.agent):
            return False
        if self.replays_of is not None and not _replays(spans, self.replays_of):
            return False
        return not self.kept or any((s.get("metadata") or {}).get(KEPT) for s in spans)


def matching_traces(
    client: HttpControlPlane,
    match: Match,
    *,
    limit: int | None = None,
    readers: int = 1,
    most: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The traces ``match`` keeps, each read whole (``GET /v1/traces/{id}``), most recently
    active first, streamed a page at a time (``readers`` reads at once). The control plane
    filters by label; the rest is filtered here over at most ``most`` listed traces (default
    5000 when a filter needs it, else ``limit``), a warning saying when that stopped the scan.
    Saved evaluations are left out when an agent is asked for (they run no agent)."""
    client_side = match.client_side
    page = min(max(limit or _PAGE, _PAGE), 500) if client_side or limit is None else limit
    scan = most if most is not None else _SCAN_LIMIT if client_side or limit is None else limit
    listed = recent_traces(
        client, match.labels, since=match.start, page=min(page, 500), most=scan, warn=client_side
    )
    with ThreadPoolExecutor(readers, thread_name_prefix="chronicle-traces") as pool:
        while True:
            ids: list[str] = []
            for item in listed:
                if not match.started_in(item):
                    continue
                if match.agent is not None and (item.get("metadata") or {}).get(EVALUATION):
                    continue  # a saved evaluation carries no agent profile: no read needed
                ids.append(str(item.get("trace_id")))
                if len(ids) >= page:
                    break
            for detail in pool.map(client.get_trace, ids):
                if detail is not None and match.keeps(detail):  # None: pruned meanwhile
                    yield detail
            if len(ids) < page:  # the listing ended (or reached a trace older than the start)
                return


def recent_traces(
    client: HttpControlPlane,
    labels: dict[str, str],
    *,
    since: datetime | None = None,
    page: int = _PAGE,
    most: int | None = None,
    warn: bool = False,
) -> Iterator[dict[str, Any]]:
    """The traces the control plane lists for ``labels`` (``GET /v1/traces``, not read whole),
    most recently active first, a page at a time, each once (a trace recorded meanwhile moves
    the rest down a page: listed twice), until one was last active before ``since`` (every
    later one is older still) or ``most`` were listed (``warn``: a warning says so). Raises
    ``ControlPlaneError``, saying so when the server is not a control plane."""
    seen: set[str] = set()
    for item in _scan(client, labels, page, most, warn=warn):
        trace_id = str(item.get("trace_id"))
        if trace_id in seen:
            continue
        seen.add(trace_id)
        active = instant(item.get("ended_at")) or instant(item.get("started_at"))
        if since is not None and active is not None and active < since:
            return
        yield item


def _by_verdict(
    client: HttpControlPlane, match: Match, failing: str | None
) -> Iterator[dict[str, Any]]:
    """The traces evaluated (``failing``: whose latest saved evaluation failed that check) that
    ``match`` keeps, most recently evaluated first. The control plane finds the evaluations by
    their label; which check failed is read from their labels here."""
    for trace_id, kept in latest_evaluations(client).items():
        if failing is not None and not kept.failing(failing):
            continue
        detail = client.get_trace(trace_id)
        if detail is None or not match.started_in(detail) or not match.keeps(detail):
            continue
        yield detail


def _scan(
    client: HttpControlPlane, labels: dict[str, str], page: int, most: int | None, *, warn: bool
) -> Iterator[dict[str, Any]]:
    offset = 0
    while most is None or offset < most:
        try:
            items = client.find_traces(labels=labels, limit=page, offset=offset)
        except ControlPlaneError as exc:
            wrong = not_a_control_plane(client) if exc.status_code is not None else None
            if wrong is not None:
                raise wrong from None
            raise
        yield from items
        if len(items) < page:
            return
        offset += page
    if not warn:
        return
    logger.warning(
        "looked at the %d most recent traces only; narrow the search with labels "
        "(--session-id, --user-id, --label) or --since",
        most,
    )


# ---- the call tree -----------------------------------------------------------------------


@dataclass
class CallNode:
    """One row of the call tree: a span (``kind == "span"``, named after its service) or an
    envelope (``kind`` ``tool``/``llm``, named ``name#invocation``)."""

    kind: str
    label: str
    status: Status
    started_at: datetime | None
    ended_at: datetime | None
    span: dict[str, Any]
    envelope: dict[str, Any] | None = None
    error: str | None = None
    """``Type: message`` of a failed envelope, first line only."""
    called_by: str | None = None
    """For a downstream span: the label (or id) of the envelope that called it."""
    depth: int = 0
    children: list[CallNode] = field(default_factory=list)

    @property
    def id(self) -> str:
        """The envelope id, or the span id for a span row."""
        source = self.envelope if self.envelope is not None else self.span
        return str(source.get("envelope_id") or source.get("span_id"))

    @property
    def service(self) -> str:
        """The service of the span this row belongs to."""
        return str(self.span.get("service") or "?")

    @property
    def duration_ms(self) -> float | None:
        """Milliseconds from start to end; ``None`` while open."""
        return span_ms(self.started_at, self.ended_at)

    def walk(self) -> Iterator[CallNode]:
        """This node and everything under it, in display order."""
        yield self
        for child in self.children:
            yield from child.walk()


class TraceTree:
    """A trace's spans and envelopes as a tree; ``print()`` it for the waterfall.

    ``trace`` is ``GET /v1/traces/{id}`` (labels, spans), ``envelopes`` every envelope in start
    order, ``roots`` the top rows, ``nodes`` every row in display order. ``render(width, color)``
    is the text ``chronicle show`` prints.
    """

    def __init__(
        self, trace: dict[str, Any], envelopes: list[dict[str, Any]], url: str | None = None
    ) -> None:
        self.trace = trace
        self.envelopes = envelopes
        self.url = url
        self.roots = _nest(trace, envelopes)

    @property
    def trace_id(self) -> str:
        """The trace's id (32 hex)."""
        return str(self.trace.get("trace_id"))

    @property
    def spans(self) -> list[dict[str, Any]]:
        """The trace's Span entities, as stored."""
        return [s for s in self.trace.get("spans") or [] if isinstance(s, dict)]

    @property
    def nodes(self) -> list[CallNode]:
        """Every row, in display order."""
        return [node for root in self.roots for node in root.walk()]

    @property
    def status(self) -> Status:
        """``failure`` when a span failed, ``open`` while one is open, else ``success``."""
        return _span_status(self.spans)

    def only_span(self, span_id: str) -> TraceTree:
        """The same trace, shown for one span: its row and its own envelopes.

        Raises ``LookupError`` naming the trace's spans when ``span_id`` is not one of them.
        """
        spans = [s for s in self.spans if s.get("span_id") == span_id]
        if not spans:
            known = ", ".join(f"{s.get('span_id')} ({s.get('service')})" for s in self.spans)
            raise LookupError(f"trace {self.trace_id} has no span {span_id}; its spans: {known}")
        trace = {**self.trace, "spans": spans}
        envelopes = [e for e in self.envelopes if e.get("span_id") == span_id]
        return TraceTree(trace, envelopes, self.url)

    def envelope(self, ref: str) -> dict[str, Any]:
        """One envelope by its id or by ``name#n`` as the tree shows it (``service/name#n``
        when two spans share it). Raises ``LookupError`` saying what matched."""
        rows = [n for n in self.nodes if n.envelope is not None]
        matches = [n for n in rows if n.id == ref]
        if not matches:
            service, _, label = ref.rpartition("/")
            matches = [n for n in rows if n.label == label and service in ("", n.service)]
        if len(matches) == 1 and matches[0].envelope is not None:
            return matches[0].envelope
        if not matches:
            raise LookupError(
                f"trace {self.trace_id} has no envelope {ref!r}; give an envelope id or "
                "name#n as the tree shows it"
            )
        choices = ", ".join(f"{n.service}/{n.label} ({n.id})" for n in matches)
        raise LookupError(f"{ref!r} matches several envelopes: {choices}; pick one")

    def render(self, width: int = 100, color: bool = False, ascii_only: bool = False) -> str:
        """The header and the waterfall, at most ``width`` columns (ANSI colour if asked)."""
        return render_tree(self, width=width, color=color, ascii_only=ascii_only)

    def to_json(self) -> dict[str, Any]:
        """``{"trace": ..., "envelopes": [...]}`` as stored (the input of ``TraceTree``)."""
        return {"trace": self.trace, "envelopes": self.envelopes}

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return (
            f"<TraceTree {self.trace_id}: {plural(len(self.spans), 'span')}, "
            f"{plural(len(self.envelopes), 'envelope')}, {self.status}>"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython / Jupyter
        printer.text(self.render())


def _error_line(envelope: Mapping[str, Any]) -> str | None:
    output = envelope.get("output")
    error = output.get("error") if isinstance(output, dict) else None
    if not isinstance(error, dict):
        return None
    message = str(error.get("message") or "").strip().splitlines()
    text = f"{error.get('type') or 'Error'}: {message[0]}" if message else str(error.get("type"))
    return text


def envelope_node(envelope: dict[str, Any], span: dict[str, Any]) -> CallNode:
    """One call of a trace tree: ``envelope`` (its JSON form, as the control plane serves it)
    in ``span``, labelled ``name#n`` and timed by its status (``open`` while it runs)."""
    status = envelope.get("envelope_status") or {}
    metadata = envelope.get("metadata") or {}
    invocation = metadata.get(INVOCATION)
    name = str(envelope.get("name"))
    closed = status.get("state") == "closed"
    return CallNode(
        kind=str(envelope.get("kind")),
        label=f"{name}#{invocation}" if isinstance(invocation, int) else name,
        status=str(status.get("status") or "success") if closed else "open",
        started_at=instant(status.get("started_at")),
        ended_at=instant(status.get("ended_at")) if closed else None,
        span=span,
        envelope=envelope,
        error=_error_line(envelope),
    )


def _span_node(span: dict[str, Any]) -> CallNode:
    closed = span.get("state") == "closed"
    return CallNode(
        kind="span",
        label=str(span.get("service") or "?"),
        status=str(span.get("status") or "success") if closed else "open",
        started_at=instant(span.get("started_at")),
        ended_at=instant(span.get("ended_at")) if closed else None,
        span=span,
    )


def _nest(trace: Mapping[str, Any], envelopes: list[dict[str, Any]]) -> list[CallNode]:
    """Spans under the envelope that called them, envelopes under their parent envelope (or
    their span), siblings in start order."""
    spans: dict[str, CallNode] = {}
    for body in trace.get("spans") or []:
        if isinstance(body, dict) and body.get("span_id"):
            spans[str(body["span_id"])] = _span_node(body)
    calls: dict[str, CallNode] = {}
    for envelope in envelopes:
        span_id = str(envelope.get("span_id"))
        if span_id not in spans:  # its span was not saved (yet): a stand-in row
            spans[span_id] = _span_node({"span_id": span_id, "service": "?", "state": "open"})
        calls[str(envelope.get("envelope_id"))] = envelope_node(envelope, spans[span_id].span)
    roots: list[CallNode] = []
    for node in calls.values():
        parent = (node.envelope or {}).get("parent_envelope_id")
        holder = calls.get(str(parent)) if parent else None
        (holder or spans[str(node.span.get("span_id"))]).children.append(node)
    for node in spans.values():
        caller_id = node.span.get("parent_envelope_id")
        caller = calls.get(str(caller_id)) if caller_id else None
        if caller is not None:
            node.called_by = caller.label
            caller.children.append(node)
        else:
            if caller_id:
                node.called_by = f"{caller_id} (not in this trace)"
            roots.append(node)
    epoch = datetime.min.replace(tzinfo=UTC)

    def order(node: CallNode) -> tuple[datetime, int]:
        sequence = (node.envelope or {}).get("metadata", {}).get(SEQUENCE)
        return (node.started_at or epoch, sequence if isinstance(sequence, int) else 0)

    def place(node: CallNode, depth: int) -> None:
        node.depth = depth
        node.children.sort(key=order)
        for child in node.children:
            place(child, depth + 1)

    roots.sort(key=order)
    for root in roots:
        place(root, 0)
    return roots


def _build_tree(client: HttpControlPlane, trace_id: str) -> TraceTree:
    trace = read_trace(client, trace_id)
    envelopes = client.trace_envelopes(trace_id)
    return TraceTree(trace, envelopes, trace_page(client.url, trace_id))


def show(
    trace_id: str,
    *,
    span: str | None = None,
    url: str | None = None,
    api_key: str | None = None,
) -> TraceTree:
    """The call tree of one trace, read from the control plane; ``print()`` it.

    ``span`` narrows it to one span. The control plane is chosen as ``find_traces`` chooses it.
    Raises ``ControlPlaneError`` (``status_code`` 404) when the trace is not there, a
    ``ControlPlaneError`` saying so when the server is not a control plane, ``LookupError`` for
    an unknown ``span``.
    """
    with closing(Connection.resolve(url, api_key).client()) as client:
        tree = _build_tree(client, trace_id)
    return tree.only_span(span) if span is not None else tree
