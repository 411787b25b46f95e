"""Verdicts kept: an evaluation saved on the control plane as a trace linked to the one it
evaluates (``evaluate(..., save=True)``, ``chronicle evaluate --save``).

The evaluation trace has one span (service ``chronicle-evaluate``, no agent profile, so it is
never taken for a run of the agent), whose metadata ``chronicle.evaluates`` names the trace
evaluated. In it: the judge's calls, when a judge was asked (recorded as they are made, so a
replay of the evaluation makes none), then one envelope per verdict, ``verdict:CHECK#n`` (a
``tool`` envelope: input ``{check, rule, agent_id, evaluates}``, output ``{status, reason,
calls, by}``, with ``runs`` and ``pass_rate`` for a judge asked several times). Its labels,
written once the verdicts are known, say what it found (``chronicle/read/verdicts.py``), so
``chronicle traces --failing CHECK`` and ``chronicle agents`` read them from a listing.

Everything sent is validated against ``agentplane_primitives``' models and goes through the
runtime's delivery like any recording (queued, batched, retried); ``chronicle.flush()`` waits
for it. The span is written whatever the sample rate (the judge's calls follow it).
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from agentplane_primitives.models import Envelope
from agentplane_primitives.utils import new_envelope_id

from chronicle import runtime
from chronicle.check.checks import Evaluation, Verdict
from chronicle.errors import ConfigurationError
from chronicle.read.verdicts import evaluation_labels
from chronicle.recording.request import RequestSpan
from chronicle.recording.session import Session
from chronicle.wire import AGENT, EVALUATES, INVOCATION, SEQUENCE, RequestRecord

__all__ = ["SERVICE", "EvaluationRecording", "verdict_envelope"]

logger = logging.getLogger("chronicle")

SERVICE = "chronicle-evaluate"
"""The service of a saved evaluation's span."""


def _same(envelope: Envelope) -> Envelope:
    return envelope


def verdict_envelope(
    verdict: Verdict, session: Session, evaluates: str, at: datetime | None = None
) -> Envelope:
    """One verdict as an envelope of the evaluation's span (numbered in it), validated."""
    name = f"verdict:{verdict.check}"
    sequence, invocation = session.next_call(name)
    when = at or datetime.now(UTC)
    output: dict[str, Any] = {
        "status": verdict.status,
        "reason": verdict.reason,
        "calls": list(verdict.calls),
        "by": verdict.by,
    }
    if verdict.runs:
        output |= {"runs": list(verdict.runs), "pass_rate": verdict.pass_rate}
    return Envelope.model_validate(
        {
            "envelope_id": new_envelope_id(),
            "span_id": session.span_id,
            "trace_id": session.trace_id,
            "name": name,
            "kind": "tool",
            "attempt": 1,
            "links": [],
            "envelope_status": {
                "state": "closed",
                "status": "success",
                "started_at": when,
                "ended_at": when,
            },
            "input": {
                "raw": {
                    "check": verdict.check,
                    "rule": verdict.rule,
                    "agent_id": verdict.agent_id,
                    "evaluates": evaluates,
                }
            },
            "output": {"raw": output},
            "metadata": {SEQUENCE: sequence, INVOCATION: invocation},
        }
    )


def _labels(evaluates: str, evaluation: Evaluation) -> dict[str, str]:
    return evaluation_labels(
        evaluates, ((v.agent_id, v.check, v.rule, v.status) for v in evaluation.verdicts)
    )


class EvaluationRecording:
    """The evaluation trace of ``evaluates``, open while in the ``with`` block: the judge's
    calls made in it are recorded into it; ``keep(evaluation)`` adds the verdicts and labels.
    ``known``: the evaluation is done already (no judge to record), so the trace is registered
    once, with its labels, when it opens.

    Raises ``ConfigurationError`` on entry when Chronicle saves to no control plane."""

    def __init__(self, evaluates: str, known: Evaluation | None = None) -> None:
        rt = runtime.current()
        if not rt.settings.enabled or rt.client is None:
            raise ConfigurationError(
                "save",
                "keeps the verdicts on the control plane, and none is configured: call "
                "chronicle.configure(control_plane_url=...) (or set CHRONICLE_CONTROL_PLANE_URL) "
                "first, or leave save= out",
            )
        self.evaluates = evaluates
        self._rt = rt
        # Known verdicts: the trace's one registration carries its labels and is queued with
        # its span and envelopes (a judge's evaluation registers now, and labels it later).
        self._span = RequestSpan(
            trace_name=f"evaluation of {evaluates}", root=True, implicit=known is not None
        )
        record = self._span.record
        record.service = SERVICE
        record.metadata.pop(AGENT, None)  # not a run of the agent: never listed as one
        record.metadata[EVALUATES] = {"trace_id": evaluates}
        self._labelled = known is not None
        if known is not None:
            record.labels.update(_labels(evaluates, known))
        self._span.session.service = SERVICE
        self._started_ns = 0
        self.trace_id = ""

    def __enter__(self) -> EvaluationRecording:
        self._started_ns = time.time_ns()
        session = self._span.open()
        self.trace_id = session.trace_id
        return self

    def keep(self, evaluation: Evaluation) -> str:
        """Record ``evaluation``'s verdicts and label the trace with what they found; the
        evaluation trace's id."""
        session = self._span.session
        for verdict in evaluation.verdicts:
            envelope = verdict_envelope(verdict, session, self.evaluates)
            self._rt.delivery.submit_envelope(functools.partial(_same, envelope))
        if self._labelled:
            return session.trace_id
        record = self._span.record
        labelled = RequestRecord(
            service=record.service,
            metadata=record.metadata,
            trace_name=record.trace_name,
            labels=_labels(self.evaluates, evaluation),
        )
        # The span registered the trace with no labels when it opened; the first registration
        # that carries labels writes them (the control plane writes labels once).
        self._rt.delivery.register_trace(labelled, session.trace_id, wait=True)
        return session.trace_id

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        recorded = self._span._span is not None and self._span._span.is_recording()
        self._span.close(exc)
        if not recorded:  # sampled out: the verdicts are saved all the same, so is their span
            session = self._span.session
            trace_id, span_id = int(session.trace_id, 16), int(session.span_id, 16)
            delivery = self._rt.delivery
            delivery.span_started(self._span.record, trace_id, span_id, self._started_ns)
            delivery.span_ended(
                self._span.record, trace_id, span_id, self._started_ns, time.time_ns()
            )
