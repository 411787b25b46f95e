"""The rules without code (``Constraint.before/never/only/at_most``) checked over a trace's calls.

``check_rule(rule, calls)`` reads the calls as every check does (``CallNode`` rows in call
order, see ``calls.py``) and answers ``Finding(holds, calls, reason)``: ``holds`` ``True`` (the
rule holds), ``False`` (broken, ``calls`` naming each call that breaks it, ``issue_refund#1``)
or ``None`` (undetermined: a cost the price table cannot tell). A tool call is a tool
boundary's call that ran, not the span's entry (the agent itself); a model's request for a tool
is not one until the agent runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from chronicle.agent import Rule, use_rule_checker
from chronicle.check.calls import is_entry
from chronicle.check.prices import call_cost, call_tokens

__all__ = ["Finding", "check_rule", "tool_steps"]


@dataclass(frozen=True)
class Finding:
    """A rule's answer over a trace's calls."""

    holds: bool | None
    calls: tuple[str, ...]
    reason: str


def tool_steps(calls: Sequence[Any]) -> list[Any]:
    """The tool calls among ``calls`` (``CallNode`` rows), in call order: the tool boundaries'
    calls that ran, the span's entry (the agent itself) left out."""
    return [
        node
        for node in calls
        if getattr(node, "kind", None) == "tool"
        and node.envelope is not None
        and not is_entry(node)
    ]


def _name(node: Any) -> str:
    return str((node.envelope or {}).get("name"))


def _labels(nodes: Sequence[Any], most: int = 5) -> str:
    shown = ", ".join(n.label for n in nodes[:most])
    return shown + (f" and {len(nodes) - most} more" if len(nodes) > most else "")


def check_rule(rule: Rule, calls: Sequence[Any]) -> Finding:
    """``rule`` over ``calls`` (a trace's ``CallNode`` rows in call order). Never raises."""
    params = rule.params
    if rule.kind == "before":
        return _before(str(params["first"]), str(params["then"]), tool_steps(calls))
    if rule.kind in ("never", "only"):
        tools = [str(t) for t in params["tools"]]  # type: ignore[union-attr]
        steps = tool_steps(calls)
        if rule.kind == "never":
            broken = [n for n in steps if _name(n) in tools]
            holds_says = f"none of {len(steps)} tool call(s) is {' or '.join(tools)}"
            says = f"{_labels(broken)} called"
        else:
            broken = [n for n in steps if _name(n) not in tools]
            holds_says = f"all {len(steps)} tool call(s) are {', '.join(tools)}"
            others = ", ".join(dict.fromkeys(_name(n) for n in broken))
            says = f"{_labels(broken)}: {others} not among {', '.join(tools)}"
        if broken:
            return Finding(False, tuple(n.label for n in broken), says)
        return Finding(True, (), holds_says)
    measure, limit = str(params["measure"]), params["limit"]
    if measure == "tool_calls":
        steps = tool_steps(calls)
        over = steps[limit:] if isinstance(limit, int) else []
        if over:
            return Finding(
                False,
                tuple(n.label for n in over),
                f"{len(steps)} tool calls, over {limit}: past it {_labels(over)}",
            )
        return Finding(True, (), f"{len(steps)} tool call(s), at most {limit}")
    return _spent(measure, limit, [n for n in calls if getattr(n, "kind", None) == "llm"])


def _before(first: str, then: str, steps: list[Any]) -> Finding:
    seen = False
    broken: list[Any] = []
    count = 0
    for node in steps:
        name = _name(node)
        if name == first:
            seen = True
        elif name == then:
            count += 1
            if not seen:
                broken.append(node)
    if broken:
        ran = [n.label for n in steps if _name(n) == first]
        after = f" ({ran[0]} came later)" if ran else f" ({first} never ran)"
        return Finding(
            False,
            tuple(n.label for n in broken),
            f"{_labels(broken)} ran before any {first} call{after}",
        )
    if count == 0:
        return Finding(True, (), f"{then} was not called")
    return Finding(True, (), f"each {then} call ({count}) came after a {first} call")


def _spent(measure: str, limit: Any, models: list[Any]) -> Finding:
    """``tokens`` or ``cost_usd`` added up call by call: broken from the call that went past
    ``limit``; calls with no figure make it undetermined unless the rest is over already."""
    total = Decimal(0)
    unknown: list[tuple[Any, str]] = []
    over: list[Any] = []
    bound = Decimal(str(limit))
    for node in models:
        envelope = node.envelope or {}
        if measure == "tokens":
            tokens = call_tokens(envelope)
            figure, why = (Decimal(tokens), "") if tokens is not None else (None, "no usage")
        else:
            priced = call_cost(envelope)
            figure, why = priced.usd, priced.why
        if figure is None:
            unknown.append((node, why))
            continue
        total += figure
        if over or total > bound:
            over.append(node)
    if measure == "cost_usd":
        shown, most = f"${total:.6f}".rstrip("0").rstrip("."), f"${limit:g}"
        spent = f"{len(models)} model call(s) cost {shown}"
    else:
        shown, most = f"{total} tokens", f"{limit}"
        spent = f"{len(models)} model call(s) used {shown}"
    if over:
        return Finding(
            False,
            tuple(n.label for n in over),
            f"{spent}, over {most} from {over[0].label}"
            + (f" (not counted: {_unknown(unknown)})" if unknown else ""),
        )
    if unknown:
        return Finding(
            None, (), f"{shown} counted, within {most}, but not counted: {_unknown(unknown)}"
        )
    return Finding(True, (), f"{spent}, within {most}")


def _unknown(unknown: list[tuple[Any, str]]) -> str:
    reasons: dict[str, list[str]] = {}
    for node, why in unknown:
        reasons.setdefault(why, []).append(node.label)
    return "; ".join(f"{', '.join(labels)} ({why})" for why, labels in reasons.items())


use_rule_checker(lambda rule, calls: check_rule(rule, calls).calls)
