"""A trace's tool calls against a reference trace's: the ``trajectory`` verdict of
``chronicle.evaluate(trace, reference=OTHER, trajectory=MODE)``.

The modes are those of LangChain's ``agentevals`` trajectory match, over tool calls:

- ``strict``: the same tool calls in the same order;
- ``unordered``: the same tool calls, in any order (as many of each);
- ``subset``: no tool call the reference does not make (each call matched to one of its own);
- ``superset``: every tool call the reference makes (others allowed).

Calls are compared by tool name, and with ``trajectory_args=True`` by their recorded arguments
too (equal as JSON). A tool call is a tool boundary's call that ran, the span's entry (the
agent itself) left out (``rules.tool_steps``). A fail names the first call that breaks the
match, in the trace's call order (``issue_refund#1``), or, when the trace lacks one the
reference makes, that call of the reference's in the reason.

The reference is a trace id (read from the control plane), an incident file (``chronicle save``
or the pytest plugin wrote it: a ``Path``, or text naming a file that exists or ends in
``.json``), a ``TraceTree`` or a finished replay run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from chronicle.check.calls import evaluation_calls, raw_input
from chronicle.check.checks import Verdict
from chronicle.check.rules import tool_steps
from chronicle.errors import ConfigurationError
from chronicle.read.traces import CallNode, TraceTree, show
from chronicle.replay.incident import IncidentRun
from chronicle.replay.run import ReplayRun
from chronicle.save.incident import Incident

__all__ = ["MODES", "Mode", "Reference", "load_reference", "trajectory_verdict"]

Mode = Literal["strict", "unordered", "subset", "superset"]
MODES: tuple[Mode, ...] = ("strict", "unordered", "subset", "superset")
_SAYS = {
    "strict": "the same tool calls in the same order",
    "unordered": "the same tool calls, in any order",
    "subset": "no tool call the reference does not make",
    "superset": "every tool call the reference makes",
}


@dataclass(frozen=True)
class Reference:
    """The reference's calls and how it is named in a verdict (``trace 4bf9…``)."""

    calls: list[CallNode]
    name: str


@dataclass(frozen=True)
class _Step:
    label: str
    name: str
    arguments: str  # the recorded arguments as canonical JSON

    def same(self, other: _Step, with_arguments: bool) -> bool:
        return self.name == other.name and (not with_arguments or self.arguments == other.arguments)


def check_mode(mode: object) -> Mode:
    """``mode`` when it is one of ``MODES``; else ``ConfigurationError`` listing them."""
    for known in MODES:
        if mode == known:
            return known
    raise ConfigurationError(
        "trajectory", f"is one of {', '.join(MODES)} (as agentevals names them), got {mode!r}"
    )


def load_reference(reference: object, *, url: str | None = None) -> Reference:
    """The reference's calls. Raises ``ConfigurationError`` for a value of another type,
    ``ReplayError`` for a file that is not an incident, ``ControlPlaneError`` for a trace id
    the control plane cannot give."""
    if isinstance(reference, TraceTree):
        return Reference(evaluation_calls(reference), f"trace {reference.trace_id}")
    if isinstance(reference, (ReplayRun, IncidentRun)):
        return Reference(evaluation_calls(reference), "the reference replay")
    path: Path | None = None
    if isinstance(reference, Path):
        path = reference
    elif isinstance(reference, str) and (reference.endswith(".json") or Path(reference).is_file()):
        path = Path(reference)
    if path is not None:
        try:
            incident = Incident.read(path)
        except FileNotFoundError:
            raise ConfigurationError(
                "reference", f"{path} does not exist: give an incident file, a trace id or a tree"
            ) from None
        return Reference(evaluation_calls(_tree_of(incident)), f"{path.name}")
    if isinstance(reference, str) and reference.strip():
        tree = show(reference.strip(), url=url)
        return Reference(evaluation_calls(tree), f"trace {tree.trace_id}")
    raise ConfigurationError(
        "reference",
        "takes a trace id, an incident file (chronicle save), a TraceTree (chronicle.show) or "
        f"a finished replay run, got {type(reference).__name__}",
    )


def _tree_of(incident: Incident) -> TraceTree:
    """An incident file's envelopes as a ``TraceTree`` (its spans as the file lists them)."""
    spans = [{**span.to_json(), "state": "closed"} for span in incident.spans]
    envelopes = [e.model_dump(mode="json", exclude_none=True) for e in incident.envelopes]
    return TraceTree({"trace_id": incident.trace_id, "spans": spans}, envelopes)


def _steps(calls: Sequence[CallNode]) -> list[_Step]:
    return [
        _Step(
            node.label,
            str((node.envelope or {}).get("name")),
            json.dumps(raw_input(node), sort_keys=True, default=str),
        )
        for node in tool_steps(calls)
    ]


def _argument_change(step: _Step, reference: _Step) -> str:
    """How ``step``'s arguments differ from ``reference``'s, in a few words."""
    mine, theirs = json.loads(step.arguments), json.loads(reference.arguments)
    for key in dict.fromkeys([*theirs, *mine]):
        if mine.get(key, _ABSENT) != theirs.get(key, _ABSENT):
            return (
                f"{key} {_said(mine.get(key, _ABSENT))} where the reference has "
                f"{_said(theirs.get(key, _ABSENT))}"
            )
    return "other arguments"


_ABSENT = object()


def _said(value: object) -> str:
    if value is _ABSENT:
        return "absent"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


def _match(
    trace: list[_Step], reference: list[_Step], with_arguments: bool
) -> tuple[list[_Step], list[_Step]]:
    """The trace's calls no reference call matches, and the reference's no trace call matches
    (each call matched once; equal calls are interchangeable, so the first free one will do)."""
    free = list(range(len(reference)))
    extra: list[_Step] = []
    for step in trace:
        found = next((i for i in free if step.same(reference[i], with_arguments)), None)
        if found is None:
            extra.append(step)
        else:
            free.remove(found)
    return extra, [reference[i] for i in free]


def trajectory_verdict(
    calls: Sequence[CallNode],
    reference: Reference,
    mode: Mode,
    *,
    with_arguments: bool = False,
    agent_id: str | None = None,
) -> Verdict:
    """The ``trajectory`` verdict of ``calls`` against ``reference`` in ``mode``."""
    trace, expected = _steps(calls), _steps(reference.calls)
    compared = "tool calls and their arguments" if with_arguments else "tool calls"
    rule = f"{mode} trajectory: {_SAYS[mode]} as {reference.name} ({compared})"
    broken: tuple[str, ...] = ()
    reason = ""
    if mode == "strict":
        for index, (step, want) in enumerate(zip(trace, expected, strict=False)):
            if not step.same(want, with_arguments):
                broken = (step.label,)
                reason = (
                    f"{step.label} is call {index + 1}, where the reference calls {want.label}"
                    if step.name != want.name
                    else f"{step.label}'s arguments differ from the reference's {want.label}: "
                    f"{_argument_change(step, want)}"
                )
                break
        else:
            if len(trace) > len(expected):
                past = trace[len(expected)]
                broken = (past.label,)
                reason = (
                    f"{past.label} is call {len(expected) + 1}, past the reference's "
                    f"{len(expected)}"
                )
            elif len(trace) < len(expected):
                lacking = expected[len(trace)]
                reason = (
                    f"the reference's {lacking.label} (call {len(trace) + 1}) was never made: "
                    f"{len(trace)} tool call(s) where the reference makes {len(expected)}"
                )
    else:
        extra, missing = _match(trace, expected, with_arguments)
        if mode == "subset":
            missing = []
        elif mode == "superset":
            extra = []
        if extra:
            first = extra[0]
            like = next((r for r in expected if r.name == first.name), None)
            if with_arguments and like is not None:
                what = f"{first.label}'s arguments match no {first.name} call of the reference's"
                what += f" ({_argument_change(first, like)})"
            else:
                what = f"{first.label} is not among the reference's calls"
            more = [s.label for s in extra[1:]]
            broken = (first.label,)
            reason = what + (f"; nor {', '.join(more[:5])}" if more else "")
            if missing:
                reason += f"; the reference's {', '.join(m.label for m in missing[:5])} not made"
        elif missing:
            reason = f"the reference's {', '.join(m.label for m in missing[:5])} not made" + (
                f" ({len(missing)} in all)" if len(missing) > 5 else ""
            )
    if reason:
        return Verdict("trajectory", rule, "fail", broken, reason, agent_id)
    said = f"{len(trace)} tool call(s) against the reference's {len(expected)}"
    return Verdict("trajectory", rule, "pass", (), said, agent_id)
