"""``chronicle.evaluate``: a trace (or a replay) checked against its agent's profile, by code
(``checks.py``) and, when asked, by a model (``judge.py``)."""

from __future__ import annotations

from chronicle.agent import AgentProfile
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

__all__ = ["evaluate"]


def evaluate(
    source: Source,
    profile: AgentProfile | None = None,
    *,
    judge: object | None = None,
    judge_model: str | None = None,
    url: str | None = None,
) -> Evaluation:
    """Check a trace (its id, or a ``TraceTree`` from ``chronicle.show``) or a finished replay
    run (``with chronicle.replay(...) as run``; an incident's run of several spans too) against
    its agent's profile: one ``Verdict`` per check, ``pass``, ``fail`` or ``undetermined``.

    Without a model: the tools called are the profile's, their arguments validate against the
    tools' JSON Schemas, the model calls use the profile's model, temperature and
    ``max_tokens``, and each ``Constraint`` with a ``check`` holds. ``judge`` (an OpenAI- or
    Anthropic-style client, wrapped here so its calls are recorded) asking ``judge_model``
    reads each instruction, each constraint no check decided, and the goal; without it those
    are ``undetermined``.

    ``profile`` replaces the recorded one (a trace takes the tools it recorded when ``profile``
    derives its own, ``tools=None``: ``Evaluation.notes`` says so); otherwise a trace is
    checked against each span's recorded profile, with the constraint checks of the profile
    ``configure(agent=...)`` set when its ``agent_id`` is the recorded one, and a replay
    against the configured profile.
    ``url`` is the control plane to read a trace id from (default: as ``chronicle.show``).

    Raises ``ControlPlaneError`` when the trace cannot be read, ``ConfigurationError`` when
    there is no profile to check against or the judge is not usable, ``ReplayError`` for a
    replay still running. A check that raises and a judge's malformed answer are
    ``undetermined`` verdicts, never exceptions.
    """
    asked = Judge.of(judge, judge_model) if judge is not None else None
    loaded = load_source(source, url=url)
    calls, subjects = subjects_of(loaded, profile)
    verdicts: list[Verdict] = []
    for subject in subjects:
        decided = model_free_verdicts(subject)
        if asked is None:
            verdicts += decided + unjudged(subject)
            continue
        judged = judge_verdicts(subject, asked, decided)
        replaced = {v.rule for v in judged if v.check == "constraint"}
        verdicts += [v for v in decided if not (v.check == "constraint" and v.rule in replaced)]
        verdicts += judged
    profiles = {str(s.form.get("agent_id")): s.form for s in subjects}
    notes = [s.note for s in subjects if s.note is not None]
    return Evaluation(verdicts, calls, trace_id_of(loaded), profiles, notes)
