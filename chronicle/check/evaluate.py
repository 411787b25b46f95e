"""``chronicle.evaluate``: a trace (or a replay) checked against its agent's profile, by code
(``checks.py``) and, when asked, by a model (``judge.py``)."""

from __future__ import annotations

from chronicle.agent import AgentProfile
from chronicle.check.calls import Replayed, evaluation_calls
from chronicle.check.checks import (
    Evaluation,
    Source,
    Verdict,
    load_source,
    model_free_verdicts,
    subjects_of,
    trace_id_of,
    unjudged,
)
from chronicle.check.judge import Judge, judge_verdicts
from chronicle.check.kept import EvaluationRecording
from chronicle.check.trajectory import (
    Mode,
    Reference,
    check_mode,
    load_reference,
    trajectory_verdict,
)
from chronicle.errors import ConfigurationError
from chronicle.read.traces import TraceTree

__all__ = ["evaluate"]


def evaluate(
    source: Source,
    profile: AgentProfile | None = None,
    *,
    judge: object | None = None,
    judge_model: str | None = None,
    judge_runs: int = 1,
    reference: object | None = None,
    trajectory: Mode | None = None,
    trajectory_args: bool = False,
    url: str | None = None,
    save: bool = False,
) -> Evaluation:
    """Check a trace (its id, or a ``TraceTree`` from ``chronicle.show``) or a finished replay
    run (``with chronicle.replay(...) as run``; an incident's run of several spans too) against
    its agent's profile: one ``Verdict`` per check, ``pass``, ``fail`` or ``undetermined``.

    Without a model: the tools called are the profile's, their arguments validate against the
    tools' JSON Schemas, the model calls use the profile's model, temperature and
    ``max_tokens``, and each ``Constraint`` with a ``check`` holds. ``judge`` (an OpenAI- or
    Anthropic-style client, wrapped here so its calls are recorded) asking ``judge_model``
    reads each instruction, each constraint no check decided, and the goal; without it those
    are ``undetermined``. ``judge_runs=N`` asks each of those questions N times: the verdict is
    the answer most runs gave (a tie ``undetermined``), with each run's answer in
    ``Verdict.runs`` and their ``pass_rate``; every run is a recorded call.

    ``reference`` (a trace id, an incident file, a ``TraceTree`` or a finished replay run) adds
    a ``trajectory`` verdict: the tool calls against the reference's, by ``trajectory`` mode
    (``strict``, the default, ``unordered``, ``subset`` or ``superset``, as LangChain's
    agentevals defines them), by name, and by arguments too with ``trajectory_args=True``; a
    fail names the first call that breaks it. A trace with no profile is then checked for its
    trajectory alone (``Evaluation.notes`` says so).

    ``profile`` replaces the recorded one (a trace takes the tools it recorded when ``profile``
    derives its own, ``tools=None``: ``Evaluation.notes`` says so); otherwise a trace is
    checked against each span's recorded profile, with the constraint checks of the profile
    ``configure(agent=...)`` set when its ``agent_id`` is the recorded one, and a replay
    against the configured profile.
    ``url`` is the control plane to read a trace id from (default: as ``chronicle.show``).

    ``save=True`` keeps the verdicts on the control plane: a trace of their own linked to the one
    evaluated (labels ``chronicle.evaluates``, one per check with its status), holding one
    envelope per verdict and the judge's calls; ``Evaluation.saved_as`` is its id, and
    ``chronicle traces --failing CHECK`` and ``chronicle agents`` read it back. It needs a
    configured control plane and a trace to link to (a trace, or a replay recorded with
    ``record=True``); ``chronicle.flush()`` waits for it to be saved.

    Raises ``ControlPlaneError`` when the trace cannot be read, ``ConfigurationError`` when
    there is no profile to check against or the judge is not usable, ``ReplayError`` for a
    replay still running. A check that raises and a judge's malformed answer are
    ``undetermined`` verdicts, never exceptions.
    """
    asked = Judge.of(judge, judge_model) if judge is not None else None
    runs = _judge_runs(judge_runs, asked)
    mode = _trajectory_mode(reference, trajectory, trajectory_args)
    loaded = load_source(source, url=url)
    compared = load_reference(reference, url=url) if reference is not None else None
    if not save:
        return _checked(loaded, profile, asked, runs, compared, mode, trajectory_args)
    evaluates = trace_id_of(loaded)
    if evaluates is None:
        raise ConfigurationError(
            "save",
            "links the verdicts to the trace evaluated, and this replay recorded none: evaluate "
            "a trace id or a TraceTree, or a replay run with record=True",
        )
    if asked is None:  # nothing to record while checking: the trace is labelled as it opens
        evaluation = _checked(loaded, profile, asked, runs, compared, mode, trajectory_args)
        with EvaluationRecording(evaluates, evaluation) as kept:
            evaluation.saved_as = kept.keep(evaluation)
        return evaluation
    with EvaluationRecording(evaluates) as kept:  # the judge's calls recorded into it
        evaluation = _checked(loaded, profile, asked, runs, compared, mode, trajectory_args)
        evaluation.saved_as = kept.keep(evaluation)
    return evaluation


def _checked(
    loaded: TraceTree | Replayed,
    profile: AgentProfile | None,
    asked: Judge | None,
    runs: int,
    compared: Reference | None,
    mode: Mode | None,
    trajectory_args: bool,
) -> Evaluation:
    """The verdicts of ``loaded`` (see ``evaluate``)."""
    notes: list[str] = []
    try:
        calls, subjects = subjects_of(loaded, profile)
    except ConfigurationError as exc:
        if compared is None:
            raise
        calls, subjects = evaluation_calls(loaded), []
        notes.append(f"only the trajectory was checked: {exc}")
    verdicts: list[Verdict] = []
    for subject in subjects:
        decided = model_free_verdicts(subject)
        if asked is None:
            verdicts += decided + unjudged(subject)
            continue
        judged = judge_verdicts(subject, asked, decided, runs)
        replaced = {v.rule for v in judged if v.check == "constraint"}
        verdicts += [v for v in decided if not (v.check == "constraint" and v.rule in replaced)]
        verdicts += judged
    if compared is not None and mode is not None:
        agent_ids = {str(s.form.get("agent_id")) for s in subjects}
        agent_id = next(iter(agent_ids)) if len(agent_ids) == 1 else None
        verdicts.append(
            trajectory_verdict(
                calls, compared, mode, with_arguments=trajectory_args, agent_id=agent_id
            )
        )
    profiles = {str(s.form.get("agent_id")): s.form for s in subjects}
    notes = [s.note for s in subjects if s.note is not None] + notes
    return Evaluation(verdicts, calls, trace_id_of(loaded), profiles, notes)


def _judge_runs(runs: object, judge: Judge | None) -> int:
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigurationError(
            "judge_runs",
            f"is how many times the judge is asked each question (1 or more), got {runs!r}",
        )
    if runs > 1 and judge is None:
        raise ConfigurationError(
            "judge_runs", "asks a judge several times: pass judge=client and judge_model= too"
        )
    return runs


def _trajectory_mode(reference: object, mode: object, with_arguments: bool) -> Mode | None:
    if reference is None:
        if mode is not None or with_arguments:
            raise ConfigurationError(
                "trajectory",
                "compares the tool calls with a reference's: pass reference= (a trace id, an "
                "incident file or a TraceTree) too",
            )
        return None
    return check_mode("strict" if mode is None else mode)
