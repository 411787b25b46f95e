"""``@boundary`` and ``wrap_llm``: a decision point becomes a span and an envelope.

The crossing of one call, in order:

1. The span opens *before* the body runs (so anything the body calls nests under it), numbered
   in its request span (``chronicle.sequence``, ``chronicle.invocation_index``).
2. Arguments are named (``capture.ArgumentBinder``), put in JSON form, and redacted.
3. Hooks' ``enter`` run; their keyword patches apply; ``AbortCall`` stops the call here.
4. The body runs. The caller gets its real return value or its real exception, always.
5. The result (or the error) is captured and redacted, ``crossing`` hooks run, the span ends and
   its record is queued for delivery, ``record`` and ``leave`` hooks run.

During a replay the replay run takes over at step 1 (see ``chronicle.replay``). When recording
is off only the hooks run. Nothing in Chronicle's own machinery may break the call: a failure
there is logged and the call goes on unrecorded.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast, overload

from agentplane_primitives.models import Envelope, LlmInput, LlmOutput, OutputError
from agentplane_primitives.utils import new_envelope_id
from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Status, StatusCode
from pydantic import JsonValue

from chronicle import runtime
from chronicle.errors import AbortCall, ReplayError
from chronicle.llm.generic import GenericAdapter
from chronicle.otel.context import (
    FRAME_KEY,
    RECORD_KEY,
    current_attempt_in,
    current_frame_in,
    current_replay_in,
    current_session_in,
)
from chronicle.otel.openinference import llm_span_attributes
from chronicle.recording.capture import ArgumentBinder, dumps, json_arguments, json_form
from chronicle.recording.hooks import CallInfo, HookRunner, Kind, default_hooks
from chronicle.recording.session import Frame, Session, SpanScope, hex_id, utc

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import Span as SdkSpan

    from chronicle.llm.canonical import LlmAdapter
    from chronicle.save.delivery import Delivery

logger = logging.getLogger("chronicle")

F = TypeVar("F", bound=Callable[..., Any])

ExtractInput = Callable[[Mapping[str, object]], object]
ExtractResult = Callable[[object], object]
ExtractMetadata = Callable[[object], Mapping[str, object]]

SEQUENCE = "chronicle.sequence"
INVOCATION = "chronicle.invocation_index"
LOSSY_INPUT = "chronicle.lossy_input"
LOSSY_OUTPUT = "chronicle.lossy_output"
TRUNCATED = "chronicle.truncated"
_KINDS = ("tool", "llm")
_SPAN_KIND = {"tool": "TOOL", "llm": "LLM"}


class Call(Protocol):
    """One call in progress, as the wrapper drives it. Only ``begin`` and ``stub_result`` raise."""

    args: tuple[object, ...]
    kwargs: dict[str, object]
    stubbed: bool

    def stub_result(self) -> object: ...

    def succeeded(self, result: object) -> None: ...

    def failed(self, error: BaseException) -> None: ...

    def finish(self) -> None: ...


class BoundarySpec:
    """What a wrapped function is: its name, kind, extractors, and how to name its arguments."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        kind: Kind,
        *,
        provider: str | None = None,
        extract_input: ExtractInput | None = None,
        extract_result: ExtractResult | None = None,
        extract_metadata: ExtractMetadata | None = None,
        adapter: LlmAdapter | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        restore: Callable[[JsonValue], object] | None = None,
        is_async: bool | None = None,
    ) -> None:
        """``restore`` rebuilds a stubbed result from ``output.raw`` (an SDK type, say).

        ``is_async`` says whether ``fn`` returns an awaitable; ``None`` detects it from ``fn``
        (and what it wraps), which misses a plain function that returns a coroutine (the async
        SDK clients' methods are such): pass ``True`` for those.
        """
        self.fn = fn
        self.is_async = _detect_async(fn) if is_async is None else is_async
        self.name = name
        self.kind: Kind = kind
        self.provider = provider
        self.extract_input = extract_input
        self.extract_result = extract_result
        self.extract_metadata = extract_metadata
        self.binder = ArgumentBinder(fn)
        self.static_metadata: dict[str, JsonValue] = dict(metadata or {})
        self.restore: Callable[[JsonValue], object] | None = restore
        self._adapter = adapter
        self.start_attributes: dict[str, str] = {
            "openinference.span.kind": _SPAN_KIND[kind],
            "input.mime_type": "application/json",
            "output.mime_type": "application/json",
        }
        if kind == "tool":
            self.start_attributes["tool.name"] = name

    @property
    def adapter(self) -> LlmAdapter:
        """The one-way adapter from raw to canonical ``llm`` fields."""
        if self._adapter is None:
            self._adapter = GenericAdapter(self.provider)
        return self._adapter

    def begin(self, args: tuple[object, ...], kwargs: dict[str, object]) -> Call | None:
        """Start one call; ``None`` means: just call the function (nothing to do)."""
        try:
            rt = runtime.current()
            ctx = otel_context.get_current()
            replay = current_replay_in(ctx)
            if replay is not None:
                return replay.begin(self, args, kwargs, ctx)
            session = current_session_in(ctx)
            if not rt.recording:
                hooks = (session.hooks if session is not None else default_hooks).snapshot()
                if not hooks:
                    return None
                return HooksOnlyCall(self, rt, session, args, kwargs, hooks)
            scope = None
            if session is None:
                scope = SpanScope(implicit=True)
                session = scope.open()
                ctx = otel_context.get_current()
        except (AbortCall, ReplayError):  # the hook's or the replay's verdict on this call
            raise
        except Exception:
            logger.exception(
                "chronicle: could not start recording %r; the call runs unrecorded", self.name
            )
            return None
        crossing = Crossing(self, rt, session, ctx, args, kwargs, scope)
        crossing.start()
        return crossing


def _error_fields(
    error: BaseException, redact: Callable[[str], str], limit: int
) -> tuple[str, str]:
    kind = "AbortCall" if isinstance(error, AbortCall) else type(error).__name__
    try:
        message = str(error)
    except Exception:
        message = f"<{type(error).__name__} whose str() failed>"
    message = redact(message)
    if len(message.encode()) > limit:
        message = message.encode()[:limit].decode(errors="ignore") + "…[truncated]"
    return kind, message


def _canonical_pair(
    adapter: LlmAdapter, input_raw: JsonValue, output_raw: JsonValue, error: tuple[str, str] | None
) -> tuple[LlmInput, LlmOutput]:
    """Derive the canonical ``llm`` fields; an adapter that fails degrades to raw-only fields."""
    raw = input_raw if isinstance(input_raw, dict) else {}
    try:
        llm_input = adapter.to_input(raw)
    except Exception:
        logger.exception("chronicle: the %s adapter failed on an input; raw kept", adapter.provider)
        model = raw.get("model")
        llm_input = LlmInput(
            model=model if isinstance(model, str) and model else "unknown", messages=[], raw=raw
        )
    if error is not None:
        return llm_input, LlmOutput(error=OutputError(type=error[0], message=error[1]))
    try:
        return llm_input, adapter.to_output(output_raw, llm_input)
    except Exception:
        logger.exception(
            "chronicle: the %s adapter failed on an output; raw kept", adapter.provider
        )
        return llm_input, LlmOutput(raw=output_raw)


class HooksOnlyCall:
    """Recording is off: run the hooks around the call, record nothing."""

    stubbed = False

    def __init__(
        self,
        spec: BoundarySpec,
        rt: runtime.Runtime,
        session: Session | None,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        hooks: tuple[Any, ...],
    ) -> None:
        self.args, self.kwargs = args, kwargs
        invocation = session.next_call(spec.name)[1] if session is not None else 1
        arguments = json_arguments(spec.binder.bind(args, kwargs)).value
        call = CallInfo(
            name=spec.name,
            kind=spec.kind,
            arguments=arguments if isinstance(arguments, dict) else {},
            invocation_index=invocation,
            attempt=1,
            trace_id=session.trace_id if session is not None else None,
            span_id=session.span_id if session is not None else None,
            envelope_id=new_envelope_id(),
            provider=spec.provider,
        )
        self._runner = HookRunner(hooks, call, rt.settings.hooks_fail_call_on_error)
        patches = self._runner.enter()
        if patches:
            self.args, self.kwargs = spec.binder.patch(args, kwargs, patches)
        self._error: BaseException | None = None

    def stub_result(self) -> object:
        raise AssertionError("not a stub")

    def succeeded(self, result: object) -> None:
        self._runner.crossing(result)

    def failed(self, error: BaseException) -> None:
        self._error = error

    def finish(self) -> None:
        self._runner.leave()


class Crossing:
    """A recorded call in progress, and the record the processor saves for its span."""

    stubbed = False

    def __init__(
        self,
        spec: BoundarySpec,
        rt: runtime.Runtime,
        session: Session,
        ctx: otel_context.Context,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        scope: SpanScope | None,
    ) -> None:
        self.spec = spec
        self.rt = rt
        self.session = session
        self.args, self.kwargs = args, kwargs
        self._ctx = ctx
        self._scope = scope
        self.sequence, self.invocation = session.next_call(spec.name)
        frame = current_frame_in(ctx)
        self.parent_envelope_id = (
            frame.envelope_id if frame is not None and frame.session is session else None
        )
        attempt = current_attempt_in(ctx)
        if attempt is not None and attempt.frame is frame:
            self.attempt, self.retry_of = attempt.number, attempt.of
        else:
            self.attempt, self.retry_of = 1, None
        self.envelope_id = ""
        self.input_raw: JsonValue = {}
        self.output_raw: JsonValue = None
        self.error: tuple[str, str] | None = None
        self.metadata: dict[str, JsonValue] = {}
        self._span: trace_api.Span | None = None
        self._token: object = None
        self._runner: HookRunner | None = None
        self._claimed = False
        self._failure: BaseException | None = None
        self._llm: tuple[LlmInput, LlmOutput] | None = None
        self._started_ns = 0
        self._envelope: Envelope | None = None

    # ---- the agent's thread ---------------------------------------------------------------

    def start(self) -> None:
        spec, rt = self.spec, self.rt
        try:
            span = rt.tracer.start_span(
                spec.name,
                context=otel_context.set_value(RECORD_KEY, self, self._ctx),
                attributes=spec.start_attributes,
            )
            self._span = span
            span_context = span.get_span_context()
            self.envelope_id = (
                hex_id(span_context.span_id, 16) if span_context.is_valid else new_envelope_id()
            )
            body_ctx = otel_context.set_value(
                FRAME_KEY,
                Frame(self.envelope_id, self.session, spec.kind),
                trace_api.set_span_in_context(span, self._ctx),
            )
            self._token = otel_context.attach(body_ctx)
            bound = spec.binder.bind(self.args, self.kwargs)
            hooks = self.session.hooks.snapshot()
            arguments = self._capture_input(bound, for_hooks=bool(hooks))
        except Exception:
            logger.exception("chronicle: could not record the start of %r", spec.name)
            return
        if hooks:
            call = CallInfo(
                name=spec.name,
                kind=spec.kind,
                arguments=arguments,
                invocation_index=self.invocation,
                attempt=self.attempt,
                trace_id=self.session.trace_id,
                span_id=self.session.span_id,
                envelope_id=self.envelope_id,
                provider=spec.provider,
            )
            self._runner = runner = HookRunner(hooks, call, rt.settings.hooks_fail_call_on_error)
            try:
                patches = runner.enter()
            except BaseException as exc:  # AbortCall, strict-mode hook errors, KeyboardInterrupt
                self._runner = None  # enter did not succeed: no leave
                self.failed(exc)
                self.finish()
                raise
            if patches:
                self.args, self.kwargs = spec.binder.patch(self.args, self.kwargs, patches)
                try:
                    self._capture_input(spec.binder.bind(self.args, self.kwargs), for_hooks=False)
                except Exception:
                    logger.exception(
                        "chronicle: could not capture the patched input of %r", spec.name
                    )

    def _capture_input(
        self, bound: Mapping[str, object], *, for_hooks: bool
    ) -> dict[str, JsonValue]:
        """Store the redacted JSON input; return the unredacted JSON arguments for hooks."""
        spec, settings = self.spec, self.rt.settings
        limit = settings.max_payload_bytes
        arguments: dict[str, JsonValue] = {}
        if for_hooks:
            unredacted = json_arguments(bound).value
            arguments = unredacted if isinstance(unredacted, dict) else {}
        if not settings.capture_input:
            self.input_raw = {}
            return arguments
        if spec.extract_input is not None:
            form = json_form(spec.extract_input(bound), max_string_bytes=limit)
            value: JsonValue = form.value if isinstance(form.value, dict) else {"value": form.value}
        else:
            form = json_arguments(bound, max_string_bytes=limit)
            value = form.value
        if form.lossy:
            self.metadata[LOSSY_INPUT] = True
        if form.truncated:
            self.metadata[TRUNCATED] = True
        self.input_raw = self.rt.redaction.json(value)
        if self._span is not None and self.rt.display:
            self._span.set_attribute("input.value", dumps(self.input_raw))
        return arguments

    def stub_result(self) -> object:
        raise AssertionError("not a stub")

    def succeeded(self, result: object) -> None:
        spec, settings = self.spec, self.rt.settings
        try:
            if settings.capture_output:
                value = spec.extract_result(result) if spec.extract_result is not None else result
                form = json_form(value, max_string_bytes=settings.max_payload_bytes)
                if form.lossy:
                    self.metadata[LOSSY_OUTPUT] = True
                if form.truncated:
                    self.metadata[TRUNCATED] = True
                self.output_raw = self.rt.redaction.json(form.value)
                if self._span is not None and self.rt.display:
                    self._span.set_attribute("output.value", dumps(self.output_raw))
            self._user_metadata(result)
        except Exception:
            logger.exception("chronicle: could not capture the result of %r", spec.name)
        if self._runner is not None:
            self._runner.crossing(result)

    def failed(self, error: BaseException) -> None:
        self._failure = error
        try:
            settings = self.rt.settings
            self.error = _error_fields(error, self.rt.redaction.text, settings.max_payload_bytes)
            self._user_metadata(None)
            if self._span is not None:
                self._span.set_status(Status(StatusCode.ERROR, self.error[0]))
                self._span.add_event(
                    "exception",
                    {"exception.type": self.error[0], "exception.message": self.error[1]},
                )
        except Exception:
            logger.exception("chronicle: could not capture the failure of %r", self.spec.name)

    def _user_metadata(self, result: object) -> None:
        spec = self.spec
        if spec.static_metadata:
            self.metadata.update(spec.static_metadata)
        if spec.extract_metadata is None:
            return
        try:
            extra = spec.extract_metadata(result)
        except Exception:
            logger.exception(
                "chronicle: extract_metadata of %r failed; metadata skipped", spec.name
            )
            return
        for key, value in dict(extra or {}).items():
            if not isinstance(key, str) or key.startswith("chronicle."):
                logger.error(
                    "chronicle: extract_metadata of %r returned the key %r, which is not a string "
                    "or uses the reserved 'chronicle.' prefix; it was skipped, rename it",
                    spec.name,
                    key,
                )
                continue
            self.metadata[key] = json_form(value).value

    def finish(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception:
                logger.debug("chronicle: boundary context detached out of order", exc_info=True)
        span, self._span = self._span, None
        try:
            if span is not None:
                if self.spec.kind == "llm" and self.rt.display:
                    # Only another exporter shows these; the envelope is derived on the worker.
                    self._set_llm_attributes(span)
                span.end()
            runner = self._runner
            if runner is not None and runner.wants_record():
                runner.record(self.envelope())
        except AbortCall:
            raise
        except Exception:
            logger.exception("chronicle: could not finish recording %r", self.spec.name)
        finally:
            if self._runner is not None:
                self._runner.leave()
            if self._scope is not None:
                self._scope.close(self._failure)
            # The record waits in the delivery queue: let go of the live call (its arguments,
            # context and hooks) so the queue holds only the captured JSON.
            self.args, self.kwargs = (), {}
            self._ctx = self._runner = self._scope = self._failure = None  # type: ignore[assignment]

    def _set_llm_attributes(self, span: trace_api.Span) -> None:
        try:
            llm_input, llm_output = self._canonical()
            span.set_attributes(llm_span_attributes(llm_input, llm_output))
        except Exception:
            logger.debug("chronicle: no LLM attributes for %r", self.spec.name, exc_info=True)

    # ---- the record the processor saves ---------------------------------------------------

    def claim(self) -> bool:
        if self._claimed:
            return False
        self._claimed = True
        return True

    def started(self, span: SdkSpan, delivery: Delivery) -> None:
        self._started_ns = span.start_time or time.time_ns()
        if self.rt.settings.emit_open:
            opened = self._envelope_builder(None)
            delivery.submit_envelope(opened)

    def ended(self, span: ReadableSpan, delivery: Delivery) -> None:
        delivery.submit_envelope(self._envelope_builder(span.end_time or time.time_ns()))

    def envelope(self) -> Envelope:
        """The closed envelope (built once; the delivery worker reuses it)."""
        if self._envelope is None:
            self._envelope = self._build(time.time_ns())
        return self._envelope

    def _envelope_builder(self, ended_ns: int | None) -> Callable[[], Envelope]:
        if ended_ns is None:
            return lambda: self._build(None)
        return lambda: self._envelope if self._envelope is not None else self._build(ended_ns)

    def _canonical(self) -> tuple[LlmInput, LlmOutput]:
        """The ``llm`` canonical input and output, derived once from the redacted raw."""
        if self._llm is None:
            self._llm = _canonical_pair(
                self.spec.adapter, self.input_raw, self.output_raw, self.error
            )
        return self._llm

    def _build(self, ended_ns: int | None) -> Envelope:
        """Make the envelope body and validate it against the primitives model."""
        started = self._started_ns
        status: dict[str, Any] = {"state": "open", "started_at": utc(started)}
        output: Any = None
        if self.spec.kind == "llm":
            llm_input, llm_output = self._canonical()
            input_body: Any = llm_input
            if ended_ns is not None:
                output = llm_output
        else:
            input_body = {"raw": self.input_raw if isinstance(self.input_raw, dict) else {}}
            if ended_ns is not None:
                output = (
                    {"raw": None, "error": {"type": self.error[0], "message": self.error[1]}}
                    if self.error
                    else {"raw": self.output_raw}
                )
        if ended_ns is not None:
            status = {
                "state": "closed",
                "status": "failure" if self.error is not None else "success",
                "started_at": utc(started),
                "ended_at": utc(max(ended_ns, started)),
            }
        metadata: dict[str, JsonValue] = {SEQUENCE: self.sequence, INVOCATION: self.invocation}
        metadata.update(self.metadata)
        body = {
            "envelope_id": self.envelope_id,
            "span_id": self.session.span_id,
            "trace_id": self.session.trace_id,
            "parent_envelope_id": self.parent_envelope_id,
            "name": self.spec.name,
            "kind": self.spec.kind,
            "attempt": self.attempt,
            "links": [{"type": "retry_of", "envelope_id": self.retry_of}] if self.retry_of else [],
            "envelope_status": status,
            "input": input_body,
            "output": output,
            "metadata": metadata,
        }
        return Envelope.model_validate(body)


# ---- the decorator and wrap_llm ---------------------------------------------------------------


def _detect_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    try:
        return inspect.iscoroutinefunction(inspect.unwrap(fn))
    except ValueError:  # a __wrapped__ cycle
        return False


def _wrap(spec: BoundarySpec) -> Callable[..., Any]:
    fn = spec.fn
    if spec.is_async:

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            call = spec.begin(args, kwargs)
            if call is None:
                return await fn(*args, **kwargs)
            if call.stubbed:
                return call.stub_result()
            try:
                result = await fn(*call.args, **call.kwargs)
            except BaseException as exc:
                call.failed(exc)
                raise
            else:
                call.succeeded(result)
                return result
            finally:
                call.finish()

        async_wrapper.__chronicle_boundary__ = spec  # type: ignore[attr-defined]
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = spec.begin(args, kwargs)
        if call is None:
            return fn(*args, **kwargs)
        if call.stubbed:
            return call.stub_result()
        try:
            result = fn(*call.args, **call.kwargs)
        except BaseException as exc:
            call.failed(exc)
            raise
        else:
            call.succeeded(result)
            return result
        finally:
            call.finish()

    wrapper.__chronicle_boundary__ = spec  # type: ignore[attr-defined]
    return wrapper


def _check_kind(kind: object) -> Kind:
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'tool' or 'llm', got {kind!r}")
    return cast(Kind, kind)


@overload
def boundary(name: F, /) -> F: ...


@overload
def boundary(
    name: str | None = None,
    /,
    *,
    kind: Literal["tool", "llm"] = "tool",
    provider: str | None = None,
    extract_input: ExtractInput | None = None,
    extract_result: ExtractResult | None = None,
    extract_metadata: ExtractMetadata | None = None,
) -> Callable[[F], F]: ...


def boundary(
    name: str | Callable[..., Any] | None = None,
    /,
    *,
    kind: Literal["tool", "llm"] = "tool",
    provider: str | None = None,
    extract_input: ExtractInput | None = None,
    extract_result: ExtractResult | None = None,
    extract_metadata: ExtractMetadata | None = None,
) -> Any:
    """Mark a decision point: ``@chronicle.boundary("search", kind="tool")``.

    Works on sync and async functions and methods, bare (``@boundary``, named after the
    function) or with a name. The caller gets the real return value or the real exception.
    ``extract_input(arguments)`` and ``extract_result(result)`` replace what is stored;
    ``extract_metadata(result)`` adds envelope metadata (``result`` is ``None`` on failure).
    ``provider`` names who serves an ``llm`` boundary.
    """
    checked = _check_kind(kind)

    def decorate(fn: F, boundary_name: str | None) -> F:
        if isinstance(fn, (staticmethod, classmethod)):
            inner = decorate(fn.__func__, boundary_name)
            return type(fn)(inner)
        if not callable(fn):
            raise TypeError(f"@boundary decorates a function, got {type(fn).__name__}")
        resolved = str(
            boundary_name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "call")
        )
        spec = BoundarySpec(
            fn,
            resolved,
            checked,
            provider=provider,
            extract_input=extract_input,
            extract_result=extract_result,
            extract_metadata=extract_metadata,
        )
        return cast(F, _wrap(spec))

    if callable(name) or isinstance(name, (staticmethod, classmethod)):
        return decorate(cast(Any, name), None)
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"boundary name must be a non-empty string, got {name!r}")
    return lambda fn: decorate(fn, name)


def wrap_llm(
    name: str,
    fn: F,
    *,
    provider: str | None = None,
    extract_input: ExtractInput | None = None,
    extract_result: ExtractResult | None = None,
    extract_metadata: ExtractMetadata | None = None,
    is_async: bool | None = None,
) -> F:
    """Wrap a plain function that calls a model as an ``llm`` boundary named ``name``.

    The model, messages and provider are read from its arguments when present; an unknown shape
    records ``provider = "unknown"`` and ``usage = null``. ``is_async=True`` is needed only for a
    plain function that returns a coroutine (``async def`` functions are detected).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"wrap_llm name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise TypeError(f"wrap_llm wraps a callable, got {type(fn).__name__}")
    spec = BoundarySpec(
        fn,
        name,
        "llm",
        provider=provider,
        extract_input=extract_input,
        extract_result=extract_result,
        extract_metadata=extract_metadata,
        is_async=is_async,
    )
    return cast(F, _wrap(spec))
