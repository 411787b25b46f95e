"""The checks that need no model: a trace's (or a replay's) calls against its agent's profile.

A trace's calls are read as ``chronicle show`` reads them (``CallNode`` rows, in call order),
and each check of the profile becomes one ``Verdict``: ``pass``, ``fail`` or ``undetermined``,
with the rule's text, the calls that show it (``issue_refund#1``) and a reason.

The checks that need no model, one verdict each:

- ``tools``: every tool the agent called, and every tool call a model produced, is one the
  profile lists (the span's entry, the top-level call that is the agent itself, is not a tool;
  a sub-agent decorated as a tool is one, so a profile that lists its tools lists it too);
- ``arguments``: each such call's arguments validate against that tool's JSON Schema (a model's
  tool call from its output, and the tool call's recorded input);
- ``model``, ``temperature``, ``max_tokens``: each model call asked for the profile's model and
  temperature, and neither asked for nor used more output tokens than its ``max_tokens``
  (only the settings the profile names are checked);
- ``constraint``: each ``Constraint`` with a ``check`` runs it over the calls.

Instructions, the goal, and constraints without a check are read by the judge only
(``judge=``; ``judge.py``); without one they are ``undetermined``, saying so.

The profile: ``profile=`` when given; else, for a trace, each span's recorded profile, whose
constraint checks come from the profile ``configure(agent=...)`` set in this process when its
``agent_id`` is the recorded one (a check is code, and code is not recorded). A replay records
no profile: it takes ``profile=`` or the configured one.

The tools a trace is checked against: those ``profile=`` lists (``tools=[...]``, the user's
own list); a profile that derives its tools (``tools=None``: the ``@boundary`` tools a process
registered) takes those the trace's recorded profile lists, since the process checking the
trace (``chronicle evaluate --profile module:PROFILE``) need not import the agent's tools, and
the recorded list is what the agent had. ``Evaluation.notes`` says which.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from chronicle import runtime
from chronicle.agent import AgentProfile, Constraint, Rule, recorded_rules
from chronicle.check.calls import Replayed, evaluation_calls, is_entry, raw_input, tool_calls
from chronicle.check.rules import check_rule
from chronicle.check.schema import check_arguments
from chronicle.errors import ConfigurationError, ReplayError, plural
from chronicle.read.traces import CallNode, TraceTree, show
from chronicle.replay.incident import IncidentRun
from chronicle.replay.run import ReplayRun
from chronicle.wire import AGENT, LOSSY_INPUT, TRUNCATED

__all__ = [
    "Evaluation",
    "Subject",
    "Verdict",
    "evaluation_calls",
    "load_source",
    "model_free_verdicts",
    "subjects_of",
    "trace_id_of",
    "unjudged",
]

Status = Literal["pass", "fail", "undetermined"]
Source = TraceTree | Replayed | str

_TEXT_LIMIT = 300


@dataclass(frozen=True)
class Verdict:
    """One check of a profile over a trace's calls.

    ``check`` names the check (``tools``, ``arguments``, ``model``, ``temperature``,
    ``max_tokens``, ``constraint``, ``instruction``, ``goal``); ``rule`` is its text (a
    constraint's or an instruction's own words); ``calls`` the calls that show it, as
    ``chronicle show`` names them (``issue_refund#1``); ``reason`` says why, in a line;
    ``by`` is ``chronicle`` (code) or ``judge`` (a model). A judge asked several times
    (``judge_runs=N``) keeps each run's answer in ``runs`` and its ``pass_rate``; ``status`` is
    then the answer most runs gave (a tie: ``undetermined``).
    """

    check: str
    rule: str
    status: Status
    calls: tuple[str, ...] = ()
    reason: str = ""
    agent_id: str | None = None
    by: Literal["chronicle", "judge"] = "chronicle"
    runs: tuple[Status, ...] = ()
    """Each judge run's answer, in order (empty: asked once, or decided by code)."""

    @property
    def pass_rate(self) -> float | None:
        """The share of judge runs that answered ``pass``; ``None`` without runs."""
        return self.runs.count("pass") / len(self.runs) if self.runs else None

    def explain(self) -> str:
        """The verdict in one line, for an assertion message or a terminal."""
        where = f" ({', '.join(self.calls)})" if self.calls else ""
        return f"{self.status.upper()} [{self.check}] {self.rule}{where}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """The verdict as JSON values (``runs`` and ``pass_rate`` only when the judge ran
        several times)."""
        body = dataclasses.asdict(self) | {"calls": list(self.calls)}
        del body["runs"]
        if self.runs:
            body |= {"runs": list(self.runs), "pass_rate": self.pass_rate}
        return body


@dataclass
class Evaluation:
    """What ``evaluate`` found: one ``Verdict`` per check, in the order checked.

    ``passed`` is ``True`` when no verdict failed (an undetermined one does not fail);
    ``failed`` lists the failures; ``verdict(rule)`` finds one by its rule text or its check.
    ``calls`` are the calls the checks read, in order; ``trace_id`` the trace's id (``None``
    for a replay not recorded).
    """

    verdicts: list[Verdict]
    calls: list[CallNode] = field(repr=False)
    trace_id: str | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    """The profiles checked against, by ``agent_id``, in their recorded form."""
    notes: list[str] = field(default_factory=list)
    """What the checks were read against, when not plainly the profile given (where its
    tools came from): printed before the summary line."""
    saved_as: str | None = None
    """The evaluation trace the verdicts were saved as (``save=True``), else ``None``."""

    @property
    def passed(self) -> bool:
        """No verdict failed."""
        return not self.failed

    @property
    def failed(self) -> list[Verdict]:
        """The verdicts that failed."""
        return [v for v in self.verdicts if v.status == "fail"]

    def verdict(self, rule: str) -> Verdict:
        """The verdict whose rule text is ``rule`` (else whose check is named ``rule``, when it
        is the only one). Raises ``LookupError`` listing the rules."""
        for verdict in self.verdicts:
            if verdict.rule == rule:
                return verdict
        named = [v for v in self.verdicts if v.check == rule]
        if len(named) == 1:
            return named[0]
        rules = "; ".join(repr(v.rule) for v in self.verdicts)
        raise LookupError(f"no verdict for {rule!r}; the rules checked: {rules}")

    def render(self) -> str:
        """One line per verdict, failures first, then a summary line."""
        order = {"fail": 0, "undetermined": 1, "pass": 2}
        lines = [v.explain() for v in sorted(self.verdicts, key=lambda v: order[v.status])]
        lines += self.notes
        counts = {s: sum(1 for v in self.verdicts if v.status == s) for s in order}
        lines.append(
            f"{counts['fail']} failed, {counts['pass']} passed, "
            f"{counts['undetermined']} undetermined ({plural(len(self.calls), 'call')})"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """``{"trace_id", "passed", "verdicts": [...], "notes": [...]}``, and ``saved_as`` when
        the verdicts were saved."""
        body: dict[str, Any] = {
            "trace_id": self.trace_id,
            "passed": self.passed,
            "verdicts": [v.to_json() for v in self.verdicts],
            "notes": list(self.notes),
        }
        if self.saved_as is not None:
            body["saved_as"] = self.saved_as
        return body

    def __str__(self) -> str:
        return self.render()


# ---- the profile -------------------------------------------------------------------------------


def _configured() -> AgentProfile | None:
    active = runtime.configured()  # evaluating must not build a runtime
    return active.settings.agent if active is not None else None


def _recorded_profiles(tree: TraceTree) -> dict[str, dict[str, Any]]:
    """The span id -> recorded profile (spans without one left out)."""
    found: dict[str, dict[str, Any]] = {}
    for span in tree.spans:
        profile = (span.get("metadata") or {}).get(AGENT)
        if isinstance(profile, dict) and isinstance(profile.get("agent_id"), str):
            found[str(span.get("span_id"))] = profile
    return found


@dataclass
class Subject:
    """One profile and the calls checked against it."""

    form: dict[str, Any]
    checks: tuple[Constraint, ...] | None
    """The constraints with their code; ``None`` when no profile in this process matches."""
    calls: list[CallNode]
    note: str | None = None
    """Where its tools came from, when not the profile given (``Evaluation.notes``)."""


def _subjects(
    source: TraceTree | Replayed, calls: list[CallNode], profile: AgentProfile | None
) -> list[Subject]:
    if profile is not None:
        given: dict[str, Any] = profile.to_json()
        note: str | None = None
        if profile.tools is None and isinstance(source, TraceTree):
            given, note = _with_recorded_tools(source, profile, given)
        return [Subject(given, profile.checks, calls, note)]
    configured = _configured()
    if not isinstance(source, TraceTree):
        if configured is None:
            raise ConfigurationError(
                "evaluate",
                "a replay records no agent profile: pass profile=AgentProfile(...) (the one "
                "the agent runs), or configure(agent=...) in this process",
            )
        return [Subject(configured.to_json(), configured.checks, calls)]
    recorded = _recorded_profiles(source)
    if not recorded:
        raise ConfigurationError(
            "evaluate",
            f"trace {source.trace_id} carries no agent profile (no span has "
            f"metadata[{AGENT!r}]): pass profile=AgentProfile(...), or record the agent with "
            "configure(agent=...)",
        )
    by_agent: dict[str, Subject] = {}
    for node in calls:
        form = recorded.get(str(node.span.get("span_id")))
        if form is None:
            continue
        agent_id = str(form["agent_id"])
        subject = by_agent.get(agent_id)
        if subject is None:
            subject = by_agent[agent_id] = Subject(form, _checks_for(form), [])
        subject.calls.append(node)
    for form in recorded.values():  # a profile whose span made no call is still checked
        by_agent.setdefault(str(form["agent_id"]), Subject(form, _checks_for(form), []))
    return list(by_agent.values())


def _with_recorded_tools(
    tree: TraceTree, profile: AgentProfile, form: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """``profile``'s form with the tools its recorded profile on ``tree`` lists (the one of its
    name, else the only one), and the note saying so; ``form`` unchanged (with a note) when the
    trace recorded none to take."""
    derived = form.get("tools") or []
    recorded = list(_recorded_profiles(tree).values())
    named = [r for r in recorded if r.get("name") == profile.name]
    forms = named or (recorded if len({str(r.get("tools")) for r in recorded}) == 1 else [])
    tools = forms[0].get("tools") if forms else None
    if not isinstance(tools, list):
        return form, (
            f"tools: the {len(derived)} this process registered ({profile.name!r} derives its "
            "tools: tools=None), as the trace recorded no profile to take them from; list "
            "them (AgentProfile(tools=[...])) or import the agent's tools with the profile"
        )
    names = ", ".join(str(t.get("name")) for t in tools if isinstance(t, dict)) or "none"
    return {**form, "tools": tools}, (
        f"tools: the {len(tools)} the trace's recorded profile lists ({names}), as "
        f"{profile.name!r} derives its tools (tools=None) from the @boundary tools a process "
        "registers; list them (AgentProfile(tools=[...])) to check against your own list"
    )


def _checks_for(form: Mapping[str, Any]) -> tuple[Constraint, ...] | None:
    configured = _configured()
    if configured is not None and configured.agent_id == form.get("agent_id"):
        return configured.checks
    return None


# ---- the model-free checks ---------------------------------------------------------------------


def _tools_by_name(form: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    tools = form.get("tools")
    if not isinstance(tools, list):
        return None
    return {str(t.get("name")): t for t in tools if isinstance(t, dict) and t.get("name")}


def _check_tools(form: Mapping[str, Any], calls: list[CallNode], agent_id: str) -> list[Verdict]:
    tools = _tools_by_name(form)
    if tools is None:
        return []
    rule = "every tool called is one the profile lists"
    unlisted: list[str] = []
    names: list[str] = []
    for node in calls:
        if node.kind == "tool" and not is_entry(node):
            name = str((node.envelope or {}).get("name"))
            if name not in tools:
                unlisted.append(node.label)
                names.append(name)
        elif node.kind == "llm":
            for block in tool_calls(node):
                if str(block.get("name")) not in tools:
                    unlisted.append(f"{node.label} ({block.get('name')})")
                    names.append(str(block.get("name")))
    if unlisted:
        listed = ", ".join(sorted(tools)) or "none"
        reason = f"{', '.join(dict.fromkeys(names))} not in the profile's tools ({listed})"
        return [Verdict("tools", rule, "fail", tuple(unlisted), reason, agent_id)]
    return [Verdict("tools", rule, "pass", (), "every tool called is listed", agent_id)]


def _check_arguments(
    form: Mapping[str, Any], calls: list[CallNode], agent_id: str
) -> list[Verdict]:
    tools = _tools_by_name(form)
    if not tools:
        return []
    rule = "every tool call's arguments validate against the tool's JSON Schema"
    failed: list[str] = []
    reasons: list[str] = []
    checked = 0
    unreadable: list[str] = []
    not_run: dict[str, list[str]] = {}  # why a schema check could not run: the calls
    partly: list[str] = []  # what of a schema was not applied (a pattern not run)
    for node in calls:
        candidates: list[tuple[str, str, object]] = []
        metadata = (node.envelope or {}).get("metadata") or {}
        if node.kind == "tool" and any(metadata.get(key) for key in (LOSSY_INPUT, TRUNCATED)):
            unreadable.append(node.label)  # {"$repr": ...} or a cut value is not the argument
            continue
        if node.kind == "tool" and not is_entry(node):
            name = str((node.envelope or {}).get("name"))
            candidates.append((name, node.label, raw_input(node)))
        elif node.kind == "llm":
            for block in tool_calls(node):
                name = str(block.get("name"))
                candidates.append((name, f"{node.label} ({name})", block.get("arguments")))
        for name, label, arguments in candidates:
            schema = (tools.get(name) or {}).get("parameters")
            if not isinstance(schema, dict):
                continue
            found = check_arguments(arguments, schema)
            if found.skipped is not None:
                not_run.setdefault(found.skipped, []).append(label)
                continue
            checked += 1
            partly.extend(note for note in found.unchecked if note not in partly)
            if found.errors:
                failed.append(label)
                reasons.append(f"{label}: {found.errors[0]}")
    skipped = (
        f"; not checked, recorded in part (lossy or cut): {', '.join(unreadable)}"
        if unreadable
        else ""
    )
    for why, labels in not_run.items():
        skipped += f"; not checked, {why}: {', '.join(labels)}"
    skipped += "".join(f"; in part: {note}" for note in partly)
    if failed:
        reason = "; ".join(reasons) + skipped
        return [Verdict("arguments", rule, "fail", tuple(failed), reason, agent_id)]
    said = f"{checked} tool call(s) validate" if checked else "no tool call to check"
    status: Status = "undetermined" if not_run else "pass"
    return [Verdict("arguments", rule, status, (), said + skipped, agent_id)]


def _llm_input(node: CallNode) -> dict[str, Any]:
    body = (node.envelope or {}).get("input")
    return body if isinstance(body, dict) else {}


def _check_model(form: Mapping[str, Any], calls: list[CallNode], agent_id: str) -> list[Verdict]:
    model = form.get("model")
    if not isinstance(model, dict):
        return []
    llm = [node for node in calls if node.kind == "llm"]
    verdicts: list[Verdict] = []
    name = model.get("name")
    if isinstance(name, str) and name:
        asked_for = [(n, _llm_input(n).get("model")) for n in llm]
        verdicts.append(
            _setting(
                "model",
                f"model calls ask for {name}",
                [(n, f"asked for {m!r}") for n, m in asked_for if m != name],
                f"{len(llm)} model call(s) ask for {name}",
                agent_id,
            )
        )
    temperature = model.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        other: list[tuple[CallNode, str]] = []
        for node in llm:
            params = _llm_input(node).get("params") or {}
            used = params.get("temperature") if isinstance(params, dict) else None
            if used is None:
                other.append((node, "set none (the provider's default)"))
            elif abs(float(used) - float(temperature)) > 1e-9:
                other.append((node, f"used {used:g}"))
        verdicts.append(
            _setting(
                "temperature",
                f"model calls use temperature {temperature:g}",
                other,
                f"{len(llm)} model call(s) use {temperature:g}",
                agent_id,
            )
        )
    most = model.get("max_tokens")
    if isinstance(most, int) and not isinstance(most, bool):
        over: list[tuple[CallNode, str]] = []
        for node in llm:
            params = _llm_input(node).get("params") or {}
            asked = params.get("max_tokens") if isinstance(params, dict) else None
            output = (node.envelope or {}).get("output") or {}
            usage = output.get("usage") if isinstance(output, dict) else None
            used = (
                int(usage.get("output") or 0) + int(usage.get("reasoning") or 0)
                if isinstance(usage, dict)
                else None
            )
            if isinstance(asked, int) and asked > most:
                over.append((node, f"asked for {asked}"))
            elif used is not None and used > most:
                over.append((node, f"used {used} output tokens"))
        verdicts.append(
            _setting(
                "max_tokens",
                f"model calls stay within max_tokens {most}",
                over,
                f"{len(llm)} model call(s) within {most}",
                agent_id,
            )
        )
    return verdicts


def _setting(
    check: str, rule: str, offenders: list[tuple[CallNode, str]], holds: str, agent_id: str
) -> Verdict:
    """A model-setting check's verdict: ``fail`` naming each offending call and what it did,
    else ``pass`` saying what held."""
    return Verdict(
        check,
        rule,
        "fail" if offenders else "pass",
        tuple(node.label for node, _ in offenders),
        "; ".join(f"{node.label} {what}" for node, what in offenders) or holds,
        agent_id,
    )


def _offending(found: object, calls: list[CallNode]) -> tuple[bool, tuple[str, ...]]:
    """A check's answer as (holds, the calls that break it): ``True``/``False``, or the
    offending calls (``CallNode`` rows or labels; empty: it holds)."""
    if isinstance(found, bool):
        return found, ()
    if isinstance(found, Iterable) and not isinstance(found, (str, bytes, Mapping)):
        labels = tuple(item.label if isinstance(item, CallNode) else str(item) for item in found)
        return not labels, labels
    raise TypeError(
        f"returned {type(found).__name__}; a check returns True when the rule holds, False "
        "(or the calls that break it) when it does not"
    )


def _check_constraints(subject: Subject, agent_id: str) -> list[Verdict]:
    verdicts: list[Verdict] = []
    texts = subject.form.get("constraints")
    for text in texts if isinstance(texts, list) else []:
        constraint = next((c for c in subject.checks or () if c.text == text), None)
        if constraint is None or constraint.check is None:  # a rule recorded needs no code
            constraint = recorded_rules(subject.form).get(str(text), constraint)
        if isinstance(constraint, Constraint) and isinstance(constraint.check, Rule):
            found = check_rule(constraint.check, subject.calls)
            status: Status = (
                "undetermined" if found.holds is None else "pass" if found.holds else "fail"
            )
            verdicts.append(
                Verdict("constraint", constraint.text, status, found.calls, found.reason, agent_id)
            )
            continue
        if constraint is None or constraint.check is None:
            reason = (
                "no check for it in this process: configure(agent=...) with this profile, "
                "or pass profile=, to run its Constraint check; the judge (judge=) reads it"
                if subject.checks is None
                else "it has no check (Constraint(text, check=...)); the judge (judge=) reads it"
            )
            verdicts.append(Verdict("constraint", str(text), "undetermined", (), reason, agent_id))
            continue
        name = getattr(constraint.check, "__name__", "check")
        try:
            holds, calls = _offending(constraint.check(list(subject.calls)), subject.calls)
        except (ReplayError, KeyboardInterrupt):
            raise
        except Exception as exc:
            verdicts.append(
                Verdict(
                    "constraint",
                    constraint.text,
                    "undetermined",
                    (),
                    f"its check {name} raised {type(exc).__name__}: {_short(str(exc))}",
                    agent_id,
                )
            )
            continue
        reason = (
            f"its check {name} holds over {plural(len(subject.calls), 'call')}"
            if holds
            else f"its check {name} found the rule broken"
        )
        verdicts.append(
            Verdict(
                "constraint", constraint.text, "pass" if holds else "fail", calls, reason, agent_id
            )
        )
    return verdicts


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _TEXT_LIMIT else line[: _TEXT_LIMIT - 1] + "…"


# ---- evaluate ----------------------------------------------------------------------------------


def load_source(source: Source, *, url: str | None = None) -> TraceTree | Replayed:
    """A trace id read from the control plane, or the tree or replay given."""
    if isinstance(source, str):
        return show(source, url=url)
    if isinstance(source, (TraceTree, ReplayRun, IncidentRun)):
        return source
    raise TypeError(
        f"evaluate takes a trace id, a TraceTree (chronicle.show) or a finished replay run, "
        f"got {type(source).__name__}"
    )


def model_free_verdicts(subject: Subject) -> list[Verdict]:
    """The checks that need no model, for one profile over its calls."""
    agent_id = str(subject.form.get("agent_id") or "")
    return [
        *_check_tools(subject.form, subject.calls, agent_id),
        *_check_arguments(subject.form, subject.calls, agent_id),
        *_check_model(subject.form, subject.calls, agent_id),
        *_check_constraints(subject, agent_id),
    ]


def subjects_of(
    source: TraceTree | Replayed, profile: AgentProfile | None
) -> tuple[list[CallNode], list[Subject]]:
    """The calls of ``source`` and the profiles they are checked against."""
    if profile is not None and not isinstance(profile, AgentProfile):
        raise ConfigurationError(
            "evaluate profile", f"expects a chronicle.AgentProfile, got {type(profile).__name__}"
        )
    calls = evaluation_calls(source)
    return calls, _subjects(source, calls, profile)


def unjudged(subject: Subject) -> list[Verdict]:
    """The instructions and the goal, ``undetermined`` for want of a judge."""
    agent_id = str(subject.form.get("agent_id") or "")
    found: list[Verdict] = []
    instructions = subject.form.get("instructions")
    for text in instructions if isinstance(instructions, list) else []:
        found.append(
            Verdict(
                "instruction",
                str(text),
                "undetermined",
                (),
                "only a model can read it: evaluate(..., judge=client) or --judge",
                agent_id,
            )
        )
    goal = subject.form.get("goal")
    if isinstance(goal, str) and goal:
        found.append(
            Verdict(
                "goal",
                goal,
                "undetermined",
                (),
                "only a model can read it: evaluate(..., judge=client) or --judge",
                agent_id,
            )
        )
    return found


def trace_id_of(source: TraceTree | Replayed) -> str | None:
    """The id of the trace evaluated (a replay's: the new trace it recorded, if any)."""
    if isinstance(source, TraceTree):
        return source.trace_id
    if isinstance(source, IncidentRun):
        return None
    return source.new_trace_id
