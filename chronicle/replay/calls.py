"""What a boundary call gets during a replay: a ``Call`` that serves its recording (``StubCall``),
an override (``OverrideCall``), the same recorded into a new trace (``Recording*``), or runs its
body live inside the recorded call it stands for (``LiveCall``, whose children are matched
against that call's recorded children).

``ReplayRun`` decides which (``replay/run.py``); these objects carry the decision out: a
stub rebuilds the recorded output as the types the recording names (``_rebuilt``) or raises the
recorded failure. A call never holds the run: it gets the collaborators it reports to
(``Outcomes``: the run's ``CallLog``, the errors live calls raised, the recorded trace's page)
and, in a replay recorded as a new trace, the ``Recorder`` that writes the calls it serves.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from agentplane_primitives.enums import Status
from agentplane_primitives.models import Envelope
from agentplane_primitives.utils import new_envelope_id
from opentelemetry import context as otel_context
from pydantic import JsonValue, ValidationError
from typing_extensions import override

from chronicle import runtime, wire
from chronicle.errors import LossyReplayError, ReplayError
from chronicle.otel.context import REPLAY_PARENT_KEY, detach
from chronicle.recording.call import CallSpec, RecordedCall, UnrecordedCall
from chronicle.recording.hooks import CallInfo, Hook
from chronicle.recording.session import Session
from chronicle.replay.calllog import CallLog
from chronicle.replay.plan import Override
from chronicle.replay.recorded import (
    refuse_unrecorded,
    replayed_failure,
    restore_value,
    restore_with,
)
from chronicle.replay.streams import stub_stream
from chronicle.replay.tree import RecordedTree, Scope

logger = logging.getLogger("chronicle")


class Recorder:
    """Where a replay recorded as a new trace (``record=True``) writes the calls it serves: the
    new span's ``session`` on the runtime ``rt``, beside the recorded ``tree`` they stand for."""

    __slots__ = ("rt", "session", "tree")

    def __init__(self, session: Session, rt: runtime.Runtime, tree: RecordedTree) -> None:
        self.session, self.rt, self.tree = session, rt, tree

    def served_call(
        self, spec: CallSpec, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> RecordedCall:
        """The recorded call standing for a call the replay serves: started (its input as the
        code made it now) with no hooks; the caller ends it."""
        call = RecordedCall(
            spec, self.rt, self.session, otel_context.get_current(), args, kwargs, None
        )
        call.start(hooks=False)
        return call

    def record_consumed(self, served: Envelope, new_id: str) -> None:
        """Record the calls a served ``served`` consumed (its recorded subtree, never made) into
        the new span under ``new_id``: each a copy of its recording, numbered in the new span and
        marked ``chronicle.replayed_from``, so the new trace is the whole call tree."""
        session, tree = self.session, self.tree
        inside = set(tree.descendants(served.envelope_id))
        if not inside or new_id == "":
            return
        renamed = {served.envelope_id: new_id}
        for envelope in tree.envelopes:  # call order: a parent before its children
            eid = envelope.envelope_id
            if eid not in inside:
                continue
            renamed[eid] = copy_id = new_envelope_id()
            sequence, invocation = session.next_call(envelope.name)
            body = envelope.model_dump(mode="json", exclude_none=True)
            body.update(
                envelope_id=copy_id,
                trace_id=session.trace_id,
                span_id=session.span_id,
                parent_envelope_id=renamed.get(envelope.parent_envelope_id or ""),
                metadata={
                    **envelope.metadata,
                    wire.SEQUENCE: sequence,
                    wire.INVOCATION: invocation,
                    wire.REPLAYED_FROM: eid,
                },
            )
            body.pop("links", None)  # they name envelopes of the recorded span
            try:
                copy = Envelope.model_validate(body)
            except ValidationError:
                logger.exception("could not record %s as served", tree.label(eid))
                continue
            self.rt.delivery.submit_envelope(functools.partial(_same, copy))


def _same(envelope: Envelope) -> Envelope:
    return envelope


class Outcomes:
    """What the calls of one replay report to: the run's ``calls`` log (each result kept),
    ``raised`` (the error each live call raised, by ``name#n``, for ``chronicle.diff(run)``),
    ``url`` (the recorded trace's page, named in errors) and, with ``record=True``, the
    ``recorder`` that writes what is served into the new trace (``None`` otherwise)."""

    __slots__ = ("calls", "raised", "recorder", "url")

    def __init__(self, calls: CallLog) -> None:
        self.calls = calls
        self.raised: dict[str, BaseException] = {}
        self.recorder: Recorder | None = None
        self.url: str | None = None


class LiveCall(UnrecordedCall):
    """A call the replay runs live (a cut-point, or a call on the path to one).

    The real code runs with the default hooks, and its result is kept. Boundaries its body calls
    are matched against the recorded children of the call it stands for: the body runs with
    ``inside`` (that call's ``Scope``) in the context, a stream's or generator's steps too. An
    error it raises is kept in ``raised`` under the call's label.
    """

    __slots__ = ("_inside", "_raised", "_scope", "_token")

    def __init__(
        self,
        spec: CallSpec,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        hooks: tuple[Hook, ...],
        info: CallInfo,
        fail_on_error: bool,
        keep: Callable[[object], None],
        inside: Scope,
        raised: dict[str, BaseException],
    ) -> None:
        super().__init__(spec, args, kwargs, hooks, info, fail_on_error, keep)
        self._scope, self._raised = inside, raised
        self._inside = otel_context.set_value(REPLAY_PARENT_KEY, inside)
        self._token: object = otel_context.attach(self._inside)

    @override
    def step_context(self) -> otel_context.Context | None:
        return self._inside

    @override
    def complete(self, result: object) -> object:
        self._release()
        return super().complete(result)

    @override
    def fail(self, error: BaseException) -> None:
        self._release()
        self._raised[self._scope.label] = error  # for chronicle.diff(run)
        super().fail(error)

    def _release(self) -> None:
        token, self._token = self._token, None
        detach(token, "replay")


class StubCall:
    """A stubbed call: nothing runs; the recorded output comes back."""

    __slots__ = ("_envelope", "_n", "_outcomes", "_spec", "args", "kwargs")
    stubbed = True

    def __init__(
        self,
        outcomes: Outcomes,
        spec: CallSpec,
        n: int,
        envelope: Envelope,
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> None:
        self.args, self.kwargs = args, kwargs
        self._outcomes, self._spec, self._n, self._envelope = outcomes, spec, n, envelope

    def stub_result(self) -> object:
        """The recorded result, rebuilt: ``spec.restore`` (an SDK type), else by the types the
        envelope recorded (``wire.OUTPUT_TYPES``), else through the return annotation, else
        JSON with attribute access (``replay/recorded.py``).

        A recorded failure is raised again: as ``spec.restore_error`` rebuilds it (a wrapped
        client's SDK exception), else as its original class when that can be imported and built
        from the recorded message, else as ``RecordedCallError``. An output that was not JSON
        raises ``LossyReplayError``; one that was not recorded, or was cut, raises
        ``UnrecordedOutputError``: never ``None`` or half a value.
        """
        envelope, spec, n, outcomes = self._envelope, self._spec, self._n, self._outcomes
        refuse_unrecorded(envelope, spec.name, n, url=outcomes.url)
        arguments = spec.binder.bind(self.args, self.kwargs)
        streamed = stub_stream(spec, n, envelope, arguments, url=outcomes.url)
        if streamed is not None:  # the call or the recording streams: see replay/streams.py
            value, assembled = streamed
            outcomes.calls.returned(spec.name, n, assembled)
            return value
        output = envelope.output
        error = output.error if output is not None else None
        if envelope.envelope_status.status is Status.FAILURE:
            raise replayed_failure(
                spec.name,
                n,
                error.type if error is not None else "Exception",
                error.message if error is not None else "(no message recorded)",
                wire.error_detail(envelope),
                spec.restore_error,
                url=outcomes.url,
            )
        if wire.output_is_lossy(envelope):
            raise LossyReplayError(spec.name, n, url=outcomes.url)
        raw: JsonValue = output.raw if output is not None else None
        types, binary = wire.output_types(envelope), wire.output_is_binary(envelope)
        value = _rebuilt(
            spec,
            n,
            raw,
            types,
            binary,
            # An edited or foreign recording: say which envelope, not an AttributeError later.
            lambda exc: ReplayError(
                f"replay: the recorded output of {spec.name!r} call {n} (envelope "
                f"{envelope.envelope_id} of span {envelope.span_id}) cannot be rebuilt: "
                f"{exc}; record the call again, or run it live with "
                f"ReplayPlan().run({spec.name!r}, {n})"
            ),
        )
        outcomes.calls.returned(spec.name, n, value)
        return value

    def complete(self, result: object) -> object:
        """``Call.complete``: never called (a stub runs nothing)."""
        raise AssertionError("a stub does not run")

    def fail(self, error: BaseException) -> None:
        """``Call.fail``: never called (a stub runs nothing)."""
        raise AssertionError("a stub does not run")


class OverrideCall(StubCall):
    """A call the plan forks with ``override``: nothing runs; the plan's value comes back,
    rebuilt as a recorded one would be, or its error is raised."""

    __slots__ = ("_override", "_replaced")

    def __init__(
        self,
        outcomes: Outcomes,
        spec: CallSpec,
        n: int,
        override: Override,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        replaced: Envelope | None = None,
    ) -> None:  # ``replaced``: the recording it stands in for, if any (for record=True)
        self.args, self.kwargs = args, kwargs
        self._replaced = replaced
        self._outcomes, self._spec, self._n, self._override = outcomes, spec, n, override

    @override
    def stub_result(self) -> object:
        """The override's output (a JSON-like one rebuilt through ``spec.restore`` or the return
        annotation, as ``StubCall`` rebuilds a recording), or its error raised."""
        spec, n, given = self._spec, self._n, self._override
        if given.error is not None:
            raise given.error
        value = given.output
        if _json_like(value):
            raw: JsonValue = value  # type: ignore[assignment]
            value = _rebuilt(
                spec,
                n,
                raw,
                None,
                False,
                lambda exc: ReplayError(
                    f"replay: override({spec.name!r}, {n}, output=...) cannot be built as "
                    f"what {spec.name!r} returns: {exc}; give the output as the call's "
                    "recorded JSON (chronicle show --envelope prints one) or as the object"
                ),
            )
        self._outcomes.calls.returned(spec.name, n, value)
        return value


class RecordingStubCall(StubCall):
    """A stub of a recorded replay (``record=True``): served as ``StubCall`` serves it, and
    recorded into the new span as a ``RecordedCall`` with the recording's output (or failure),
    marked ``chronicle.replayed_from``; what the recorded call made (never made now) is
    recorded under it as served too."""

    __slots__ = ()

    @override
    def stub_result(self) -> object:
        recorder = self._outcomes.recorder
        assert recorder is not None  # a recorded replay's stub: its run records
        call = recorder.served_call(self._spec, self.args, self.kwargs)
        try:
            return super().stub_result()
        finally:
            call.serve(self._envelope)
            recorder.record_consumed(self._envelope, call.envelope_id)


class RecordingOverrideCall(OverrideCall):
    """An override of a recorded replay (``record=True``): served as ``OverrideCall`` serves
    it, and recorded into the new span as a ``RecordedCall`` with the value served (or the error
    raised), marked ``chronicle.replayed_from`` with the recording it replaced, if any."""

    __slots__ = ()

    @override
    def stub_result(self) -> object:
        recorder = self._outcomes.recorder
        assert recorder is not None  # a recorded replay's override: its run records
        call = recorder.served_call(self._spec, self.args, self.kwargs)
        if self._replaced is not None:
            call.record.metadata[wire.REPLAYED_FROM] = self._replaced.envelope_id
        try:
            value = super().stub_result()
        except BaseException as exc:
            call.capture_error(exc)
            call.release()
            call.end()
            raise
        call.capture_result(value)
        call.release()
        call.end()
        return value


def _json_like(value: object) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, list):
        return all(_json_like(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_like(v) for k, v in value.items())
    return False


def _rebuilt(
    spec: CallSpec,
    n: int,
    raw: JsonValue,
    types: dict[str, str] | None,
    binary: bool,
    refused: Callable[[Exception], ReplayError],
) -> object:
    """``raw`` as call ``n`` of ``spec`` returns it: through the boundary's own ``restore`` (a
    wrapped client's SDK type), else by the recorded ``types``, else through the return
    annotation (``replay/recorded.py``). A ``restore`` that fails raises ``refused(error)``."""
    if spec.restore is None:
        return restore_value(raw, spec.return_annotation, binary, spec.name, n, types)
    try:
        return restore_with(spec.restore, raw, types, binary, spec.name, n)
    except Exception as exc:
        raise refused(exc) from None
