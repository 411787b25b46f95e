"""What a boundary call gets during a replay: a ``Call`` that serves its recording (``StubCall``),
an override (``OverrideCall``), the same recorded into a new trace (``Recording*``), or runs its
body live inside the recorded call it stands for (``LiveCall``, whose children are matched
against that call's recorded children).

``ReplayRun._next`` decides which (``replay/run.py``); these objects carry the decision out: a
stub rebuilds the recorded output as the types the recording names (``_rebuilt``) or raises the
recorded failure, and reports what it returned to the run's ``CallLog``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentplane_primitives.enums import Status
from agentplane_primitives.models import Envelope
from opentelemetry import context as otel_context
from pydantic import JsonValue
from typing_extensions import override

from chronicle import wire
from chronicle.errors import LossyReplayError, ReplayError
from chronicle.otel.context import REPLAY_PARENT_KEY, detach
from chronicle.recording.call import CallSpec, UnrecordedCall
from chronicle.recording.hooks import CallInfo, Hook
from chronicle.replay.plan import Override
from chronicle.replay.recorded import (
    refuse_unrecorded,
    replayed_failure,
    restore_value,
    restore_with,
)
from chronicle.replay.streams import stub_stream

logger = logging.getLogger("chronicle")

if TYPE_CHECKING:
    from chronicle.replay.run import ReplayRun, _Scope


class LiveCall(UnrecordedCall):
    """A call the replay runs live (a cut-point, or a call on the path to one).

    The real code runs with the default hooks, and its result is kept. Boundaries its body calls
    are matched against the recorded children of the call it stands for: the body runs with
    ``inside`` (that call's ``_Scope``) in the context, a stream's or generator's steps too.
    """

    __slots__ = ("_inside", "_scope", "_token")

    def __init__(
        self,
        spec: CallSpec,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        hooks: tuple[Hook, ...],
        info: CallInfo,
        fail_on_error: bool,
        keep: Callable[[object], None],
        inside: _Scope,
    ) -> None:
        super().__init__(spec, args, kwargs, hooks, info, fail_on_error, keep)
        self._scope = inside
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
        self._scope.run._raised[self._scope.label] = error  # for chronicle.diff(run)
        super().fail(error)

    def _release(self) -> None:
        token, self._token = self._token, None
        detach(token, "replay")


class StubCall:
    """A stubbed call: nothing runs; the recorded output comes back."""

    __slots__ = ("_envelope", "_n", "_run", "_spec", "args", "kwargs")
    stubbed = True

    def __init__(
        self,
        run: ReplayRun,
        spec: CallSpec,
        n: int,
        envelope: Envelope,
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> None:
        self.args, self.kwargs = args, kwargs
        self._run, self._spec, self._n, self._envelope = run, spec, n, envelope

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
        envelope, spec, n = self._envelope, self._spec, self._n
        refuse_unrecorded(envelope, spec.name, n, url=self._run.url)
        arguments = spec.binder.bind(self.args, self.kwargs)
        streamed = stub_stream(spec, n, envelope, arguments, url=self._run.url)
        if streamed is not None:  # the call or the recording streams: see replay/streams.py
            value, assembled = streamed
            self._run._keep_result(spec.name, n, assembled)
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
                url=self._run.url,
            )
        if wire.output_is_lossy(envelope):
            raise LossyReplayError(spec.name, n, url=self._run.url)
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
        self._run._keep_result(spec.name, n, value)
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
        run: ReplayRun,
        spec: CallSpec,
        n: int,
        override: Override,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        replaced: Envelope | None = None,
    ) -> None:  # ``replaced``: the recording it stands in for, if any (for record=True)
        self.args, self.kwargs = args, kwargs
        self._replaced = replaced
        self._run, self._spec, self._n, self._override = run, spec, n, override

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
        self._run._keep_result(spec.name, n, value)
        return value


class RecordingStubCall(StubCall):
    """A stub of a recorded replay (``record=True``): served as ``StubCall`` serves it, and
    recorded into the new span as a ``RecordedCall`` with the recording's output (or failure),
    marked ``chronicle.replayed_from``; what the recorded call made (never made now) is
    recorded under it as served too."""

    __slots__ = ()

    @override
    def stub_result(self) -> object:
        run = self._run
        call = run._served_call(self._spec, self.args, self.kwargs)
        try:
            return super().stub_result()
        finally:
            call.serve(self._envelope)
            run._record_consumed(self._envelope, call.envelope_id)


class RecordingOverrideCall(OverrideCall):
    """An override of a recorded replay (``record=True``): served as ``OverrideCall`` serves
    it, and recorded into the new span as a ``RecordedCall`` with the value served (or the error
    raised), marked ``chronicle.replayed_from`` with the recording it replaced, if any."""

    __slots__ = ()

    @override
    def stub_result(self) -> object:
        call = self._run._served_call(self._spec, self.args, self.kwargs)
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
