"""Many traces at once: ``chronicle evaluate --agent NAME --since 24h [--label k:v] [--kept]``.

``evaluate_traces(match, ...)`` reads the traces ``match`` keeps from the control plane a page
at a time (most recently active first; the control plane filters by label, the agent, the time
window and ``--kept`` are filtered here, see ``chronicle.read.traces.matching_traces``), reads
each one's envelopes and evaluates it, ``readers`` at once, and yields one ``TraceResult`` per
trace as it goes: nothing holds more than a page of traces. ``Tally`` adds them up into a
summary per check. A trace that cannot be read or checked is a result with its ``error``, never
the end of the run.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from chronicle.agent import AgentProfile
from chronicle.check.checks import Evaluation, Status
from chronicle.check.evaluate import evaluate
from chronicle.check.judge import Judge
from chronicle.config import trace_page
from chronicle.errors import ChronicleError, ReplayError
from chronicle.read.connection import Connection
from chronicle.read.traces import Match, TraceTree, matching_traces
from chronicle.read.verdicts import Counted
from chronicle.save.client import HttpControlPlane

__all__ = ["CheckTally", "Tally", "TraceResult", "evaluate_traces"]

READERS = 4
"""Traces read and checked at once (the reads wait on the control plane more than they
compute)."""
_CHUNK = 64
"""Traces handed to the readers at a time: what is held besides the page being listed."""


@dataclass(frozen=True)
class TraceResult:
    """One trace's evaluation, or why it has none (``error``)."""

    trace_id: str
    evaluation: Evaluation | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The evaluation's JSON (``Evaluation.to_json``), or ``{"trace_id", "error"}``."""
        if self.evaluation is None:
            return {"trace_id": self.trace_id, "error": self.error}
        return self.evaluation.to_json()

    def line(self) -> str:
        """One line for a terminal: the trace, how its checks went, the first failure."""
        if self.evaluation is None:
            return f"{self.trace_id}  ERROR  {self.error}"
        verdicts = self.evaluation.verdicts
        failed = self.evaluation.failed
        counts = ", ".join(
            f"{n} {s}"
            for s, n in (
                ("failed", len(failed)),
                ("passed", sum(v.status == "pass" for v in verdicts)),
                ("undetermined", sum(v.status == "undetermined" for v in verdicts)),
            )
            if n
        )
        first = f"  {failed[0].explain()}" if failed else ""
        return f"{self.trace_id}  {'FAIL' if failed else 'pass'}  {counts or 'no checks'}{first}"


@dataclass
class CheckTally(Counted):
    """One check over the traces: how many passed, failed, or were undetermined, and the
    traces that failed it (the first 20)."""

    check: str
    rule: str
    passed: int = 0
    failed: int = 0
    undetermined: int = 0
    failing: list[str] = field(default_factory=list)

    def add(self, status: Status, trace_id: str) -> None:
        """Count one trace's verdict."""
        if status == "pass":
            self.passed += 1
        elif status == "fail":
            self.failed += 1
            if len(self.failing) < 20:
                self.failing.append(trace_id)
        else:
            self.undetermined += 1

    def to_json(self) -> dict[str, Any]:
        """The tally as JSON values."""
        return {
            "check": self.check,
            "rule": self.rule,
            **self.counts_json(),
            "failing": list(self.failing),
        }


@dataclass
class Tally:
    """The summary of a run over many traces: one ``CheckTally`` per check (by its rule's
    text), how many traces were checked, failed, could not be checked, and were saved."""

    checks: dict[tuple[str, str], CheckTally] = field(default_factory=dict)
    traces: int = 0
    failed: int = 0
    errors: int = 0
    saved: int = 0

    def add(self, result: TraceResult) -> None:
        """Count one trace's result."""
        self.traces += 1
        evaluation = result.evaluation
        if evaluation is None:
            self.errors += 1
            return
        if evaluation.failed:
            self.failed += 1
        if evaluation.saved_as is not None:
            self.saved += 1
        seen: dict[tuple[str, str], Status] = {}
        order = {"fail": 2, "undetermined": 1, "pass": 0}
        for verdict in evaluation.verdicts:  # several agents in a trace: the worse counts
            key = (verdict.check, verdict.rule)
            held = seen.get(key)
            if held is None or order[verdict.status] > order[held]:
                seen[key] = verdict.status
        for (check, rule), status in seen.items():
            tally = self.checks.get((check, rule))
            if tally is None:
                tally = self.checks[(check, rule)] = CheckTally(check, rule)
            tally.add(status, result.trace_id)

    def to_json(self) -> dict[str, Any]:
        """``{"summary": {...}}``: the counts and each check's tally."""
        return {
            "summary": {
                "traces": self.traces,
                "failed": self.failed,
                "errors": self.errors,
                "saved": self.saved,
                "checks": [tally.to_json() for tally in self.checks.values()],
            }
        }

    def render(self) -> str:
        """The summary as lines: one per check, failing first, then the totals."""
        lines = []
        ordered = sorted(self.checks.values(), key=lambda t: (-t.failed, -t.undetermined))
        for tally in ordered:
            lines.append(
                f"{tally.pass_rate:5.0%}  {tally.passed} of {tally.total} passed"
                + (f", {tally.failed} failed" if tally.failed else "")
                + (f", {tally.undetermined} undetermined" if tally.undetermined else "")
                + f"  [{tally.check}] {tally.rule}"
            )
        lines.append(
            f"{self.traces} traces checked: {self.failed} failed a check"
            + (f", {self.errors} could not be checked" if self.errors else "")
            + (f"; {self.saved} evaluations saved" if self.saved else "")
        )
        return "\n".join(lines)


def evaluate_traces(
    match: Match,
    *,
    url: str | None = None,
    profile: AgentProfile | None = None,
    judge: Judge | None = None,
    judge_runs: int = 1,
    save: bool = False,
    most: int | None = None,
    readers: int = READERS,
) -> Iterator[TraceResult]:
    """One ``TraceResult`` per trace ``match`` keeps, most recently active first, as each is
    checked (``evaluate``: against ``profile``, else its recorded one; by ``judge`` too when
    given; saved with ``save``). At most ``most`` traces are listed. Raises
    ``ConfigurationError`` when no control plane is set and ``ControlPlaneError`` when it
    cannot be listed; a trace that cannot be read or checked is a result with its error."""
    connection = Connection.resolve(url, None)
    asked: dict[str, Any] = (
        {"judge": judge.client, "judge_model": judge.model, "judge_runs": judge_runs}
        if judge is not None
        else {}
    )

    def check(client: HttpControlPlane, detail: dict[str, Any]) -> TraceResult:
        trace_id = str(detail.get("trace_id"))
        try:
            envelopes = client.trace_envelopes(trace_id)
            tree = TraceTree(detail, envelopes, trace_page(connection.url, trace_id))
            return TraceResult(trace_id, evaluate(tree, profile, save=save, **asked))
        except ReplayError:
            raise
        except (ChronicleError, LookupError, OSError, ValueError) as exc:
            return TraceResult(trace_id, None, f"{type(exc).__name__}: {exc}")

    with (
        closing(connection.client()) as client,
        ThreadPoolExecutor(readers, thread_name_prefix="chronicle-evaluate") as pool,
    ):
        read = functools.partial(check, client)  # one client: its connections are pooled
        chunk: list[dict[str, Any]] = []
        for detail in matching_traces(client, match, readers=readers, most=most):
            chunk.append(detail)
            if len(chunk) >= _CHUNK:
                yield from pool.map(read, chunk)
                chunk = []
        yield from pool.map(read, chunk)
