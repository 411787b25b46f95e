"""The agents the control plane has seen: one row per agent profile its traces carry.

The control plane has no registry of agents (no ``/v1/agents``): a profile rides on every Span
(``metadata["chronicle.agent"]``), so the registry is what the recorded traces say.
``find_agents()`` reads the traces, most recently active first, and folds each span's profile
into one ``AgentSummary`` per ``agent_id`` (a profile with the same name and other content, a
new version, is a row of its own), with how many traces carry it and when it was first and last
seen. ``chronicle agents`` and ``chronicle agents show ID`` print the same.

What it costs: the control plane lists traces without their spans, so every trace looked at is
one ``GET /v1/traces/{id}`` besides one list request per 500 traces, and every page of agents
(``limit``/``offset``) reads the same traces again, since the rows are sorted by when each agent
was last seen. The scan stops at ``scan_limit`` traces (a warning says so) or, with ``since``,
at the first trace older than that.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from chronicle.errors import ControlPlaneError
from chronicle.read.connection import Connection, instant, iso, not_a_control_plane, parse_time
from chronicle.read.verdicts import Counted, latest_evaluations, rule_words
from chronicle.save.client import HttpControlPlane
from chronicle.wire import AGENT, EVALUATION

__all__ = ["AgentPage", "AgentSummary", "PassRate", "find_agents"]

logger = logging.getLogger("chronicle")

SCAN_LIMIT = 5000
"""Most traces ``find_agents`` reads by default."""
_PAGE = 500
"""Traces per list request (the control plane's largest page)."""
_READERS = 4
"""Traces read at once (measured in docs/benchmarks.md, 'Listing agents')."""
MAX_LIMIT = 1000
"""Most agents in one page (the seed's ``limit`` maximum)."""


@dataclass(frozen=True)
class PassRate(Counted):
    """How one check of an agent fared over its saved evaluations (the latest of each trace):
    ``name`` is the check (``tools``) or ``check.rule`` (``constraint.look_the_policy_up``),
    ``rule`` the rule's own words when the profile has them."""

    name: str
    passed: int
    failed: int
    undetermined: int
    rule: str | None = None

    @property
    def shown(self) -> str:
        """The check as a reader knows it: ``constraint: <its words>``, else ``name``."""
        if self.rule is None:
            return self.name
        return f"{self.name.partition('.')[0]}: {self.rule}"

    def to_json(self) -> dict[str, Any]:
        """``{"name", "rule", "passed", "failed", "undetermined", "pass_rate"}``."""
        return {
            "name": self.name,
            "rule": self.rule,
            **self.counts_json(),
        }


@dataclass(frozen=True)
class AgentSummary:
    """One agent profile as the traces recorded it.

    ``profile`` is the recorded form (``AgentProfile.to_json()``: ``agent_id``, ``name``,
    ``goal``, ``instructions``, ``constraints``, ``tools``, ``model``, ``metadata``, and
    ``tenant_id`` when set); ``traces`` counts the traces with a span carrying it;
    ``first_seen``/``last_seen`` are the earliest start and the latest end of those spans.
    """

    profile: dict[str, Any]
    traces: int
    first_seen: datetime | None
    last_seen: datetime | None
    trace_ids: tuple[str, ...] = field(repr=False)
    """The traces carrying it, most recently active first (at most 100)."""
    evaluated: int = 0
    """How many of its traces have a saved evaluation (``evaluate(..., save=True)``)."""
    pass_rates: tuple[PassRate, ...] = ()
    """Each check's pass rate over those evaluations, the latest of each trace."""

    @property
    def agent_id(self) -> str:
        """``agt_`` and 20 hex digits, derived from the profile's content."""
        return str(self.profile.get("agent_id") or "")

    @property
    def name(self) -> str:
        """The profile's name."""
        return str(self.profile.get("name") or "")

    @property
    def version(self) -> str | None:
        """``metadata["version"]``, when the profile has one."""
        metadata = self.profile.get("metadata")
        version = metadata.get("version") if isinstance(metadata, dict) else None
        return None if version is None else str(version)

    @property
    def tenant_id(self) -> str | None:
        """The tenant namespace, when the profile has one."""
        tenant = self.profile.get("tenant_id")
        return tenant if isinstance(tenant, str) else None

    @property
    def goal(self) -> str:
        """The agent's goal."""
        return str(self.profile.get("goal") or "")

    @property
    def model(self) -> dict[str, Any] | None:
        """The model configuration (``{"name", "temperature", "max_tokens", ...}``)."""
        model = self.profile.get("model")
        return model if isinstance(model, dict) else None

    @property
    def tools_count(self) -> int:
        """How many tools the profile lists."""
        tools = self.profile.get("tools")
        return len(tools) if isinstance(tools, list) else 0

    @property
    def constraints_count(self) -> int:
        """How many constraints the profile lists."""
        constraints = self.profile.get("constraints")
        return len(constraints) if isinstance(constraints, list) else 0

    def to_json(self, *, full: bool = False) -> dict[str, Any]:
        """The agent object of a listing (``full``: of a retrieval, with the whole profile):
        ``created_at``/``updated_at`` are when it was first and last seen."""
        model = self.model
        row: dict[str, Any] = {
            "agent_id": self.agent_id,
            "tenant_id": self.tenant_id,
            "name": self.name,
            "version": self.version,
            "goal": self.goal,
            "tools_count": self.tools_count,
            "constraints_count": self.constraints_count,
            "model": ({"name": model.get("name")} if model is not None else None),
            "traces": self.traces,
            "created_at": iso(self.first_seen),
            "updated_at": iso(self.last_seen),
            "evaluated": self.evaluated,
            "pass_rates": [rate.to_json() for rate in self.pass_rates],
        }
        if full:
            kept = ("traces", "created_at", "updated_at", "evaluated", "pass_rates")
            row = {**self.profile, **{k: row[k] for k in kept}}
            row.setdefault("tenant_id", None)
            row["trace_ids"] = list(self.trace_ids)
        return row


@dataclass(frozen=True)
class AgentPage:
    """One page of agents, most recently seen first: ``agents``, ``count`` (on this page),
    ``has_more`` (another page follows), ``scanned`` (traces read) and ``complete`` (``False``
    when the scan stopped at its limit, so older agents may be missing)."""

    agents: list[AgentSummary]
    has_more: bool
    scanned: int
    complete: bool

    @property
    def count(self) -> int:
        """How many agents this page holds."""
        return len(self.agents)

    def to_json(self) -> dict[str, Any]:
        """``{"agents": [...], "count": n, "has_more": b}``, as the seed's listing."""
        return {
            "agents": [agent.to_json() for agent in self.agents],
            "count": self.count,
            "has_more": self.has_more,
        }


@dataclass
class _Seen:
    profile: dict[str, Any]
    trace_ids: list[str] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None

    def add(self, trace_id: str, span: Mapping[str, Any]) -> None:
        if not self.trace_ids or self.trace_ids[-1] != trace_id:  # a trace's spans come together
            self.trace_ids.append(trace_id)
        began = instant(span.get("started_at"))
        ended = instant(span.get("ended_at")) or began
        if began is not None and (self.first is None or began < self.first):
            self.first = began
        if ended is not None and (self.last is None or ended > self.last):
            self.last = ended

    def summary(self, evaluated: int, counts: Mapping[str, list[int]]) -> AgentSummary:
        words: dict[str, str] = {}
        for kind in ("constraints", "instructions"):
            texts = self.profile.get(kind)
            for text in texts if isinstance(texts, list) else []:
                words.setdefault(f"{kind[:-1]}.{rule_words(str(text))}", str(text))
        rates = tuple(
            PassRate(name, count[0], count[1], count[2], words.get(name))
            for name, count in sorted(counts.items())
        )
        return AgentSummary(
            profile=self.profile,
            traces=len(self.trace_ids),
            first_seen=self.first,
            last_seen=self.last,
            trace_ids=tuple(self.trace_ids[:100]),
            evaluated=evaluated,
            pass_rates=rates,
        )


_STATUS_AT = {"pass": 0, "fail": 1}
"""Where a status counts in ``_pass_rates``' ``[passed, failed, undetermined]``."""


def _pass_rates(
    client: HttpControlPlane, start: datetime | None
) -> dict[str, tuple[int, dict[str, list[int]]]]:
    """By ``agent_id``: how many traces have a saved evaluation (saved since ``start``), and
    each check's ``[passed, failed, undetermined]`` over the latest evaluation of each. Read
    from the evaluations' labels: one list request per 500."""
    found: dict[str, tuple[int, dict[str, list[int]]]] = {}
    for kept in latest_evaluations(client, since=start).values():
        agents: set[str] = set()
        for verdict in kept.verdicts:
            if verdict.agent_id is None:
                continue
            evaluated, counts = found.setdefault(verdict.agent_id, (0, {}))
            counts.setdefault(verdict.name, [0, 0, 0])[_STATUS_AT.get(verdict.status, 2)] += 1
            agents.add(verdict.agent_id)
        for agent_id in agents:
            evaluated, counts = found[agent_id]
            found[agent_id] = (evaluated + 1, counts)
    return found


def find_agents(
    *,
    limit: int = 25,
    offset: int = 0,
    agent: str | None = None,
    tenant_id: str | None = None,
    since: datetime | timedelta | str | None = None,
    scan_limit: int = SCAN_LIMIT,
    url: str | None = None,
    api_key: str | None = None,
) -> AgentPage:
    """Every agent profile the control plane's traces carry, one ``AgentSummary`` per
    ``agent_id``, most recently seen first, ``limit`` of them from ``offset``.

    ``agent`` keeps the profiles of that name or ``agent_id``; ``tenant_id`` those of that
    tenant; ``since`` (``"7d"``, a ``datetime``; see ``parse_time``) reads only the traces active
    since then. At most ``scan_limit`` traces are read, most recently active first (a warning
    says when that stopped the scan). The control plane is chosen as ``find_traces`` chooses it.
    Raises ``ValueError`` for a bad ``limit``/``offset``, ``ControlPlaneError`` when it cannot be
    read and ``ConfigurationError`` when none is set.
    """
    for value, what, lowest, highest in (
        (limit, "limit", 1, MAX_LIMIT),
        (offset, "offset", 0, None),
        (scan_limit, "scan_limit", 1, None),
    ):
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or value < lowest
            or (highest is not None and value > highest)
        ):
            bound = f"from {lowest} to {highest}" if highest else f"from {lowest}"
            raise ValueError(f"{what} must be a whole number {bound}, got {value!r}")
    start = parse_time(since) if since is not None else None
    connection = Connection.resolve(url, api_key)
    seen: dict[str, _Seen] = {}
    with closing(connection.client()) as client:
        scanned, complete = _read(client, seen, start, scan_limit)
        rates = _pass_rates(client, start)
    if not complete:
        logger.warning(
            "read the %d most recently active traces only, so older agents may be missing; "
            "pass since= (--since 7d) or a larger scan_limit (--scan-limit)",
            scan_limit,
        )
    rows = [s.summary(*rates.get(agent_id, (0, {}))) for agent_id, s in seen.items()]
    if agent is not None:
        rows = [r for r in rows if agent in (r.agent_id, r.name)]
    if tenant_id is not None:
        rows = [r for r in rows if r.tenant_id == tenant_id]
    epoch = datetime.min.replace(tzinfo=UTC)
    rows.sort(key=lambda r: r.agent_id)
    rows.sort(key=lambda r: r.last_seen or epoch, reverse=True)
    page = rows[offset : offset + limit]
    return AgentPage(page, offset + limit < len(rows), scanned, complete)


def _read(
    client: HttpControlPlane, seen: dict[str, _Seen], start: datetime | None, most: int
) -> tuple[int, bool]:
    """Fold the profiles of up to ``most`` traces into ``seen``; (traces read, whether the
    scan reached the end of what was asked for). A page's traces are read ``_READERS`` at a
    time (the reads are independent; the fold keeps the listing's order)."""
    scanned = 0
    offset = 0
    with ThreadPoolExecutor(_READERS, thread_name_prefix="chronicle-agents") as readers:
        while True:
            asked = min(_PAGE, most - offset)
            items = _list(client, asked, offset)
            ids: list[str] = []
            older = False
            for item in items:
                active = instant(item.get("ended_at")) or instant(item.get("started_at"))
                if start is not None and active is not None and active < start:
                    older = True  # most recently active first: the rest are older
                    break
                if (item.get("metadata") or {}).get(EVALUATION):
                    continue  # a saved evaluation runs no agent: not read
                ids.append(str(item.get("trace_id")))
            for trace_id, detail in zip(ids, readers.map(client.get_trace, ids), strict=True):
                scanned += 1
                if detail is not None:  # None: pruned between the two reads
                    _fold(seen, trace_id, detail)
            offset += len(items)
            if older or len(items) < asked:
                return scanned, True
            if offset >= most:
                return scanned, not _list(client, 1, offset)


def _list(client: HttpControlPlane, limit: int, offset: int) -> list[dict[str, Any]]:
    try:
        return client.find_traces(labels={}, limit=limit, offset=offset)
    except ControlPlaneError as exc:
        wrong = not_a_control_plane(client) if exc.status_code is not None else None
        if wrong is not None:
            raise wrong from None
        raise


def _fold(seen: dict[str, _Seen], trace_id: str, detail: Mapping[str, Any]) -> None:
    for span in detail.get("spans") or []:
        if not isinstance(span, dict):
            continue
        profile = (span.get("metadata") or {}).get(AGENT)
        if not isinstance(profile, dict) or not isinstance(profile.get("agent_id"), str):
            continue
        holder = seen.get(profile["agent_id"])
        if holder is None:
            holder = seen[profile["agent_id"]] = _Seen(profile)
        holder.add(trace_id, span)


def render_agents(page: AgentPage, *, width: int | None = 100) -> str:
    """The page as the table ``chronicle agents`` prints, one agent a line, and a last line
    saying how to see the next page when there is one.

    ``width=None`` (a pipe, a file): every column whole. A width (a terminal's): when the table
    is wider, the columns that can give room do, widest first (model, tenant, name, then the
    agent_id), each cut cell marked with ``…``; the version, the counts and LAST SEEN are never
    cut. A table that still does not fit is printed whole rather than losing a column."""
    header = ("AGENT_ID", "NAME", "VERSION", "TENANT", "MODEL", "TOOLS", "TRACES", "LAST SEEN")
    rows = [header]
    for agent in page.agents:
        model = agent.model or {}
        last = agent.last_seen.astimezone().strftime("%Y-%m-%d %H:%M") if agent.last_seen else "-"
        rows.append(
            (
                agent.agent_id,
                agent.name,
                agent.version or "-",
                agent.tenant_id or "-",
                str(model.get("name") or "-"),
                str(agent.tools_count),
                str(agent.traces),
                last,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    if width is not None:
        _fit_columns(widths, header, width)
    lines = [
        "  ".join(_cell(cell, w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    if page.has_more:
        lines.append("more agents: --offset N (and --limit N) for the next page")
    rated = [agent for agent in page.agents if agent.pass_rates]
    if rated:
        lines += ["", "pass rates over the saved evaluations (the latest of each trace):"]
    for agent in rated:
        lines.append(f"  {agent.name} ({agent.agent_id}): {agent.evaluated} traces evaluated")
        for rate in agent.pass_rates:
            lines.append(
                f"    {rate.pass_rate:4.0%}  {rate.passed} of {rate.total} passed"
                f"{f', {rate.failed} failed' if rate.failed else ''}  {rate.shown}"
            )
    return "\n".join(lines)


_GIVES_ROOM = (4, 3, 1, 0)
"""The columns ``render_agents`` narrows to fit a terminal, in turn: model, tenant, name,
agent_id."""


def _fit_columns(widths: list[int], header: tuple[str, ...], width: int) -> None:
    """Narrow ``widths`` in place until the row (two spaces between columns) fits ``width``:
    always the widest column that can give room, never below its heading (or 8)."""
    over = sum(widths) + 2 * (len(widths) - 1) - width
    while over > 0:
        room = [i for i in _GIVES_ROOM if widths[i] > max(len(header[i]), 8)]
        if not room:
            return
        widest = max(room, key=lambda i: widths[i])
        widths[widest] -= 1
        over -= 1


def _cell(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"


def agent_record(
    agent: str, *, url: str | None = None, scan_limit: int = SCAN_LIMIT
) -> AgentSummary:
    """The one agent whose ``agent_id`` (or name) is ``agent``, as the traces recorded it.

    Raises ``LookupError`` saying what to do when none matches or a name matches several
    versions (listed with their ids)."""
    found = find_agents(agent=agent, limit=MAX_LIMIT, url=url, scan_limit=scan_limit).agents
    if len(found) == 1:
        return found[0]
    if not found:
        raise LookupError(
            f"no recorded trace carries an agent {agent!r}; chronicle agents lists the agents "
            "the control plane has seen (give an agent_id or a name)"
        )
    versions = ", ".join(f"{a.agent_id} (version {a.version or '-'})" for a in found)
    raise LookupError(f"{len(found)} agents are named {agent!r}: {versions}; give an agent_id")
