"""The correction a failed check leaves behind: the incident file and a pytest test that
replays it with the broken rule as its assertion; and ``check_trace``, the evaluation
``chronicle evaluate TRACE_ID`` prints (``chronicle/cli/evaluate.py``) and writes the correction
of (``--write-test DIR``).

The test calls the agent's recorded entry (``chronicle.entry``: the top-level boundary, run
live) with its recorded arguments inside ``chronicle.replay(incident, plan)``, the tools whose
calls broke the rule live too (the cut-points: where a fix shows), every other call answered by
its recording, then evaluates the replay against the profile and asserts the rule's verdict is
``pass``. On the recorded behaviour it fails; once the agent is fixed it passes, a fix that adds
calls too: the plan records new calls (``ReplayPlan().record_new()``), so a call the fix adds
(an approval asked before a refund) runs live and is added to the incident file, which then
replays it. Only the checks that need no model are written as tests (a judge's verdict needs a
model to check again).

The control plane's API cannot attach an evaluation to a trace: a closed span is immutable
(``PUT /v1/traces/{t}/spans/{s}`` is a no-op on it) and there is no other write to a recorded
trace. ``--save`` keeps the verdicts as a trace of their own linked to it (``kept.py``);
without it the judge's own calls are recorded as a trace of their own, labelled
``evaluates: TRACE``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chronicle import runtime
from chronicle.agent import AgentProfile
from chronicle.check.checks import Evaluation, Verdict
from chronicle.check.evaluate import evaluate
from chronicle.check.judge import judge_client
from chronicle.errors import ConfigurationError
from chronicle.read.connection import instant
from chronicle.read.traces import TraceTree, show
from chronicle.recording.request import record
from chronicle.save.incident import Incident, IncidentSpan
from chronicle.wire import ENTRY, INVOCATION

__all__ = ["Checked", "Written", "check_trace", "load_profile", "recording_to", "write_test"]


def load_profile(path: str) -> AgentProfile:
    """The ``AgentProfile`` named ``module:NAME`` (imported with the current folder on
    ``sys.path``, as ``python -m`` does). Raises ``ConfigurationError`` saying what to fix."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(
            "--profile", f"takes module:NAME (app.agent:PROFILE), got {path!r}"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:
        raise ConfigurationError(
            "--profile", f"{path} cannot be imported: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(target, AgentProfile):
        raise ConfigurationError(
            "--profile", f"{path} is a {type(target).__name__}, not a chronicle.AgentProfile"
        )
    return target


@dataclass(frozen=True)
class Written:
    """What ``write_test`` wrote: the ``incident`` file, the ``test`` file, the rules it asserts
    and the calls where each was broken."""

    incident: Path
    test: Path
    rules: tuple[Verdict, ...]


_PYTHON_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", re.ASCII)


def _python_name(text: str, what: str) -> str:
    """``text`` when it is a dotted Python name; the written test imports and calls it, so a
    recording (production data) that names anything else is refused, never written as code."""
    if not _PYTHON_NAME.fullmatch(text):
        raise ConfigurationError(
            "write_test",
            f"the recording names its {what} {text!r}, which is not a Python name, so no test is "
            "written from it; check the trace came from your agent, or write the test by hand",
        )
    return text


def _in_docstring(text: object) -> str:
    """``text`` made safe inside the written test's triple-quoted docstrings: it cannot close
    them (a recorded name is production data), escape out, or break a line."""
    clean = "".join(c if c.isprintable() else " " for c in str(text))
    return clean.replace("\\", "\\\\").replace('"' * 3, "'" * 3)


def _slug(text: str, most: int = 60) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:most].rstrip("_") or "rule"


def _entry_span(tree: TraceTree) -> tuple[str, dict[str, Any]]:
    """The span whose top-level call names its entry, and that call's envelope."""
    for envelope in tree.envelopes:
        if envelope.get("parent_envelope_id") is None and isinstance(
            (envelope.get("metadata") or {}).get(ENTRY), str
        ):
            return str(envelope.get("span_id")), envelope
    raise ConfigurationError(
        "--write-test",
        f"trace {tree.trace_id} names no entry (no top-level call carries "
        f"metadata[{ENTRY!r}]), so no test can call the agent again; record the request through "
        "a @chronicle.boundary function",
    )


def _cut_points(
    verdicts: Sequence[Verdict], tree: TraceTree, span_id: str
) -> list[tuple[str, int]]:
    kinds = {n.label: n.kind for n in tree.nodes if n.envelope is not None}
    found: dict[tuple[str, int], None] = {}
    for verdict in verdicts:
        for label in verdict.calls:
            if kinds.get(label) != "tool":  # a model's own tool call, or a model call
                continue
            name, _, n = label.rpartition("#")
            if name and n.isdigit():
                found[(name, int(n))] = None
    return list(found)


_TEMPLATE = '''"""Written by `chronicle evaluate {trace_id} --write-test`: trace
{trace_id} broke {count} rule(s) of agent {name} ({agent_id}).

Each test replays the recorded request ({incident}): the agent's entry and the tools whose calls
broke the rule run live (the cut-points), every other call is answered by its recording; then
the replay is evaluated against the profile and the rule must pass. On the recorded behaviour it
fails; fix the agent (its code, prompt or tool configuration) until it passes. A fix may make
calls the recording never made (asking a manager before a large refund): they run live once and
are added to the incident file (see ``replayed``), so commit the file with the fix.
"""

import json
from pathlib import Path

import chronicle
import {module} as agent_module
{profile_import}
INCIDENT = Path(__file__).parent / {incident!r}
ENTRY = {entry_name!r}
ARGUMENTS = json.loads({arguments!r})


def replayed(cut_points):
    """The replay of the incident with the entry and ``cut_points`` live, evaluated.

    ``record_new()``: a call the fixed agent makes that has no recording runs live and is
    written into INCIDENT in its place, so the file grows by the calls the fix adds (review
    them in its diff) and the next run answers them from the file; a recorded call the fix no
    longer makes is dropped from it.
    """
    plan = chronicle.ReplayPlan().run(ENTRY, {entry_n}).record_new()
    for name, n in cut_points:
        plan.run(name, n)
    with chronicle.replay(str(INCIDENT), plan) as run:
        agent_module.{qualname}(**ARGUMENTS)
    return chronicle.evaluate(run, profile=PROFILE)
'''

_TEST = '''

def test_{slug}():
    """{check}: {rule_doc}

    Broken at {calls} in the recording.{model_note}"""
    verdict = replayed({cut_points!r}).verdict({rule!r})
    assert verdict.status == "pass", verdict.explain()
'''


def _model_note(verdict: Verdict, tree: TraceTree) -> str:
    """A line for a rule a model's own answer broke: a replay serves that answer recorded."""
    kinds = {n.label: n.kind for n in tree.nodes if n.envelope is not None}
    models = [c for c in verdict.calls if kinds.get(c.split(" (")[0]) == "llm"]
    if not models:
        return ""
    return (
        f"\n\n    The model's own answer broke it too ({_in_docstring(', '.join(models))}): a "
        "replay serves that "
        "answer as\n    recorded, so after fixing the prompt, record the request again (or run "
        "the model\n    live: ReplayPlan().run(name, n))."
    )


def write_test(
    evaluation: Evaluation,
    tree: TraceTree,
    folder: Path,
    *,
    profile_path: str | None = None,
) -> Written | None:
    """Write the incident file and the pytest test of the rules ``evaluation`` found broken by
    code (not by the judge) in ``folder`` (created if needed); ``None`` when none was.

    ``profile_path`` (``module:NAME``) is imported by the test for the profile and its
    constraint checks; without it the test rebuilds the recorded profile (its constraints then
    have no check). Raises ``ConfigurationError`` when the trace names no entry to call."""
    broken = [  # a trajectory needs its reference, which the written test does not have
        v for v in evaluation.failed if v.by == "chronicle" and v.check != "trajectory"
    ]
    if not broken:
        return None
    span_id, entry = _entry_span(tree)
    module, _, qualname = str((entry.get("metadata") or {})[ENTRY]).partition(":")
    module = _python_name(module, "entry's module")
    qualname = _python_name(qualname, "entry function")
    envelopes = [e for e in tree.envelopes if e.get("span_id") == span_id]
    span = next((s for s in tree.spans if s.get("span_id") == span_id), {})
    incident = Incident.of(
        envelopes,
        [
            IncidentSpan(
                span_id,
                span.get("service"),
                instant(span.get("started_at")),
                span.get("parent_envelope_id"),
            )
        ],
        {"written_by": f"chronicle evaluate {tree.trace_id} --write-test"},
    )
    folder.mkdir(parents=True, exist_ok=True)
    short = _slug(tree.trace_id, 12)
    incident_path = folder / f"incident_{short}.json"
    incident.write(incident_path)
    agent_id = str(broken[0].agent_id or "")
    profile_form = evaluation.profiles.get(agent_id) or next(iter(evaluation.profiles.values()))
    if profile_path is not None:
        profile_module, _, profile_name = profile_path.partition(":")
        alias = "" if profile_name == "PROFILE" else " as PROFILE"
        profile_import = f"from {profile_module} import {profile_name}{alias}\n"
    else:
        profile_import = (
            "\n# The profile as recorded: a Constraint's check is code, so pass --profile "
            "module:NAME to use yours.\nPROFILE = chronicle.AgentProfile.from_json("
            f"json.loads({json.dumps(profile_form, sort_keys=True)!r}))\n"
        )
    invocation = (entry.get("metadata") or {}).get(INVOCATION)
    raw = (entry.get("input") or {}).get("raw") or {}
    text = _TEMPLATE.format(
        trace_id=_in_docstring(tree.trace_id),
        count=len(broken),
        name=_in_docstring(repr(profile_form.get("name"))),
        agent_id=_in_docstring(agent_id),
        incident=incident_path.name,
        module=module,
        qualname=qualname,
        profile_import=profile_import,
        entry_name=str(entry.get("name")),
        entry_n=invocation if isinstance(invocation, int) else 1,
        arguments=json.dumps(raw, sort_keys=True),
    )
    seen: set[str] = set()
    for verdict in broken:
        slug = _slug(verdict.rule)
        while slug in seen:
            slug += "_again"
        seen.add(slug)
        text += _TEST.format(
            slug=slug,
            check=_in_docstring(verdict.check),
            rule_doc=_in_docstring(verdict.rule),
            calls=_in_docstring(", ".join(verdict.calls) or "no single call"),
            model_note=_model_note(verdict, tree),
            cut_points=_cut_points([verdict], tree, span_id),
            rule=verdict.rule,
        )
    test_path = folder / f"test_{_slug(str(profile_form.get('name')), 30)}_{short}.py"
    test_path.write_text(text, encoding="utf-8")
    return Written(incident_path, test_path, tuple(broken))


@dataclass(frozen=True)
class Checked:
    """What ``check_trace`` found: the ``evaluation``, the ``tree`` read, and the trace the
    judge's calls were recorded in (``judged_in``; ``None`` without a judge or a recording)."""

    evaluation: Evaluation
    tree: TraceTree
    judged_in: str | None = None


def check_trace(
    trace_id: str,
    *,
    url: str | None,
    profile_path: str | None,
    judge: str | None,
    judge_runs: int = 1,
    reference: str | None = None,
    trajectory: str | None = None,
    trajectory_args: bool = False,
    save: bool = False,
) -> Checked:
    """``chronicle evaluate TRACE_ID``'s evaluation: the trace read from ``url``, checked
    against the profile ``profile_path`` names (else the recorded one), with the judge
    ``PROVIDER:MODEL`` asked ``judge_runs`` times when given, the trajectory against
    ``reference`` when given, saved when ``save`` (``evaluate(..., save=True)``). Raises
    ``ConfigurationError`` for what the options get wrong, ``ControlPlaneError`` for a trace
    that cannot be read."""
    profile = load_profile(profile_path) if profile_path is not None else None
    tree = show(trace_id, url=url)
    compare: dict[str, Any] = {
        "reference": reference,
        "trajectory": trajectory,
        "trajectory_args": trajectory_args,
        "url": url,
    }
    if judge is None:
        if judge_runs != 1:
            raise ConfigurationError("--judge-runs", "asks a judge: give --judge PROVIDER:MODEL")
        if save:
            recording_to(url)
        return Checked(evaluate(tree, profile, save=save, **compare), tree)
    asked = judge_client(judge)
    try:
        evaluation, judged_in = _judged(tree, profile, asked, url, judge_runs, compare, save)
    finally:
        asked.close()
    return Checked(evaluation, tree, judged_in)


def recording_to(url: str | None) -> None:
    """Configure Chronicle to record to ``url`` (else the configured control plane) as the
    ``chronicle-evaluate`` service, unless this process configured it already. Raises
    ``ConfigurationError`` when there is no control plane to record to."""
    if runtime.configured() is None:
        runtime.configure(
            service_name="chronicle-evaluate",
            **({"control_plane_url": url} if url is not None else {}),
        )


def _judged(
    tree: TraceTree,
    profile: AgentProfile | None,
    judge: Any,
    url: str | None,
    runs: int,
    compare: dict[str, Any],
    save: bool,
) -> tuple[Evaluation, str | None]:
    """The evaluation with the judge, its calls recorded as a trace of their own when a
    control plane is configured (and this process has not configured Chronicle already): the
    saved evaluation's trace with ``save``."""
    if save:
        recording_to(url)
    else:
        with contextlib.suppress(ConfigurationError):  # no recording: the judge still answers
            recording_to(url)
    settings = runtime.current().settings
    asked: dict[str, Any] = {"judge": judge.client, "judge_model": judge.model, "judge_runs": runs}
    if save:
        evaluation = evaluate(tree, profile, **asked, **compare, save=True)
        return evaluation, evaluation.saved_as
    if not settings.control_plane_url:
        return evaluate(tree, profile, **asked, **compare), None
    with record("chronicle evaluate", labels={"evaluates": tree.trace_id}) as session:
        evaluation = evaluate(tree, profile, **asked, **compare)
    runtime.flush()
    return evaluation, session.trace_id
