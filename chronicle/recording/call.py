"""The lifecycle of one boundary call, whoever drives it.

Every wrapper (``@boundary``, ``wrap_llm``, wrapped model clients, the httpx instrumenter,
LangGraph nodes) drives a call the same way::

    call = begin_call(spec, args, kwargs)      # None: nothing to do, call the function as is
    if call.stubbed:
        return call.stub_result()              # a replay answers; nothing runs
    try:
        result = fn(*call.args, **call.kwargs) # hooks may have patched the arguments
    except BaseException as exc:
        call.fail(exc)                         # the call ends here
        raise
    return call.complete(result)               # what the caller gets

``run_sync``/``run_async`` are that sequence. A call ends in ``complete`` or ``fail``, except a
call whose result is consumed later (a streamed model call, a generator): then ``complete``
hands back a wrapper from ``recording/stream.py`` (chosen by the spec's ``StreamFormat``) that
ends the call when the stream ends. ``RecordedCall`` separates letting go of the function's
context (``release``, at return) from ending the call (``end``): in between, the wrapper attaches
the boundary's context around each step and hands each item to the call's capture (through
``item_keeper``), and the end (``end_stream``) records the assembled output, runs ``crossing``,
ends the span, then runs ``record`` and ``leave`` and closes an implicit request span.

The kinds of call:

- ``RecordedCall``: a span that opens before the body runs, a ``CallRecord`` filled with the
  redacted JSON form of the input and the result, and the hooks around it.
- ``UnrecordedCall``: recording is off, or a replay runs the call live (a cut-point): only the
  hooks run (and a replay keeps the result).
- A replay's stub (``chronicle.replay.run``): nothing runs; the recording answers. A replay
  that records (``record=True``) records every call as a ``RecordedCall`` into its new span: a
  live one as usual (``keep`` sees its result), a served one started without hooks and ended
  with ``serve`` (the recording's output) or ``capture_result``/``capture_error`` (an override).

Nothing in Chronicle's own machinery may break the call: a failure there is logged and the call
goes on unrecorded. Only a hook's ``AbortCall`` (or a strict mode the user turned on) and a
replay's verdict reach the caller.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, cast

from agentplane_primitives.enums import Status as EnvelopeStatus
from agentplane_primitives.models import Envelope
from agentplane_primitives.utils import new_envelope_id
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import GEN_AI_REQUEST_MODEL
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel, JsonValue

from chronicle import runtime
from chronicle.errors import AbortCall, ReplayError
from chronicle.llm.canonical import UNKNOWN_MODEL, LlmAdapter
from chronicle.otel import genai
from chronicle.otel.context import (
    ACTIVE_REPLAYS,
    FRAME_KEY,
    RECORD_KEY,
    ActiveReplay,
    current_replay_in,
    detach,
)
from chronicle.otel.counted_once import counted_below, demote_span, demoted
from chronicle.otel.openinference import llm_span_attributes
from chronicle.otel.redacting import RedactingSpan
from chronicle.recording.arguments import ArgumentBinder
from chronicle.recording.capture import JsonForm, dumps, json_arguments, json_form
from chronicle.recording.codecs import claimed_by, records_types
from chronicle.recording.failure import RestoreError, error_fields, failure_detail
from chronicle.recording.hooks import CallInfo, Hook, HookRunner, Kind, default_hooks
from chronicle.recording.request import RequestSpan
from chronicle.recording.session import (
    Frame,
    Session,
    current_attempt_in,
    current_frame_in,
    current_session_in,
    offer_tool_calls,
    take_tool_call_id,
)
from chronicle.recording.snapshot import snapshot, thaw
from chronicle.recording.stream import StreamCapture, StreamFormat, StreamingCall
from chronicle.redaction import Redaction, without_token_lists
from chronicle.wire import (
    BINARY_OUTPUT,
    CHUNKS,
    CHUNKS_REBUILT,
    ENTRY,
    ERROR,
    INVOCATION,
    LOSSY_INPUT,
    LOSSY_METADATA,
    LOSSY_OUTPUT,
    OUTPUT_NOT_RECORDED,
    OUTPUT_TYPES,
    REPLAYED_FROM,
    RESERVED_PREFIX,
    SEQUENCE,
    SHARED_CHUNK_FIELDS,
    TRUNCATED,
    TRUNCATED_OUTPUT,
    CallRecord,
    envelope_entity,
    hex_id,
    holds_cut,
)

try:  # the compiled build (docs/design.md, "One source, an optional compiled build")
    from mypy_extensions import mypyc_attr
except ImportError:  # pure Python without mypy installed: the decorator does nothing

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Any:  # type: ignore[misc]
        """``mypy_extensions.mypyc_attr`` where mypy is not installed: the class as it is."""
        return lambda cls: cls


logger = logging.getLogger("chronicle")


class CallSpec(Protocol):
    """What a call needs to know about the function it wraps (``BoundarySpec`` is one)."""

    name: str
    kind: Kind
    provider: str | None
    binder: ArgumentBinder
    extract_input: Callable[[Mapping[str, object]], object] | None
    extract_result: Callable[[object], object] | None
    extract_metadata: Callable[[object], Mapping[str, object]] | None
    static_metadata: dict[str, JsonValue]
    start_attributes: dict[str, genai.AttributeValue]
    span_name: str
    """The span's name by the GenAI convention (an ``llm`` call's when it passes no model: its
    operation, ``chat`` or ``generate_content``, which names it before the model)."""
    span_kind: SpanKind
    restore: Callable[[JsonValue], object] | None
    stream_format: StreamFormat | None
    restore_error: RestoreError | None

    @property
    def adapter(self) -> LlmAdapter:
        """The adapter that derives canonical ``llm`` fields from raw JSON."""
        ...

    @property
    def return_annotation(self) -> object:
        """The function's return annotation, resolved; ``None`` when absent or unresolvable."""
        ...


class Call(Protocol):
    """One call in progress (see the module docstring for how it is driven).

    ``args``/``kwargs`` are what the function is called with. When ``stubbed``, the function
    must not run and ``stub_result()`` is what the caller gets (or raises the recorded error).
    Otherwise exactly one of ``complete(result)`` or ``fail(error)`` follows the function.
    """

    args: tuple[object, ...]
    kwargs: dict[str, object]
    stubbed: bool

    def stub_result(self) -> object:
        """The recorded answer; raises the recorded failure. Only for a stubbed call."""
        ...

    def complete(self, result: object) -> object:
        """The function returned ``result``; returns what the caller gets."""
        ...

    def fail(self, error: BaseException) -> None:
        """The function raised ``error`` (which the driver re-raises)."""
        ...


class Replayer(ActiveReplay, Protocol):
    """What a boundary asks of a replay active in its context."""

    def begin(self, spec: CallSpec, args: tuple[object, ...], kwargs: dict[str, object]) -> Call:
        """The call's stub or cut-point; raises ``ReplayError`` when nothing matches."""
        ...

    def has_recording(self, name: str) -> bool:
        """Whether the recording holds any call of ``name`` (whatever the settings say)."""
        ...


def run_sync(call: Call, fn: Callable[..., Any]) -> Any:
    """Run ``fn`` for a call that is not stubbed, and end the call."""
    try:
        result = fn(*call.args, **call.kwargs)
    except BaseException as exc:
        call.fail(exc)
        raise
    return call.complete(result)


async def run_async(call: Call, fn: Callable[..., Awaitable[Any]]) -> Any:
    """``run_sync`` for a function that returns an awaitable."""
    try:
        result = await fn(*call.args, **call.kwargs)
    except BaseException as exc:
        call.fail(exc)
        raise
    return call.complete(result)


def call_info(
    spec: CallSpec,
    arguments: JsonValue,
    *,
    invocation: int,
    attempt: int = 1,
    session: Session | None = None,
    trace_id: str | None = None,
    span_id: str | None = None,
    envelope_id: str | None = None,
) -> CallInfo:
    """The ``CallInfo`` hooks see; the ids come from ``session`` unless given."""
    if session is not None:
        trace_id, span_id = session.trace_id or None, session.span_id or None
    return CallInfo(
        name=spec.name,
        kind=spec.kind,
        arguments=arguments if isinstance(arguments, dict) else {},
        invocation_index=invocation,
        attempt=attempt,
        trace_id=trace_id,
        span_id=span_id,
        envelope_id=envelope_id,
        provider=spec.provider,
    )


def begin_call(spec: CallSpec, args: tuple[object, ...], kwargs: dict[str, object]) -> Call | None:
    """Start one call of ``spec``; ``None`` means: just call the function (nothing to do).

    During a replay the replay decides; when recording is off, or the call's request span was
    dropped by the sampler with keeping off (``Session.dropped``: nothing it records could be
    saved), only the hooks run (if any); otherwise the call is recorded, inside an implicit
    request span when none is open. While a
    replay is active elsewhere in the process, a call in a request span of its own (an
    in-process service answering a request) is not the replay's: it runs with only its hooks,
    recording nothing, as nothing may be written during a replay.
    """
    try:
        ctx = otel_context.get_current()
        replay = current_replay_in(ctx)
        session = current_session_in(ctx)
        aside = False  # a request of its own while a replay is active elsewhere
        if replay is None and ACTIVE_REPLAYS:
            if session is None:
                replay = _replay_outside_context(spec.name)
            else:
                aside = True
        if replay is not None:
            return cast(Replayer, replay).begin(spec, args, kwargs)
        rt = runtime.current()
        # A request the sampler dropped, with keeping off, saves nothing: no record, no span.
        quiet = aside or (session is not None and session.dropped)
        if quiet or not rt.recording:
            if not quiet:
                rt.note_unrecorded()
            hooks = (session.hooks if session is not None else default_hooks).snapshot()
            if not hooks:
                return None
            invocation = session.next_call(spec.name)[1] if session is not None else 1
            arguments = json_arguments(spec.binder.bind(args, kwargs)).value
            info = call_info(
                spec,
                arguments,
                invocation=invocation,
                session=session,
                envelope_id=new_envelope_id(),
            )
            fail_on_error = rt.settings.hooks_fail_call_on_error
            return UnrecordedCall(spec, args, kwargs, hooks, info, fail_on_error)
        implicit = None
        if session is None:
            implicit = RequestSpan(implicit=True)
            session = implicit.open()
            ctx = otel_context.get_current()
    except (AbortCall, ReplayError):  # a hook's or the replay's verdict on this call
        raise
    except Exception:
        logger.exception("could not start recording %r; the call runs unrecorded", spec.name)
        return None
    call = RecordedCall(spec, rt, session, ctx, args, kwargs, implicit)
    call.start()
    return call


def input_json(spec: CallSpec, bound: Mapping[str, object], rt: runtime.Runtime) -> JsonForm:
    """A call's input as its envelope stores it (``input.raw``), with the capture's flags.

    ``extract_input`` applied (a result that is not a dict is stored as ``{"value": ...}``), in
    JSON form, redacted, then cut to ``max_payload_bytes``. A replay compares calls with their
    recordings through the same function.
    """
    value, extracted = _input_of(spec, bound)
    return _input_form(value, extracted, rt.settings.max_payload_bytes, rt.redaction)


def _input_of(spec: CallSpec, bound: Mapping[str, object]) -> tuple[object, bool]:
    """What ``input.raw`` stores before its walk: the arguments by name, or what
    ``extract_input`` made of them (then ``True``)."""
    if spec.extract_input is None:
        return bound, False
    return spec.extract_input(bound), True


def _input_form(
    value: object, extracted: bool, limit: int, redaction: Redaction | None
) -> JsonForm:
    """``input_json`` of what it stores: the arguments by name, or (``extracted``) what
    ``extract_input`` gave them. Redacted, then cut, in one walk; bounded by ``limit``."""
    if not extracted:
        return json_arguments(
            cast("Mapping[str, object]", value),
            max_string_bytes=limit,
            max_total_bytes=limit,
            redaction=redaction,
        )
    form = json_form(value, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction)
    return form if isinstance(form.value, dict) else form._replace(value={"value": form.value})


def _walks_later(display: bool, redaction: Redaction) -> bool:
    """Whether a call's capture may be snapshotted now and walked when its envelope is built
    (``recording/snapshot.py``): not when another exporter shows the JSON on the span now
    (``display``), nor with a user's redactors (user code, which runs on the caller's thread).
    A call with hooks is walked now too (``RecordedCall``): the hooks see its JSON."""
    return not display and (redaction.defaults_only or not redaction.redactors)


def _settle_input(
    extracted: bool, limit: int, redaction: Redaction, record: CallRecord, frozen: object
) -> None:
    _keep_input(record, _input_form(thaw(cast(bytes, frozen)), extracted, limit, redaction))


def _keep_input(record: CallRecord, form: JsonForm) -> None:
    if form.lossy:
        record.metadata[LOSSY_INPUT] = True
    if form.truncated:
        record.metadata[TRUNCATED] = True
    record.input_raw = form.value


def _dumped(value: object, types: bool, limit: int) -> bytes | None:
    """A snapshot of an SDK model's JSON dump, which is all the walk reads of it when it
    describes no types (``capture._Walker._model``; a wrapped client's result), or ``None``.

    A class a codec claims, or a dump that raises, is left to the walk at the call."""
    if types or not isinstance(value, BaseModel) or claimed_by(type(value)) is not None:
        return None
    try:
        dumped = value.model_dump(mode="json")
    except Exception:  # the walk has its own way with it
        return None
    return snapshot(dumped, limit)


def _output_form(value: object, limit: int, redaction: Redaction, types: bool) -> JsonForm:
    """A result's JSON form; ``types``: with how its values JSON does not keep were encoded."""
    return json_form(
        value, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction, types=types
    )


def _settle_output(
    limit: int, redaction: Redaction, types: bool, record: CallRecord, frozen: object
) -> None:
    _keep_output(record, _output_form(thaw(cast(bytes, frozen)), limit, redaction, types))


def _keep_output(record: CallRecord, form: JsonForm) -> None:
    """Store the output's JSON form and its flags; ``masked``: its redaction changed
    something, so its token lists go too (``redaction.without_token_lists``); ``types``: how
    its values JSON does not keep were encoded (``JsonForm.types``)."""
    value = without_token_lists(form.value) if form.masked else form.value
    if form.lossy:
        record.metadata[LOSSY_OUTPUT] = True
    if form.truncated:
        record.metadata[TRUNCATED] = record.metadata[TRUNCATED_OUTPUT] = True
    if form.binary:
        record.metadata[BINARY_OUTPUT] = True
    if form.types:
        record.metadata[OUTPUT_TYPES] = dict(form.types)
    record.output_raw = value


def _settle_stream(
    capture_output: bool,
    redaction: Redaction,
    started_ns: int,
    incomplete: bool,
    record: CallRecord,
    kept: object,
) -> None:
    """Record what a stream passed: its metadata, its output (redacted, cut) and, when the
    output is stored exactly as assembled, its chunks (``RecordedCall.end_stream``). ``kept``:
    the ``StreamCapture`` and its items (so that the queue's memory bound counts them)."""
    capture = cast("tuple[StreamCapture, object]", kept)[0]
    output = capture.output(redaction)
    record.metadata.update(capture.metadata(started_ns, incomplete))
    if not capture_output:
        record.metadata[OUTPUT_NOT_RECORDED] = True
        return
    if capture.items is not None:
        stored = capture.stored_items(output, redaction)
        if stored is None:  # stored other than assembled, or they spell a secret
            record.metadata[CHUNKS_REBUILT] = True
        else:
            shared, chunks = stored
            if shared:
                record.metadata[SHARED_CHUNK_FIELDS] = shared
            record.metadata[CHUNKS] = chunks
    if capture.truncated:  # the output, or only the chunks kept beside it
        record.metadata[TRUNCATED] = True
    truncated = capture.truncated and holds_cut(output)
    _keep_output(record, JsonForm(output, capture.lossy, truncated, masked=capture.masked))


def _replay_outside_context(name: str) -> ActiveReplay | None:
    """The replay a call with none in its context belongs to, while replays are active.

    During a replay nothing may run live or be recorded, from any thread: the only active replay
    takes a call made outside any request span; with several, there is no telling which, so the
    call is refused.
    """
    replays = ACTIVE_REPLAYS.snapshot()
    if len(replays) <= 1:
        return replays[0] if replays else None
    raise ReplayError(
        f"replay: {name!r} was called with no replay in its context while {len(replays)} replays "
        "are active in this process, so it can neither be stubbed by the right one nor run live "
        "(a replay records and runs nothing it was not asked to). Start the work inside the "
        "replay it belongs to (threads, executors and run_in_executor started there carry it; "
        "chronicle.propagate(fn) carries it anywhere), or run one replay at a time"
    )


# The replay's live call (``replay/calls.py``, not compiled) derives from it.
@mypyc_attr(allow_interpreted_subclasses=True)
class UnrecordedCall:
    """A live call that records nothing: the hooks run around it, and ``keep`` sees the result.

    Used when recording is off, and for a replay's cut-points (which keep their result).
    """

    stubbed = False

    def __init__(
        self,
        spec: CallSpec,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        hooks: tuple[Hook, ...],
        info: CallInfo,
        fail_on_error: bool,
        keep: Callable[[object], None] | None = None,
    ) -> None:
        self.args, self.kwargs = args, kwargs
        self._keep = keep
        self._format = spec.stream_format
        self._capture: StreamCapture | None = None
        self._ended = False
        self._runner: HookRunner | None = None
        if hooks:
            self._runner = HookRunner(hooks, info, fail_on_error)
            patches = self._runner.enter(spec.binder.accepts)
            if patches:
                self.args, self.kwargs = spec.binder.patch(args, kwargs, patches)

    def stub_result(self) -> object:
        """``Call.stub_result``: a live call has none."""
        raise AssertionError("a live call has no stub")

    def complete(self, result: object) -> object:
        """``Call.complete``: the function returned ``result``."""
        handed = _hand_off(self._format, result, self)
        if handed is not None:
            return handed
        self.end_with(result)
        return result

    def fail(self, error: BaseException) -> None:
        """``Call.fail``: the function raised ``error``."""
        self._ended = True
        if self._runner is not None:
            self._runner.leave()

    # ---- a stream's end (see recording/stream.py) ------------------------------------------

    def step_context(self) -> otel_context.Context | None:
        """No context: nothing is recorded around the steps."""
        return None

    def item_keeper(self) -> Callable[[object], None]:
        """Each item is kept for the assembled output hooks see."""
        return _keeper(self, self._format)

    def end_stream(self, error: BaseException | None = None, *, incomplete: bool = False) -> None:
        """The stream ended: ``crossing`` with the assembled output, then ``leave``."""
        if self._ended:
            return
        if error is not None:
            self.fail(error)
            return
        capture = self._capture or _new_capture(self._format)
        self.end_with(_assembled(self._format, capture))

    def end_with(self, result: object) -> None:
        """The result arrived late, whole: ``keep`` it, ``crossing``, ``leave``."""
        if self._ended:
            return
        self._ended = True
        if self._keep is not None:
            self._keep(result)
        if self._runner is not None:
            try:
                self._runner.crossing(result)
            finally:
                self._runner.leave()


def _hand_off(fmt: StreamFormat | None, result: object, call: StreamingCall) -> object:
    """The stream wrapper for ``result`` if the format sees a stream in it, else ``None``."""
    if fmt is None:
        return None
    try:
        return fmt.hand_off(result, call)
    except Exception:
        logger.exception("could not wrap a streamed result; it passes unrecorded")
        return None


def _new_capture(fmt: StreamFormat | None) -> StreamCapture:
    assert fmt is not None  # only calls whose format handed a stream off capture one
    return StreamCapture(fmt, runtime.current().settings.max_payload_bytes)


def _keeper(
    call: UnrecordedCall | RecordedCall, fmt: StreamFormat | None
) -> Callable[[object], None]:
    """``call``'s item keeper: the ``add`` of a new capture; never raises (a capture that cannot
    be made is logged, and the items pass unkept)."""
    try:
        capture = call._capture = _new_capture(fmt)
    except Exception:
        logger.exception("could not keep a stream's items; the recording misses them")
        return _unkept
    return capture.add  # (never raises; this runs once per item)


def _unkept(item: object) -> None:
    pass


def _assembled(fmt: StreamFormat | None, capture: StreamCapture) -> object:
    """What hooks see of a finished stream: the assembled output (not redacted), as the format
    restores it."""
    try:
        output = capture.output(None)
        if fmt is not None and fmt.assembled is not None:
            return fmt.assembled(output)
        return output
    except Exception:
        logger.exception("could not assemble a stream's output for the hooks")
        return None


_NOT_SERVED = frozenset({SEQUENCE, INVOCATION, ENTRY, LOSSY_INPUT, REPLAYED_FROM})
"""Recorded metadata a served call does not take over: its own numbering, entry and input."""


class RecordedCall:
    """A recorded call: its boundary span, its ``CallRecord``, and its hooks.

    ``start`` opens the span (before the body runs) and captures the input; ``capture_result``
    or ``capture_error`` fill the record; ``release`` restores the caller's context (at return);
    ``end`` ends the span, which hands the record to delivery, then runs ``record`` and ``leave``
    hooks and closes an implicit request span.
    """

    stubbed = False
    keep: Callable[[object], None] | None = None
    """Sees the live result (a replay that records keeps it for ``captured_result``)."""

    def __init__(
        self,
        spec: CallSpec,
        rt: runtime.Runtime,
        session: Session,
        ctx: otel_context.Context,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        implicit: RequestSpan | None,
    ) -> None:
        self.spec = spec
        self.rt = rt
        self.session = session
        self.args, self.kwargs = args, kwargs
        self._ctx = ctx
        self._implicit = implicit
        sequence, invocation = session.next_call(spec.name)
        frame = current_frame_in(ctx)
        attempt = current_attempt_in(ctx)
        retried = attempt is not None and attempt.frame is frame
        self.record = CallRecord(
            name=spec.name,
            kind=spec.kind,
            trace_id=session.trace_id,
            span_id=session.span_id,
            parent_envelope_id=(
                frame.envelope_id if frame is not None and frame.session is session else None
            ),
            sequence=sequence,
            invocation=invocation,
            attempt=attempt.number if retried and attempt is not None else 1,
            retry_of=attempt.of if retried and attempt is not None else None,
            adapter=spec.adapter if spec.kind == "llm" else None,
        )
        if self.record.parent_envelope_id is None:  # no boundary encloses it: the span's entry
            entry = getattr(spec, "entry", None)
            if entry is not None:
                self.record.metadata[ENTRY] = entry
        self.envelope_id = ""
        self._started_ns = 0
        self._span: trace_api.Span | None = None
        self._span_name = ""
        self._body_ctx: otel_context.Context | None = None
        self._token: object = None
        self._runner: HookRunner | None = None
        self._failure: BaseException | None = None
        self._capture: StreamCapture | None = None
        self._ended = False
        self._display = rt.display
        """Spans reach another exporter (read once: the call shows its JSON on the span)."""
        self._later = _walks_later(self._display, rt.redaction)
        """Captures without hooks are snapshotted and walked with the envelope (``defer``)."""

    # ---- start ----------------------------------------------------------------------------

    def start(self, *, hooks: bool = True) -> None:
        """Open the span, capture the input, run ``enter`` hooks (``AbortCall`` ends the call).

        ``hooks=False``: no hook runs (a call a replay serves runs no code and no hooks)."""
        spec, rt, record = self.spec, self.rt, self.record
        try:
            self._started_ns = time.time_ns()
            bound = spec.binder.bind(self.args, self.kwargs)
            # The attributes are for other exporters only: with none, the span goes without.
            display = self._display
            name, attributes = spec.span_name, spec.start_attributes
            if spec.kind == "tool":
                call_id = take_tool_call_id(self.session, spec.name)
                if call_id is not None and display:
                    attributes = genai.with_tool_call_id(attributes, call_id)
            else:  # named by the model the call asks for, known now for sampling
                model = bound.get("model") or bound.get("modelId")  # Bedrock's
                if isinstance(model, str) and model:
                    name = genai.llm_span_name(model, spec.span_name)  # the operation
                    if display:
                        attributes = {**attributes, GEN_AI_REQUEST_MODEL: model}
            context = otel_context.set_value(RECORD_KEY, record, self._ctx)
            link = rt.link
            if self.session.unsampled and link is not None:  # held: the sampler is not asked
                span = link.start_unsampled(name, context, spec.span_kind, self._started_ns)
            else:
                span = rt.tracer.start_span(
                    name,
                    context=context,
                    kind=spec.span_kind,
                    attributes=attributes if display else None,
                    start_time=self._started_ns,
                )
            self._span = span
            self._span_name = name
            if display and not span.is_recording():
                # Dropped by the sampler (held for keeping): no exporter sees this span, so
                # nothing is shown on it, and the capture waits as it does for Chronicle alone.
                display = self._display = False
                self._later = _walks_later(False, rt.redaction)
            span_context = span.get_span_context()
            self.envelope_id = (
                hex_id(span_context.span_id, 16) if span_context.is_valid else new_envelope_id()
            )
            # Code in the body writes on the span through the context: give it the redacting one.
            visible = RedactingSpan(span, rt.redaction) if display else span
            body_ctx = otel_context.set_value(
                FRAME_KEY,
                Frame(self.envelope_id, self.session, spec.kind),
                trace_api.set_span_in_context(visible, self._ctx),
            )
            self._body_ctx = body_ctx
            self._token = otel_context.attach(body_ctx)
            running = self.session.hooks.snapshot() if hooks else ()
            arguments = self._capture_input(bound, for_hooks=bool(running))
        except Exception:
            logger.exception("could not record the start of %r", spec.name)
            return
        if not running:
            return
        info = call_info(
            spec,
            arguments,
            invocation=record.invocation,
            attempt=record.attempt,
            session=self.session,
            envelope_id=self.envelope_id,
        )
        self._runner = runner = HookRunner(
            running, info, rt.settings.hooks_fail_call_on_error, rt.redaction.text
        )
        try:
            patches = runner.enter(spec.binder.accepts)
        except BaseException as exc:  # AbortCall, strict-mode hook errors, KeyboardInterrupt
            self._runner = None  # enter did not succeed: no leave
            self.fail(exc)
            raise
        if patches:
            self.args, self.kwargs = spec.binder.patch(self.args, self.kwargs, patches)
            try:
                self._capture_input(spec.binder.bind(self.args, self.kwargs), for_hooks=False)
            except Exception:
                logger.exception("could not capture the patched input of %r", spec.name)

    def _capture_input(
        self, bound: Mapping[str, object], *, for_hooks: bool
    ) -> dict[str, JsonValue]:
        """Store the redacted JSON input; return the unredacted JSON arguments for hooks."""
        spec, settings, record = self.spec, self.rt.settings, self.record
        arguments: dict[str, JsonValue] = {}
        if for_hooks:
            unredacted = json_arguments(bound).value
            arguments = unredacted if isinstance(unredacted, dict) else {}
        if not settings.capture_input:
            record.input_raw = {}
            return arguments
        value, extracted = _input_of(spec, bound)
        limit, redaction = settings.max_payload_bytes, self.rt.redaction
        if not for_hooks and self._runner is None and self._later:
            frozen = snapshot(value, limit)
            if frozen is not None:
                settle = functools.partial(_settle_input, extracted, limit, redaction)
                record.defer(frozen, settle)
                return arguments
        _keep_input(record, _input_form(value, extracted, limit, redaction))
        if self._span is not None and self._display:
            self._span.set_attribute("input.value", dumps(record.input_raw))
        return arguments

    # ---- the two endings ------------------------------------------------------------------

    def stub_result(self) -> object:
        """``Call.stub_result``: a live call has none."""
        raise AssertionError("a live call has no stub")

    def complete(self, result: object) -> object:
        """``Call.complete``: the function returned ``result``."""
        handed = _hand_off(self.spec.stream_format, result, self)
        if handed is not None:  # the call ends with the stream (end_stream)
            self.release()
            return handed
        try:
            self.capture_result(result)  # a crossing hook may raise (AbortCall, strict mode)
        finally:
            self.release()
            self.end()
        return result

    def fail(self, error: BaseException) -> None:
        """``Call.fail``: the function raised ``error``."""
        self._ended = True
        self.capture_error(error)
        self.release()
        self.end()

    def capture_result(self, result: object) -> None:
        """Record ``result`` (redacted JSON form) and run ``crossing`` hooks with the live value.

        The output's encodings (``wire.OUTPUT_TYPES``) are recorded unless the spec rebuilds
        its results from JSON itself (a wrapped client's ``restore``; ``codecs.records_types``).
        With ``capture_output`` off, the envelope says the output was not recorded.
        """
        spec, settings = self.spec, self.rt.settings
        try:
            if settings.capture_output:
                value = spec.extract_result(result) if spec.extract_result is not None else result
                limit, redaction = settings.max_payload_bytes, self.rt.redaction
                types = records_types(spec.restore)
                frozen = None
                if self._runner is None and self._later:
                    frozen = snapshot(value, limit) or _dumped(value, types, limit)
                if frozen is not None:
                    settle = functools.partial(_settle_output, limit, redaction, types)
                    self.record.defer(frozen, settle)
                else:
                    self._store_output(_output_form(value, limit, redaction, types))
            else:
                self.record.metadata[OUTPUT_NOT_RECORDED] = True
            self._user_metadata(result)
        except Exception:
            logger.exception("could not capture the result of %r", spec.name)
        self._crossing(result)

    def _crossing(self, result: object) -> None:
        """Run ``crossing`` hooks with the live result. An ``AbortCall`` (or a hook's error in
        strict mode) reaches the caller, so the call is recorded as that failure, not a success
        (its output stays recorded beside the error). A ``BaseException`` that is not an
        ``Exception`` passes through: the call itself returned."""
        if self.keep is not None:
            self.keep(result)
        runner = self._runner
        if runner is None:
            return
        try:
            runner.crossing(result)
        except Exception as exc:
            self.capture_error(exc)
            raise

    def _store_output(self, form: JsonForm) -> None:
        """``_keep_output`` on this call's record, and ``_show_output``."""
        _keep_output(self.record, form)
        self._show_output()

    def _show_output(self) -> None:
        """The recorded output on the span as ``output.value``, for another exporter."""
        if self._span is not None and self._display:
            self._span.set_attribute("output.value", dumps(self.record.output_raw))

    # ---- a stream's end (see recording/stream.py) ------------------------------------------

    def step_context(self) -> otel_context.Context | None:
        """The boundary's context, attached around each step of its stream."""
        return self._body_ctx

    def item_keeper(self) -> Callable[[object], None]:
        """Each item the stream passes is kept (bounded) in the call's capture, made here."""
        return _keeper(self, self.spec.stream_format)

    def end_stream(self, error: BaseException | None = None, *, incomplete: bool = False) -> None:
        """The stream ended: record what it passed, then end the call as ``complete`` would.

        ``error``: the stream raised it (a failure; what was received is kept beside the error).
        ``incomplete``: it stopped before its end. Only the first end counts. With
        ``capture_output`` off, the envelope says the output was not recorded. The chunks are
        stored only when the output is stored exactly as the stream assembled it: when its
        redaction masked anything (a secret the model may have split across deltas, where no
        per-chunk redaction sees it whole) or a string was cut, none are stored
        (``chronicle.chunks_rebuilt``) and a replay rebuilds them from the output. A ``crossing``
        hook's ``AbortCall`` propagates to whoever ended the stream.
        """
        if self._ended:
            return
        self._ended = True  # a second end (close after exhaustion, GC) does nothing
        spec, settings, record = self.spec, self.rt.settings, self.record
        assembled: object = None
        try:
            capture = self._capture or _new_capture(spec.stream_format)
            redaction = self.rt.redaction
            needs_assembled = (
                self._runner is not None
                or spec.extract_metadata is not None
                or self.keep is not None
            )
            # The chunks are all in JSON form now (``items`` converts the live ones still held):
            # what is left (the output's redaction, the chunks' shared fields) may wait for the
            # envelope, as a call's capture does, unless something here needs it.
            kept = capture.items
            settle = functools.partial(
                _settle_stream, settings.capture_output, redaction, self._started_ns, incomplete
            )
            if self._later and not needs_assembled and kept is not None:
                record.defer((capture, kept), settle)
            else:
                settle(record, (capture, kept))
                if settings.capture_output:
                    self._show_output()
            if needs_assembled:
                assembled = _assembled(spec.stream_format, capture)
        except Exception:
            logger.exception("could not capture the stream of %r", spec.name)
        self._capture = None
        if error is not None:
            self.capture_error(error)
            self.end()
            return
        try:
            self._user_metadata(assembled)
            self._crossing(assembled)
        finally:
            self.end()

    def end_with(self, result: object) -> None:
        """The result arrived late, whole (a response body read after return): record it, end."""
        if self._ended:
            return
        self._ended = True
        try:
            self.capture_result(result)
        finally:
            self.end()

    def serve(self, recorded: Envelope) -> None:
        """A replay served this call from ``recorded``: its recorded output (or failure) and
        the metadata that describes it become this call's, marked ``chronicle.replayed_from``
        with the recorded envelope's id. The call is then released and ended (no hook runs)."""
        record = self.record
        try:
            output = recorded.output
            record.output_raw = output.raw if output is not None else None
            error = output.error if output is not None else None
            if recorded.envelope_status.status is EnvelopeStatus.FAILURE:
                record.error = (
                    (error.type, error.message) if error is not None else ("Exception", "")
                )
            for key, value in recorded.metadata.items():
                if key not in _NOT_SERVED:
                    record.metadata.setdefault(key, value)
            record.metadata[REPLAYED_FROM] = recorded.envelope_id
        except Exception:
            logger.exception("could not record the served call %r", self.spec.name)
        self.release()
        self.end()

    def capture_error(self, error: BaseException) -> None:
        """Record the failure (type and redacted message) on the record and the span."""
        self._failure = error
        try:
            settings = self.rt.settings
            fields = error_fields(error, self.rt.redaction, settings.max_payload_bytes)
            self.record.error = fields
            self.record.metadata[ERROR] = failure_detail(
                error, self.rt.redaction, settings.max_payload_bytes
            )
            self._user_metadata(None)
            if self._span is not None:
                self._span.set_status(Status(StatusCode.ERROR, fields[0]))
                self._span.add_event(
                    "exception", {"exception.type": fields[0], "exception.message": fields[1]}
                )
        except Exception:
            logger.exception("could not capture the failure of %r", self.spec.name)

    def _user_metadata(self, result: object) -> None:
        spec, metadata = self.spec, self.record.metadata
        if spec.static_metadata:
            metadata.update(spec.static_metadata)
        if spec.extract_metadata is None:
            return
        try:
            extra = spec.extract_metadata(result)
        except Exception:
            logger.exception("extract_metadata of %r failed; metadata skipped", spec.name)
            return
        redaction = self.rt.redaction
        accepted: dict[str, object] = {}
        for key, value in dict(extra or {}).items():
            if not isinstance(key, str) or key.startswith(RESERVED_PREFIX):
                logger.error(
                    "extract_metadata of %r returned the key %r, which is not a string "
                    "or uses the reserved %r prefix; it was skipped, rename it",
                    spec.name,
                    json_form(key, max_string_bytes=200, redaction=redaction).value,
                    RESERVED_PREFIX,
                )
                continue
            accepted[key] = value
        if not accepted:
            return
        # Like a payload: redacted, bounded, flagged.
        limit = self.rt.settings.max_payload_bytes
        form = json_form(
            accepted, max_string_bytes=limit, max_total_bytes=limit, redaction=redaction
        )
        if isinstance(form.value, dict):
            metadata.update(form.value)
        if form.lossy:
            metadata[LOSSY_METADATA] = True
        if form.truncated:
            metadata[TRUNCATED] = True

    def release(self) -> None:
        """Restore the context the call started in (where the function returned)."""
        token, self._token = self._token, None
        detach(token, "boundary")
        if self._implicit is not None:
            self._implicit.release()

    def end(self) -> None:
        """End the span (delivery gets the record), then ``record`` and ``leave`` hooks."""
        self._ended = True
        span, self._span = self._span, None
        runner = self._runner
        try:
            ended_ns = time.time_ns()
            if span is not None:
                if self.spec.kind == "llm" and self._display:
                    # Only another exporter shows these; the envelope is derived on the worker.
                    self._set_llm_attributes(span)
                elif self._display and self.rt.genai_content:
                    record = self.record
                    span.set_attributes(
                        genai.tool_attributes(record.input_raw, record.output_raw, content=True)
                    )
                span.end(end_time=ended_ns)
            if runner is not None and runner.wants_record():
                runner.record(self.envelope(ended_ns))
        except AbortCall:
            raise
        except Exception:
            logger.exception("could not finish recording %r", self.spec.name)
        finally:
            if runner is not None:
                runner.leave()
            if self._implicit is not None:
                self._implicit.close(self._failure)
            # The record waits in the delivery queue: let go of the live call (its arguments,
            # context and hooks) so the queue holds only the captured JSON.
            self.args, self.kwargs = (), {}
            self._runner = self._implicit = self._failure = None
            self._ctx = otel_context.Context()
            self._body_ctx = None

    def envelope(self, ended_ns: int | None) -> Envelope:
        """The envelope this call sends (closed at ``ended_ns``), as ``record`` hooks see it."""
        return envelope_entity(self.record, self.envelope_id, self._started_ns, ended_ns)

    def _set_llm_attributes(self, span: trace_api.Span) -> None:
        try:
            llm_input, llm_output = self.record.canonical()
            below = counted_below(span.get_span_context().span_id)  # another span has the usage
            attributes = llm_span_attributes(llm_input, llm_output)
            span.set_attributes(demoted(attributes) if below else attributes)
            span.set_attributes(
                genai.llm_attributes(
                    llm_input, llm_output, content=self.rt.genai_content, usage=not below
                )
            )
            if below:  # no model call of its own: named by its boundary
                demote_span(span, self.spec.name)
            elif llm_input.model != UNKNOWN_MODEL:
                # The model as recorded (redacted; read by the adapter where the arguments did
                # not name it) names the span.
                name = genai.llm_span_name(llm_input.model, self.spec.span_name)
                if name != self._span_name:
                    span.update_name(name)
            offer_tool_calls(self.session, genai.requested_tool_calls(llm_output))
        except Exception:
            logger.debug("no LLM attributes for %r", self.spec.name, exc_info=True)
