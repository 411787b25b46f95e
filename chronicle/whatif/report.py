"""A corpus replay's report: the results of one run, or of the shards of one, as one set of values.

``Report.of(results)`` reads results in their ``--json`` form (``CorpusResult.to_json()``, one
JSON object per recording), so the report of a run in this process and the report merged from
the ``--json`` files of its shards (``Report.read(paths)``, ``chronicle report``) are the same
values with the same totals. A report holds one ``Row`` per recording, sorted as an unsharded
run orders them (by source), the counts of each outcome, and the usage totals
(``chronicle.whatif.usage.Totals``: tokens, cost, live latency, recorded beside replayed).

A result's ``unmatched`` (the plan entries that matched no call in its recording, ``null`` when the
replay did not get as far as its plan) travels with it, so the report of merged shards names the
plan entries no recording of any shard reached (``unmatched_lines``), as an unsharded run does; a
result written before results carried it counts as one that did not get that far.

Three renderings read it: ``markdown(report)`` (a summary table short enough for a pull-request
comment or ``$GITHUB_STEP_SUMMARY``), ``junit_xml(report)`` (one test case per recording, for
CI), and the HTML page (``chronicle.read.page.report_page``).

Sharding (``shard(items, k, n)``) splits a sorted corpus into ``n`` even parts, by position in
the order of a key that does not depend on the machine (a file's path as given, a trace id), so
the same recording lands in the same shard on every machine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from xml.etree import ElementTree

from pydantic import JsonValue

from chronicle.errors import plural
from chronicle.replay.divergence import PlanMethod, Spelling, plan_option
from chronicle.whatif.usage import Totals, UsagePair, dollars

__all__ = [
    "OUTCOMES",
    "PlanEntry",
    "Report",
    "ReportError",
    "Row",
    "junit_xml",
    "markdown",
    "parse_shard",
    "shard",
    "unmatched_lines",
]

OUTCOMES = ("passed", "diverged", "failed", "error")
"""The outcomes of a replayed recording, in the order reports count them."""

_T = TypeVar("_T")

PlanEntry = tuple[str, int | None, str]
"""A plan entry that matched no call in one recording: the call's name, its number (``None``: every
call of the name) and the divergence's text (``the plan entry run('serach') matched no call: ...``,
``chronicle.replay.run.unmatched_entries`` writes it)."""
_SPELLINGS: tuple[Spelling, ...] = ("python", "cli", "pytest", "marker")


class ReportError(ValueError):
    """A ``--json`` file that cannot be merged (missing, not JSON lines of results)."""


@dataclass(frozen=True)
class Row:
    """One recording's result, as its ``--json`` object says it."""

    source: str
    outcome: str
    message: str = ""
    trace_id: str | None = None
    divergences: tuple[Mapping[str, Any], ...] = ()
    recorded_output: JsonValue = None
    live_output: JsonValue = None
    output_changes: tuple[str, ...] = ()
    calls: tuple[Mapping[str, Any], ...] = ()
    usage: UsagePair = field(default_factory=UsagePair)
    seconds: float = 0.0
    text: str = ""
    """The result as ``chronicle replay`` printed it (its ``details``), advice included."""
    unmatched: tuple[PlanEntry, ...] | None = None
    """The plan entries that matched no call in this recording; ``None`` when the replay did not
    get as far as its plan, or the result does not say (written before results carried it)."""
    spelling: Spelling = "cli"
    """How the result's advice is spelt (``chronicle replay``'s options, pytest's, ...)."""

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Row:
        """The row of one ``--json`` object; ``ReportError`` when it is not a result."""
        source, outcome = value.get("source"), value.get("outcome")
        if not isinstance(source, str) or outcome not in OUTCOMES:
            raise ReportError("not a chronicle replay --json result (no source or outcome)")
        seconds = value.get("seconds")
        trace_id = value.get("trace_id")
        return cls(
            source=source,
            outcome=str(outcome),
            message=str(value.get("message") or ""),
            trace_id=trace_id if isinstance(trace_id, str) else None,
            divergences=tuple(d for d in value.get("divergences") or () if isinstance(d, Mapping)),
            recorded_output=value.get("recorded_output"),
            live_output=value.get("live_output"),
            output_changes=tuple(str(c) for c in value.get("output_changes") or ()),
            calls=tuple(c for c in value.get("calls") or () if isinstance(c, Mapping)),
            usage=UsagePair.from_json(value.get("usage")),
            seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
            text=str(value.get("details") or ""),
            unmatched=_plan_entries(value.get("unmatched")),
            spelling=next((s for s in _SPELLINGS if s == value.get("spelling")), "cli"),
        )

    @property
    def first_divergence(self) -> str:
        """Where the replay first departed, in one line: the first unexpected divergence's call
        and what it says, else the message, else the first change of the entry's result."""
        for found in self.divergences:
            if not found.get("expected"):
                head = f"{found.get('name')}#{found.get('index')}"
                diff = " ".join(str(found.get("diff") or "").split())
                return f"{head}: {diff[:200]}" if diff else head
        if self.message:
            return self.message
        return self.output_changes[0] if self.output_changes else ""

    def details(self) -> str:
        """A few lines for a person: the outcome and why, every divergence, the result's
        changes (what a JUnit failure carries): as ``chronicle replay`` printed it, when the
        result says."""
        if self.text:
            return self.text
        lines = [f"{self.outcome}: {self.source}" + (f": {self.message}" if self.message else "")]
        for found in self.divergences:
            mark = " (expected)" if found.get("expected") else ""
            lines.append(f"  {found.get('kind')} {found.get('name')}#{found.get('index')}{mark}")
            lines += ["    " + line for line in str(found.get("diff") or "").splitlines()]
        if self.output_changes:
            lines.append("  the entry's result changed from its recording:")
            lines += ["    " + change for change in self.output_changes]
        return "\n".join(lines)


@dataclass
class Report:
    """The rows of a corpus replay, their counts and usage totals (see the module docstring).

    ``seconds`` is the time the run took (merged shards: their times added), ``unmatched`` the
    plan entries no recording reached (each a line saying what to fix: ``unmatched_lines``)."""

    rows: list[Row]
    seconds: float = 0.0
    unmatched: list[str] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        results: Iterable[Mapping[str, Any]],
        seconds: float | None = None,
        unmatched: Sequence[str] | None = None,
    ) -> Report:
        """The report of results in their ``--json`` form, sorted by source; ``seconds`` by
        default the results' own times added, ``unmatched`` by default the plan entries no
        result's recording reached (each result says which of its plan it never reached)."""
        rows = sorted((Row.from_json(r) for r in results), key=lambda row: row.source)
        took = sum(row.seconds for row in rows) if seconds is None else seconds
        if unmatched is None:
            checked = [row for row in rows if row.unmatched is not None]
            spelling = checked[0].spelling if checked else "cli"
            unmatched = unmatched_lines([row.unmatched or () for row in checked], spelling)
        return cls(rows, took, list(unmatched))

    @classmethod
    def read(cls, paths: Iterable[str | os.PathLike[str]]) -> Report:
        """The report merged from ``chronicle replay --json`` outputs (one JSON object a line;
        blank lines skipped). Raises ``ReportError`` naming the file and line that is not one,
        and for a recording that two files both hold (shards that overlap)."""
        results: list[dict[str, Any]] = []
        seen: dict[str, str] = {}
        for given in paths:
            path = Path(given)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
                raise ReportError(
                    f"{path} cannot be read ({why}); name the files chronicle replay --json wrote"
                ) from None
            for number, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                    row = Row.from_json(value if isinstance(value, dict) else {})
                except (json.JSONDecodeError, ReportError):
                    raise ReportError(
                        f"{path} line {number} is not a chronicle replay --json result; merge "
                        "the stdout of chronicle replay --json (its summary goes to stderr)"
                    ) from None
                if row.source in seen:
                    raise ReportError(
                        f"{row.source} is in both {seen[row.source]} and {path}; were two shards "
                        "given the same --shard, or one file named twice?"
                    )
                seen[row.source] = str(path)
                results.append(value)
        return cls.of(results)

    @property
    def counts(self) -> dict[str, int]:
        """How many recordings had each outcome (every outcome, in ``OUTCOMES`` order)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        for row in self.rows:
            counts[row.outcome] += 1
        return counts

    @property
    def passed(self) -> bool:
        """Whether there was a recording, every one passed, and every plan entry matched."""
        return (
            bool(self.rows)
            and all(r.outcome == "passed" for r in self.rows)
            and not (self.unmatched)
        )

    @property
    def totals(self) -> Totals:
        """The usage of every row added up."""
        totals = Totals()
        for row in self.rows:
            totals.add(row.usage)
        return totals

    def figures(self) -> list[tuple[str, str, str]]:
        """The usage totals as ``(figure, recorded, replayed)`` text: tokens in, tokens out,
        cost, the live calls' time."""
        recorded, replayed = self.totals.recorded, self.totals.replayed
        return [
            ("tokens in", f"{recorded.input_tokens:,}", f"{replayed.input_tokens:,}"),
            ("tokens out", f"{recorded.output_tokens:,}", f"{replayed.output_tokens:,}"),
            ("cost", _cost(recorded.cost_usd), _cost(replayed.cost_usd)),
            (
                "live calls' time",
                f"{recorded.latency_ms:,.0f} ms",
                f"{replayed.latency_ms:,.0f} ms",
            ),
        ]

    def headline(self) -> str:
        """``4 recordings: 2 passed, 2 diverged`` (an outcome none had is left out, but
        ``passed``)."""
        parts = ", ".join(
            f"{n} {outcome}" for outcome, n in self.counts.items() if n or outcome == "passed"
        )
        return f"{plural(len(self.rows), 'recording')}: {parts}"


def _plan_entries(value: object) -> tuple[PlanEntry, ...] | None:
    """A result's ``unmatched`` (``[{"name", "index", "diff"}, ...]``) as plan entries; ``None``
    when it holds none (``null``, or absent from an older result)."""
    if not isinstance(value, list):
        return None
    entries: list[PlanEntry] = []
    for item in value:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            index = item.get("index")
            number = index if isinstance(index, int) and not isinstance(index, bool) else None
            entries.append((item["name"], number, str(item.get("diff") or "")))
    return tuple(entries)


# ---- plan entries no recording reached ---------------------------------------------------------


def unmatched_lines(checked: Sequence[Sequence[PlanEntry]], spelling: Spelling) -> list[str]:
    """One line for each plan entry that matched no call in any recording of ``checked`` (each
    the entries one recording never reached), its advice spelt as ``spelling`` says; ``[]`` when
    each entry matched a call somewhere, or ``checked`` is empty (no recording got as far as its
    plan). An entry one recording never reaches is no divergence there; one that no recording
    reaches is the plan's mistake (a misspelt name, a call number none reaches)."""
    if not checked:
        return []
    everywhere = [
        found
        for found in checked[0]
        if all(any(_written(u) == _written(found) for u in other) for other in checked[1:])
    ]
    count = "the 1 recording" if len(checked) == 1 else f"any of the {len(checked)} recordings"
    lines = []
    for found in everywhere:
        name, index, written = _written(found)
        method = _METHODS.get(written.partition("(")[0])
        shown = written if method is None else plan_option(spelling, method, name, index)
        alike = [u for other in checked for u in other if _written(u) == _written(found)]
        told = next((u for u in alike if "did you mean" in u[2]), found)  # a close name
        why = told[2].partition(" matched no call: ")[2].partition("; the boundaries seen")[0]
        lines.append(
            f"the plan entry {shown} matched no call in {count} replayed"
            + (f" ({why})" if why else "")
            + "; fix the name or the call number (chronicle show TRACE lists the calls as name#n)"
        )
    return lines


_METHODS: dict[str, PlanMethod] = {"run": "run", "expect_change": "expect_change"}


def _written(found: PlanEntry) -> PlanEntry:
    """A plan entry's name, call number, and the entry as the plan writes it (``run('search',
    2)``), read from its divergence's text."""
    name, index, diff = found
    return name, index, diff.removeprefix("the plan entry ").partition(" matched no call")[0]


def markdown(report: Report, *, limit: int = 20) -> str:
    """The report as Markdown for a pull-request comment or ``$GITHUB_STEP_SUMMARY``: the
    headline and the usage change, a table of tokens, cost and live latency (recorded,
    replayed), then a table of the recordings that did not pass (the first ``limit``)."""
    totals = report.totals
    verdict = "✅" if report.passed else "❌"
    lines = [
        f"### {verdict} chronicle replay: {report.headline()}",
        "",
        f"{totals.change()} ({report.seconds:.1f} s)",
        "",
        "| | recorded | replayed |",
        "|---|---:|---:|",
        *(f"| {name} | {before} | {after} |" for name, before, after in report.figures()),
    ]
    failing = [row for row in report.rows if row.outcome != "passed"]
    if failing:
        lines += ["", "| recording | outcome | first divergence |", "|---|---|---|"]
        for row in failing[:limit]:
            lines.append(
                f"| {_cell(row.source)} | {row.outcome} | {_cell(row.first_divergence[:160])} |"
            )
        if len(failing) > limit:
            lines.append(f"| … {len(failing) - limit} more | | |")
    for line in report.unmatched:
        lines += ["", f"- {_cell(line)}"]
    return "\n".join(lines) + "\n"


def _cost(value: Decimal | None) -> str:
    return "unknown" if value is None else dollars(value)


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def junit_xml(report: Report) -> str:
    """A JUnit XML report: one test case per recording (diverged and failed as failures, error
    as errors), for CI systems that read it."""
    rows = report.rows
    suite = ElementTree.Element(
        "testsuite",
        name="chronicle replay",
        tests=str(len(rows)),
        failures=str(sum(r.outcome in ("diverged", "failed") for r in rows)),
        errors=str(sum(r.outcome == "error" for r in rows)),
        time=f"{report.seconds:.3f}",
    )
    for row in rows:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname="chronicle.replay",
            name=row.source,
            time=f"{row.seconds:.3f}",
        )
        if row.outcome != "passed":
            tag = "error" if row.outcome == "error" else "failure"
            node = ElementTree.SubElement(
                case, tag, message=f"{row.outcome}: {row.message}".rstrip(": ")
            )
            node.text = row.details()
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


# ---- shards -----------------------------------------------------------------------------------


def parse_shard(text: str, option: str = "--shard") -> tuple[int, int]:
    """``K/N`` as ``(k, n)``, 1 <= k <= n; ``ValueError`` saying the form otherwise."""
    k, slash, n = text.partition("/")
    if not (slash and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(
            f"{option} takes K/N, the K-th of N parts with 1 <= K <= N (--shard 2/4), got {text!r}"
        )
    return int(k), int(n)


def shard(items: Sequence[_T], k: int, n: int) -> list[_T]:
    """The ``k``-th (from 1) of ``n`` even parts of ``items``, which the caller sorted by a key
    that is the same on every machine: consecutive, sizes differing by at most one (the first
    ``len % n`` parts one longer)."""
    size, extra = divmod(len(items), n)
    start = (k - 1) * size + min(k - 1, extra)
    return list(items[start : start + size + (1 if k <= extra else 0)])
