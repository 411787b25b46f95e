"""Saved evaluations read back: the labels that keep verdicts on the control plane, and the scan
that finds them.

``chronicle.evaluate(..., save=True)`` (``chronicle evaluate --save``) records an evaluation as a
trace of its own (``chronicle/check/kept.py``). The control plane cannot attach anything to a
recorded trace (a closed span is immutable, labels are written once) and its search filters
traces by label only (``GET /v1/traces?label=k:v``), so the evaluation says what it found in its
own labels, written when its verdicts are known:

- ``chronicle.evaluation``: ``"saved"`` on every saved evaluation, the filter that lists them;
- ``chronicle.evaluates``: the id of the trace evaluated, the link;
- ``chronicle.evaluation.passed``: ``"true"`` when no verdict failed, else ``"false"``;
- ``chronicle.verdict.<agent>.<check>[.<rule>]``: one per check, its status (``pass``,
  ``fail``, ``undetermined``). ``<agent>`` is the profile's ``agent_id`` (``none`` for a verdict
  of no single agent, a trajectory across several); ``<rule>`` is the words of a constraint or
  an instruction (lowercase, ``_`` between words, at most 60 characters). Two verdicts with the
  same label keep the worse status (``fail``, then ``undetermined``).

A listing of traces carries their labels, so reading saved evaluations costs one list request
per 500 of them, and no read of each. The verdicts' reasons and calls are in the evaluation's
envelopes (``chronicle show EVALUATION``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chronicle.read.connection import instant
from chronicle.save.client import HttpControlPlane
from chronicle.wire import EVALUATES, EVALUATION

__all__ = [
    "Counted",
    "KeptEvaluation",
    "KeptVerdict",
    "evaluation_labels",
    "kept_evaluation",
    "latest_evaluations",
    "rule_words",
    "scan_evaluations",
]

SAVED = "saved"
"""The value of ``chronicle.evaluation`` on every saved evaluation."""
PASSED = f"{EVALUATION}.passed"
VERDICT_PREFIX = "chronicle.verdict."
NO_AGENT = "none"
"""The agent segment of a verdict that belongs to no single agent."""
_RULE_CHARS = 60
_PAGE = 500
_WORSE = {"fail": 2, "undetermined": 1, "pass": 0}
_BY_RULE = ("constraint", "instruction")
"""The checks of which a profile has several, told apart by their rule's words."""


def rule_words(text: str) -> str:
    """``text`` as a label segment: lowercase letters and digits, ``_`` between words, at most
    60 characters (``"Refunds above 2500 cents"`` -> ``refunds_above_2500_cents``)."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:_RULE_CHARS].rstrip("_")


class Counted:
    """The totals of a check's verdicts over many traces (or evaluations): a class that has the
    three counts gets their sum and the share that passed. An undetermined verdict is not a pass."""

    passed: int
    failed: int
    undetermined: int

    @property
    def total(self) -> int:
        """How many verdicts were counted."""
        return self.passed + self.failed + self.undetermined

    @property
    def pass_rate(self) -> float:
        """The share of those verdicts that passed (0.0 when none was counted)."""
        return self.passed / self.total if self.total else 0.0

    def counts_json(self) -> dict[str, Any]:
        """``{"passed", "failed", "undetermined", "pass_rate"}``: the counts as every tally's
        JSON carries them."""
        return {
            "passed": self.passed,
            "failed": self.failed,
            "undetermined": self.undetermined,
            "pass_rate": self.pass_rate,
        }


@dataclass(frozen=True)
class KeptVerdict:
    """One check's status as a saved evaluation's label holds it."""

    agent_id: str | None
    check: str
    rule: str | None
    """The rule's words (``rule_words``) for a constraint or an instruction; else ``None``."""
    status: str

    @property
    def name(self) -> str:
        """``check``, or ``check.rule`` for a constraint or an instruction."""
        return self.check if self.rule is None else f"{self.check}.{self.rule}"

    def matches(self, wanted: str) -> bool:
        """Whether ``wanted`` names this check: its check (``tools``, ``constraint``), its
        ``name``, or words of its rule (``approval`` matches the rule ``Refunds above 2500 cents
        need manager approval``; whole words, in order, any case)."""
        text = wanted.strip().lower()
        if text in (self.check, self.name):
            return True
        words = rule_words(text)
        return bool(words) and self.rule is not None and f"_{words}_" in f"_{self.rule}_"

    def to_json(self) -> dict[str, Any]:
        """``{"agent_id", "check", "rule", "status"}``."""
        return {
            "agent_id": self.agent_id,
            "check": self.check,
            "rule": self.rule,
            "status": self.status,
        }


@dataclass(frozen=True)
class KeptEvaluation:
    """A saved evaluation as its labels say it: ``trace_id`` is the evaluation's own trace,
    ``evaluates`` the trace it evaluated."""

    trace_id: str
    evaluates: str
    passed: bool
    verdicts: tuple[KeptVerdict, ...]
    saved_at: datetime | None

    def failing(self, wanted: str) -> list[KeptVerdict]:
        """The failed verdicts ``wanted`` names (``KeptVerdict.matches``)."""
        return [v for v in self.verdicts if v.status == "fail" and v.matches(wanted)]

    def to_json(self) -> dict[str, Any]:
        """The evaluation as JSON values (``saved_at`` in ISO 8601)."""
        return {
            "trace_id": self.trace_id,
            "evaluates": self.evaluates,
            "passed": self.passed,
            "verdicts": [v.to_json() for v in self.verdicts],
            "saved_at": self.saved_at.isoformat() if self.saved_at is not None else None,
        }


def _segment(text: str | None, empty: str) -> str:
    return rule_words(text or "") or empty


def evaluation_labels(
    evaluates: str, verdicts: Iterable[tuple[str | None, str, str, str]]
) -> dict[str, str]:
    """The labels of a saved evaluation of trace ``evaluates`` whose verdicts are ``(agent_id,
    check, rule text, status)``."""
    labels = {EVALUATION: SAVED, EVALUATES: evaluates}
    failed = False
    for agent_id, check, rule, status in verdicts:
        key = f"{VERDICT_PREFIX}{_segment(agent_id, NO_AGENT)}.{_segment(check, 'check')}"
        if check in _BY_RULE:
            key += f".{_segment(rule, 'rule')}"
        held = labels.get(key)
        if held is None or _WORSE.get(status, 1) > _WORSE.get(held, 1):
            labels[key] = status
        failed = failed or status == "fail"
    labels[PASSED] = "false" if failed else "true"
    return labels


def kept_evaluation(item: Mapping[str, Any]) -> KeptEvaluation | None:
    """The saved evaluation a trace (a listing item or ``GET /v1/traces/{id}``) is, read from
    its labels; ``None`` for a trace that is not one."""
    labels = item.get("metadata")
    if not isinstance(labels, Mapping) or labels.get(EVALUATION) != SAVED:
        return None
    evaluates = labels.get(EVALUATES)
    if not isinstance(evaluates, str) or not evaluates:
        return None
    verdicts: list[KeptVerdict] = []
    for key, status in labels.items():
        if not isinstance(key, str) or not key.startswith(VERDICT_PREFIX):
            continue
        parts = key[len(VERDICT_PREFIX) :].split(".")
        if len(parts) not in (2, 3):
            continue
        agent = None if parts[0] == NO_AGENT else parts[0]
        verdicts.append(
            KeptVerdict(agent, parts[1], parts[2] if len(parts) == 3 else None, str(status))
        )
    return KeptEvaluation(
        trace_id=str(item.get("trace_id")),
        evaluates=evaluates,
        passed=labels.get(PASSED) != "false",
        verdicts=tuple(verdicts),
        saved_at=instant(item.get("started_at")),
    )


def scan_evaluations(
    client: HttpControlPlane, *, since: datetime | None = None, most: int | None = None
) -> Iterator[KeptEvaluation]:
    """The saved evaluations on the control plane, most recent first, a page (500) at a time:
    those saved since ``since`` when given, at most ``most``. Raises ``ControlPlaneError`` when
    it cannot be read."""
    offset = 0
    seen = 0
    while most is None or seen < most:
        asked = _PAGE if most is None else min(_PAGE, most - seen)
        items = client.find_traces(labels={EVALUATION: SAVED}, limit=asked, offset=offset)
        for item in items:
            active = instant(item.get("ended_at")) or instant(item.get("started_at"))
            if since is not None and active is not None and active < since:
                return  # most recently active first: the rest are older
            found = kept_evaluation(item)
            if found is not None:
                seen += 1
                yield found
        if len(items) < asked:
            return
        offset += len(items)


def latest_evaluations(
    client: HttpControlPlane, *, since: datetime | None = None
) -> dict[str, KeptEvaluation]:
    """The most recent saved evaluation of each trace evaluated (saved since ``since`` when
    given), by the evaluated trace's id, most recent first."""
    latest: dict[str, KeptEvaluation] = {}
    for found in scan_evaluations(client, since=since):
        latest.setdefault(found.evaluates, found)
    return latest
