"""``@boundary`` and ``wrap_llm``: a decision point becomes a span and an envelope.

A ``BoundarySpec`` says what a wrapped function is (its name, kind, extractors, how to name its
arguments, how a replay rebuilds its result, how its streams are kept); ``spec.wrapper()`` is the
function callers get, which drives each call through the lifecycle in ``recording/call.py``. The
caller gets the real return value or the real exception, always.

A generator function (or async generator function) stays one: its call starts on the first
``next``, like the generator's body, and ends when the generator is exhausted, closed or
garbage-collected; its output is the list of yielded values (``recording/stream.py``).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from typing import Any, Literal, TypeVar, cast, overload

from opentelemetry.trace import SpanKind
from pydantic import JsonValue

from chronicle.agent import register_tool
from chronicle.llm.canonical import LlmAdapter
from chronicle.llm.generic import GenericAdapter
from chronicle.otel import genai, openinference
from chronicle.recording.arguments import ArgumentBinder
from chronicle.recording.call import begin_call, run_async, run_sync
from chronicle.recording.failure import RestoreError
from chronicle.recording.hooks import Kind
from chronicle.recording.stream import GENERATOR_RESULTS, Flavor, StreamFormat, generator_format
from chronicle.redaction import redact_secrets
from chronicle.wire import valid_text

F = TypeVar("F", bound=Callable[..., Any])

ExtractInput = Callable[[Mapping[str, object]], object]
ExtractResult = Callable[[object], object]
ExtractMetadata = Callable[[object], Mapping[str, object]]

_KINDS = ("tool", "llm")
_UNRESOLVED = object()


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
        restore_error: RestoreError | None = None,
        is_async: bool | None = None,
        stream_format: StreamFormat | None = None,
    ) -> None:
        """``restore`` rebuilds a stubbed result from ``output.raw`` (an SDK type, say), in place of
        the return annotation; ``restore_error`` rebuilds a recorded failure (the SDK's own
        exception, say) before the generic rebuild by class.

        ``is_async`` says whether ``fn`` returns an awaitable; ``None`` detects it from ``fn``
        (and what it wraps), which misses a plain function that returns a coroutine (the async
        SDK clients' methods are such): pass ``True`` for those. ``stream_format`` says how its
        streamed results are kept and replayed; by default a generator (from a generator
        function or not) is kept as the list of its items.
        """
        self.fn = fn
        self.generator: Flavor | None = _generator_flavor(fn)
        self.is_async = _detect_async(fn) if is_async is None else is_async
        if stream_format is None:
            stream_format = (
                GENERATOR_RESULTS if self.generator is None else generator_format(self.generator)
            )
        self.stream_format: StreamFormat | None = stream_format
        # It is sent, and may be built at run time (``boundary(f"fetch {url}")``): redacted with
        # the default shapes (the spec may exist before ``configure``), and valid Unicode.
        self.name = valid_text(redact_secrets(name))
        self.kind: Kind = kind
        self.provider = provider
        self.extract_input = extract_input
        self.extract_result = extract_result
        self.extract_metadata = extract_metadata
        self.binder = ArgumentBinder(fn)
        self.entry: str | None = import_path(fn)
        """``module:QualName`` of ``fn``, recorded when a call is its span's entry
        (``wire.ENTRY``); ``None`` when ``fn`` has no module or name."""
        self.static_metadata: dict[str, JsonValue] = dict(metadata or {})
        self.restore: Callable[[JsonValue], object] | None = restore
        self.restore_error = restore_error
        self._adapter = adapter
        self._return_annotation: object = _UNRESOLVED
        self.start_attributes: dict[str, genai.AttributeValue] = {
            openinference.SPAN_KIND: openinference.KIND_OF[kind],
            "input.mime_type": "application/json",
            "output.mime_type": "application/json",
            genai.BOUNDARY: self.name,
        }
        # Spans are named by the OpenTelemetry GenAI convention: a tool's name is fixed here, a
        # model call's is ``chat {model}`` with the model its call passes (``chat`` without one).
        self.span_name: str
        self.span_kind: SpanKind
        if kind == "tool":
            self.start_attributes["tool.name"] = self.name
            self.start_attributes.update(genai.tool_start_attributes(self.name))
            self.span_name, self.span_kind = genai.tool_span_name(self.name), SpanKind.INTERNAL
        else:
            served_by = provider or getattr(adapter, "provider", None)
            self.start_attributes.update(genai.llm_start_attributes(served_by))
            # With no model an llm span is named by its operation alone: ``span_name`` is it.
            operation = genai.operation_for(served_by)
            self.span_name, self.span_kind = genai.llm_span_name(None, operation), SpanKind.CLIENT

    @property
    def adapter(self) -> LlmAdapter:
        """The one-way adapter from raw to canonical ``llm`` fields."""
        if self._adapter is None:
            self._adapter = GenericAdapter(self.provider)
        return self._adapter

    @property
    def return_annotation(self) -> object:
        """The function's return annotation, resolved once; ``None`` when absent or unresolvable.

        Resolved on first use, not at decoration time, so annotations naming classes defined
        later in the module work. A replay rebuilds stubbed results through it.
        """
        if self._return_annotation is _UNRESOLVED:
            try:
                hints = typing.get_type_hints(self.fn)
            except Exception:  # a name only imported under TYPE_CHECKING, say
                hints = {}
            self._return_annotation = hints.get("return")
        return self._return_annotation

    def wrapper(self) -> Callable[..., Any]:
        """The function callers get: each call is recorded, stubbed or run as the context says."""
        fn = self.fn
        if self.generator == "sync":
            return self._generator_wrapper()
        if self.generator == "async":
            return self._async_generator_wrapper()
        if self.is_async:

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                call = begin_call(self, args, kwargs)
                if call is None:
                    return await fn(*args, **kwargs)
                if call.stubbed:
                    return call.stub_result()
                return await run_async(call, fn)

            async_wrapper.__chronicle_boundary__ = self  # type: ignore[attr-defined]
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call = begin_call(self, args, kwargs)
            if call is None:
                return fn(*args, **kwargs)
            if call.stubbed:
                return call.stub_result()
            return run_sync(call, fn)

        wrapper.__chronicle_boundary__ = self  # type: ignore[attr-defined]
        return wrapper

    def _generator_wrapper(self) -> Callable[..., Any]:
        fn = self.fn

        # A generator function: the call begins on the first next(), where the body would.
        @functools.wraps(fn)
        def generator_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            call = begin_call(self, args, kwargs)
            if call is None:
                return (yield from fn(*args, **kwargs))
            if call.stubbed:
                return (yield from cast(Generator[Any, Any, Any], call.stub_result()))
            return (yield from run_sync(call, fn))  # complete() handed back a RecordedGenerator

        generator_wrapper.__chronicle_boundary__ = self  # type: ignore[attr-defined]
        return generator_wrapper

    def _async_generator_wrapper(self) -> Callable[..., Any]:
        fn = self.fn

        @functools.wraps(fn)
        async def async_generator_wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
            call = begin_call(self, args, kwargs)
            inner: Any
            if call is None:
                inner = fn(*args, **kwargs)
            elif call.stubbed:
                inner = call.stub_result()
            else:
                inner = run_sync(call, fn)  # complete() handed back a RecordedAsyncGenerator
            # ``yield from`` for async generators: forward each step, sent value and exception.
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                try:
                    item = await (inner.athrow(thrown) if thrown is not None else inner.asend(sent))
                except StopAsyncIteration:
                    return
                thrown = None
                try:
                    sent = yield item
                except GeneratorExit:
                    await inner.aclose()
                    raise
                except BaseException as exc:  # thrown into this generator: pass it on
                    thrown = exc

        async_generator_wrapper.__chronicle_boundary__ = self  # type: ignore[attr-defined]
        return async_generator_wrapper


# ---- the decorator and wrap_llm ---------------------------------------------------------------


def import_path(fn: Callable[..., Any]) -> str | None:
    """``module:QualName`` of a function (a method's class included), or ``None``."""
    target = getattr(fn, "__func__", fn)  # a bound method: its function
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str):
        return None
    return valid_text(f"{module}:{name}")


def _generator_flavor(fn: Callable[..., Any]) -> Flavor | None:
    """``sync`` for a generator function, ``async`` for an async one (seen through wrappers)."""
    try:
        target = inspect.unwrap(fn)
    except ValueError:  # a __wrapped__ cycle
        target = fn
    for candidate in (fn, target):
        if inspect.isasyncgenfunction(candidate):
            return "async"
        if inspect.isgeneratorfunction(candidate):
            return "sync"
    return None


def _detect_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    try:
        return inspect.iscoroutinefunction(inspect.unwrap(fn))
    except ValueError:  # a __wrapped__ cycle
        return False


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

    On a generator (or async generator) function the call begins on the first ``next`` and ends
    when the generator is exhausted, closed or collected; the output is the list of yielded
    values in JSON form (``extract_result`` is not applied; ``extract_metadata`` gets that list).
    """
    checked = _check_kind(kind)

    def decorate(fn: F, boundary_name: str | None) -> F:
        if isinstance(fn, (staticmethod, classmethod)):
            inner = decorate(fn.__func__, boundary_name)
            return type(fn)(inner)
        if not callable(fn):
            raise TypeError(_not_a_function(fn))
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
        if checked == "tool":
            register_tool(resolved, fn)
        return cast(F, spec.wrapper())

    if callable(name) or isinstance(name, (staticmethod, classmethod)):
        return decorate(cast(Any, name), None)
    if name is not None and not isinstance(name, str) and type(name).__module__ != "builtins":
        raise TypeError(_not_a_function(name))  # bare @boundary over a framework's tool object
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"boundary name must be a non-empty string, got {name!r}")
    return lambda fn: decorate(fn, name)


_INSTRUMENTORS = {
    "agents": "openai_agents",
    "pydantic_ai": "pydantic_ai",
    "langchain": "langchain",
    "langchain_core": "langchain",
    "llama_index": "llama_index",
    "smolagents": "smolagents",
    "autogen_core": "autogen",
    "autogen_agentchat": "autogen",
    "google": "google_adk",
    "crewai": "crewai",
    "mcp": "mcp",
}
"""The ``chronicle.instrument_<name>()`` of each framework, by its package (a tool object's)."""


def _not_a_function(obj: object) -> str:
    kind = type(obj)
    framework = _INSTRUMENTORS.get(kind.__module__.split(".")[0])
    instead = (
        f"or drop it and call chronicle.instrument_{framework}() once, which records every tool "
        "the framework runs"
        if framework
        else "or decorate the function itself"
    )
    return (
        f"@boundary decorates a function, got {kind.__name__}: put @chronicle.boundary below the "
        f"framework's decorator (directly on the function), {instead}"
    )


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
    return cast(F, spec.wrapper())
