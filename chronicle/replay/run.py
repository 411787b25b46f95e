"""Replaying one recorded request span in test code.

``replay_trace(trace_id, span_id, plan)`` reads the span's envelopes from the control plane;
``replay(envelopes, plan)`` replays envelopes already held (a list, the JSON body of
``GET /v1/traces/{t}/spans/{s}/envelopes``, or a path to a file holding it). Both are context
managers (``with`` and ``async with``) that yield a ``ReplayRun``.

Inside, every boundary call is matched by name and invocation count against the recording:

- STUB (the default) returns the recorded ``output.raw`` (dicts and lists with attribute access;
  SDK types for wrapped clients) and runs no code and no hooks. A recorded failure raises
  ``RecordedCallError``; an output that was not JSON raises ``LossyReplayError``. A streamed call
  or a generator gets its recorded items again (``replay/streams.py``).
- RUN executes the real code (and the default hooks) and keeps the input and result in memory;
  boundaries nested inside it are matched against the recording too.
- A call with no recording raises ``ReplayMismatchError``, unless the plan runs it.

Nothing is written: boundaries start no spans while replaying, request spans opened by the code
under test neither register nor save anything, and ``ReplaySampler`` drops every other span.
The replay lives in the OpenTelemetry context, so it applies to the thread or task that entered
it (and what inherits that context) and never leaks into another.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from agentplane_primitives.models import Envelope
from opentelemetry import context as otel_context
from pydantic import JsonValue, ValidationError
from typing_extensions import override

from chronicle import runtime, wire
from chronicle.errors import (
    ControlPlaneError,
    LossyReplayError,
    RecordedCallError,
    ReplayError,
    ReplayMismatchError,
)
from chronicle.otel.context import FRAME_KEY, REPLAY_KEY, SESSION_KEY
from chronicle.recording.call import Call, CallSpec, UnrecordedCall, call_info
from chronicle.recording.capture import json_arguments
from chronicle.recording.hooks import default_hooks
from chronicle.recording.session import Session
from chronicle.replay.plan import Mode, ReplayPlan
from chronicle.replay.recorded import restore_plain
from chronicle.replay.streams import stub_stream
from chronicle.wire import trace_page


@dataclass(frozen=True)
class LoggedCall:
    """One crossing during a replay, in the order it happened."""

    name: str
    invocation_index: int
    mode: Mode


class ReplayRun:
    """A replay in progress: the recording, the plan, and what happened so far."""

    def __init__(
        self,
        envelopes: list[Envelope],
        plan: ReplayPlan,
        *,
        export_spans: bool = False,
    ) -> None:
        self.plan = plan
        self.export_spans = export_spans
        self.url: str | None = None
        """The control plane's page for the recorded trace, when it was read from one."""
        self.envelopes = envelopes
        self.trace_id = envelopes[0].trace_id if envelopes else ""
        self.span_id = envelopes[0].span_id if envelopes else ""
        self._recorded: dict[str, dict[int, Envelope]] = {}
        for envelope in wire.call_order(envelopes):
            index = wire.invocation_of(envelope)
            calls = self._recorded.setdefault(envelope.name, {})
            if index is None or index in calls:
                index = len(calls) + 1  # recorded without numbering: count in call order
            calls[index] = envelope
        self._counts: dict[str, int] = {}
        self._log: list[LoggedCall] = []
        self._inputs: dict[tuple[str, int], dict[str, object]] = {}
        self._results: dict[tuple[str, int], object] = {}
        self._lock = threading.Lock()

    # ---- what a test asserts on -----------------------------------------------------------

    def call_log(self) -> list[LoggedCall]:
        """Every crossing so far, in order, with its mode (``stub`` or ``run``)."""
        with self._lock:
            return list(self._log)

    def captured_input(self, name: str, n: int = 1) -> dict[str, object]:
        """The arguments (by name, live values) of call ``n`` of ``name`` during this replay."""
        with self._lock:
            key = (name, n)
            if key not in self._inputs:
                raise KeyError(self._not_called(name, n))
            return self._inputs[key]

    def captured_result(self, name: str, n: int = 1) -> object:
        """What call ``n`` of ``name`` returned during this replay (the live value for RUN)."""
        with self._lock:
            key = (name, n)
            if key not in self._results:
                if key in self._inputs:
                    raise KeyError(
                        f"call {n} of {name!r} raised or has not returned yet, so it has no result"
                    )
                raise KeyError(self._not_called(name, n))
            return self._results[key]

    def recorded(self, name: str, n: int = 1) -> Envelope | None:
        """The recorded envelope of call ``n`` of ``name``, if there is one."""
        return self._recorded.get(name, {}).get(n)

    def _not_called(self, name: str, n: int) -> str:
        seen = sorted({f"{entry.name}#{entry.invocation_index}" for entry in self._log})
        where = f"; the recorded trace: {self.url}" if self.url else ""
        return (
            f"replay: there was no call {n} of {name!r} during this replay; calls seen: "
            f"{', '.join(seen) or 'none'}{where}"
        )

    # ---- driving boundaries ---------------------------------------------------------------

    def _next(self, spec: CallSpec, args: tuple[object, ...], kwargs: dict[str, object]) -> Call:
        """The call of ``spec`` that happens now: its stub, or a live cut-point."""
        name = spec.name
        with self._lock:
            n = self._counts.get(name, 0) + 1
            self._counts[name] = n
            mode = self.plan.mode_for(name, n)
            self._log.append(LoggedCall(name, n, mode))
            bound = spec.binder.bind(args, kwargs)
            self._inputs[(name, n)] = bound
        if mode == "stub":
            envelope = self.recorded(name, n)
            if envelope is None:
                raise ReplayMismatchError(name, n, len(self._recorded.get(name, {})), url=self.url)
            return StubCall(self, spec, n, envelope, args, kwargs)
        hooks = default_hooks.snapshot()
        info = call_info(
            spec,
            json_arguments(bound).value if hooks else {},
            invocation=n,
            trace_id=self.trace_id or None,
            span_id=self.span_id or None,
        )
        fail_on_error = runtime.current().settings.hooks_fail_call_on_error

        def keep(result: object) -> None:
            self._keep_result(name, n, result)

        return UnrecordedCall(spec, args, kwargs, hooks, info, fail_on_error, keep)

    def _keep_result(self, name: str, n: int, result: object) -> None:
        with self._lock:
            self._results[(name, n)] = result


class _Replayer:
    """What the context holds during a replay: the boundaries' way into one ``ReplayRun``."""

    __slots__ = ("export_spans", "run")

    def __init__(self, run: ReplayRun) -> None:
        self.run = run
        self.export_spans = run.export_spans

    def begin(self, spec: CallSpec, args: tuple[object, ...], kwargs: dict[str, object]) -> Call:
        """The call's stub or cut-point; raises ``ReplayMismatchError`` when nothing matches."""
        return self.run._next(spec, args, kwargs)

    def has_recording(self, name: str) -> bool:
        """Whether the recording holds any call of ``name``."""
        return name in self.run._recorded


class StubCall(Call):
    """A stubbed call: nothing runs; the recorded output comes back."""

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

    @override
    def stub_result(self) -> object:
        envelope, spec, n = self._envelope, self._spec, self._n
        arguments = spec.binder.bind(self.args, self.kwargs)
        streamed = stub_stream(spec, n, envelope, arguments, url=self._run.url)
        if streamed is not None:  # the call or the recording streams: see replay/streams.py
            value, assembled = streamed
            self._run._keep_result(spec.name, n, assembled)
            return value
        output = envelope.output
        error = output.error if output is not None else None
        if (
            envelope.envelope_status.status is not None
            and envelope.envelope_status.status.value == "failure"
        ):
            raise RecordedCallError(
                spec.name,
                n,
                error.type if error is not None else "Exception",
                error.message if error is not None else "(no message recorded)",
                url=self._run.url,
            )
        if wire.output_is_lossy(envelope):
            raise LossyReplayError(spec.name, n, url=self._run.url)
        raw: JsonValue = output.raw if output is not None else None
        if spec.restore is None:
            value = restore_plain(raw)
        else:
            try:
                value = spec.restore(raw)
            except Exception as exc:
                # An edited or foreign recording: say which envelope, not an AttributeError later.
                raise ReplayError(
                    f"replay: the recorded output of {spec.name!r} call {n} (envelope "
                    f"{envelope.envelope_id} of span {envelope.span_id}) cannot be rebuilt: "
                    f"{exc}; record the call again, or run it live with "
                    f"ReplayPlan().run({spec.name!r}, {n})"
                ) from None
        self._run._keep_result(spec.name, n, value)
        return value

    @override
    def complete(self, result: object) -> object:
        raise AssertionError("a stub does not run")

    @override
    def fail(self, error: BaseException) -> None:
        raise AssertionError("a stub does not run")


# ---- entering a replay ------------------------------------------------------------------------


class ReplayScope:
    """The context manager ``replay()`` and ``replay_trace()`` return."""

    def __init__(self, run: ReplayRun) -> None:
        self.run = run
        self._tokens: list[object] = []

    def __enter__(self) -> ReplayRun:
        run = self.run
        session = Session(
            service=runtime.current().settings.service_name,
            metadata={},
            trace_id=run.trace_id,
            span_id=run.span_id,
        )
        ctx = otel_context.set_value(REPLAY_KEY, _Replayer(run))
        ctx = otel_context.set_value(SESSION_KEY, session, ctx)
        ctx = otel_context.set_value(FRAME_KEY, None, ctx)
        self._tokens.append(otel_context.attach(ctx))
        return run

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tokens:
            otel_context.detach(self._tokens.pop())  # type: ignore[arg-type]

    async def __aenter__(self) -> ReplayRun:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def load_envelopes(source: object, *, span_id: str | None = None) -> list[Envelope]:
    """Read envelopes from a list, the route's JSON body, a JSON string, or a file path.

    Raises ``ReplayError`` naming what is wrong: unreadable file, not envelopes, several spans
    with no ``span_id`` to choose one.
    """
    data: Any = source
    if isinstance(source, Path) or (
        isinstance(source, str) and not source.lstrip().startswith(("{", "["))
    ):
        path = Path(source)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ReplayError(f"replay: cannot read {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ReplayError(f"replay: {path} is not JSON: {exc}") from None
    elif isinstance(source, (str, bytes)):
        try:
            data = json.loads(source)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"replay: the text given is not JSON: {exc}") from None
    if isinstance(data, Mapping) and "envelopes" in data:
        data = data["envelopes"]
    if not isinstance(data, (list, tuple)):
        raise ReplayError(
            "replay: expected a list of envelopes or the body of "
            "GET /v1/traces/{t}/spans/{s}/envelopes ({'envelopes': [...]}), got "
            f"{type(data).__name__}"
        )
    envelopes: list[Envelope] = []
    for position, item in enumerate(data):
        try:
            envelopes.append(item if isinstance(item, Envelope) else Envelope.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ReplayError(
                f"replay: item {position} is not a valid envelope ({first['msg']} at "
                f"{list(first['loc'])}); pass envelopes saved from the control plane"
            ) from None
    if span_id is not None:
        envelopes = [e for e in envelopes if e.span_id == span_id]
    spans = sorted({e.span_id for e in envelopes})
    if len(spans) > 1:
        raise ReplayError(
            f"replay: the envelopes come from {len(spans)} spans ({', '.join(spans)}); a span is "
            "the unit of replay, so pass span_id= to choose one"
        )
    return envelopes


def replay(
    envelopes: object,
    plan: ReplayPlan | None = None,
    *,
    span_id: str | None = None,
    export_spans: bool = False,
) -> ReplayScope:
    """Replay envelopes already held: ``with chronicle.replay("incident.json") as run: ...``.

    ``envelopes`` is a list of envelopes (models or dicts), the JSON body of
    ``GET /v1/traces/{t}/spans/{s}/envelopes``, or a path to a file holding it. No control plane
    is needed. ``export_spans=True`` lets spans started during the replay reach your exporters.
    """
    loaded = load_envelopes(envelopes, span_id=span_id)
    if not loaded:
        raise ReplayError("replay: there are no envelopes to replay; check the file or the span_id")
    return ReplayScope(ReplayRun(loaded, plan or ReplayPlan(), export_spans=export_spans))


def replay_trace(
    trace_id: str,
    span_id: str,
    plan: ReplayPlan | None = None,
    *,
    export_spans: bool = False,
) -> ReplayScope:
    """Replay one span read from the control plane: ``with replay_trace(t, s, plan) as run:``.

    Fails here, before anything runs, when no control plane is configured, or the trace or the
    span is unknown, or the span has no envelopes.
    """
    rt = runtime.current()
    client = rt.client
    if client is None:
        raise ReplayError(
            "replay_trace needs a control plane to read from: set control_plane_url "
            "(CHRONICLE_CONTROL_PLANE_URL), or replay a saved file with chronicle.replay(path)"
        )
    try:
        found = client.span_envelopes(trace_id, span_id)
        # Only an empty answer needs the trace, to say which id is wrong.
        trace = None if found else client.get_trace(trace_id)
    except ControlPlaneError as exc:
        raise ReplayError(f"replay: could not read trace {trace_id}: {exc}") from None
    if not found and trace is None:
        raise ReplayError(
            f"replay: trace {trace_id} is not on the control plane; check the id (and that "
            "it is still within retention)"
        )
    if not found:
        assert trace is not None
        spans = [s.get("span_id") for s in trace.get("spans", []) if isinstance(s, dict)]
        if span_id not in spans:
            raise ReplayError(
                f"replay: trace {trace_id} has no span {span_id}; its spans are "
                f"{', '.join(str(s) for s in spans) or 'none'}"
            )
        raise ReplayError(
            f"replay: span {span_id} of trace {trace_id} has no envelopes, so there is nothing "
            "to replay (were its calls delivered? call chronicle.flush() after recording)"
        )
    scope = replay(found, plan, export_spans=export_spans)
    base = rt.settings.control_plane_url
    if base is not None:
        scope.run.url = trace_page(base, trace_id)
    return scope
