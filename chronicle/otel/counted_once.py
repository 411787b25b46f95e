"""Counted once: when another instrumentation also traces a model call or a tool run, one span
carries it, whichever side of Chronicle's span the other one is on.

Backends add up the token counts (and the cost derived from them) of every span that carries
them, and count the spans that say ``execute_tool`` (or OpenInference kind ``TOOL``) as tool runs.
So when a call is traced twice, by Chronicle's boundary span and by another instrumentation's
span of the same call, exactly one of the two must carry ``gen_ai.usage.*`` and
``llm.token_count.*``, and exactly one may say ``execute_tool`` / ``TOOL``.

**The other span is the child** (OpenInference's OpenAI instrumentor, OpenLLMetry, Logfire's
``instrument_openai`` on a wrapped client): it keeps the LLM kind and the usage. Chronicle's
``ChronicleSpanProcessor`` sees it end (it is on the same provider) while Chronicle's ``llm``
span is still open, and notes it; when Chronicle's span finishes it becomes an OpenInference
``CHAIN`` span without token counts in either vocabulary. Only direct children of a Chronicle
span are considered, and only those that describe a model call: OpenInference kind ``LLM``, or a
GenAI model operation, model or usage attribute.

**The other span is the parent** (a framework that traces itself: pydantic-ai's
``Agent.instrument_all()``, Logfire's ``instrument_pydantic_ai()``, AutoGen's tool spans): it ends
after Chronicle's span, so Chronicle cannot change it, and Chronicle's own span gives way. When
Chronicle's span starts, the processor reads what the parent span carries *at that moment* (a
dict lookup or two, its name at most), and Chronicle's span is demoted when

- it is an ``llm`` boundary and the parent is a model call: ``gen_ai.operation.name`` ``chat``,
  ``generate_content`` or ``text_completion``, or (with no operation name) OpenInference kind
  ``LLM``: the framework's span is trusted to report the usage; or
- it is a ``tool`` boundary and the parent is a tool run (``gen_ai.operation.name``
  ``execute_tool``, or OpenInference kind ``TOOL``, or, with neither yet, the convention's span
  name ``execute_tool {tool}``) of the same tool: the parent's ``gen_ai.tool.name`` (or
  ``tool.name``, or the name in its span name) is the boundary's name or the last part of it (a
  nested function or a method is named by its qualified name, ``Tools.get_weather``), or the
  parent names no tool. A tool boundary named otherwise is another tool, one the framework's tool
  ran, and counts.

"The parent" is the span Chronicle's span starts under, seen through Chronicle's own request
spans: a boundary called outside ``chronicle.record()`` opens an implicit request span around
itself, so the framework's span is then its grandparent, and a request span started under a
framework's model or tool span hands that span on to the boundaries started directly in it.
Other spans in between (a span of your own around the client call) end the search: only the
nearest span counts, in the same process.

Demoted, Chronicle's span stays in the tree with its model, messages and everything linking it
to its envelope, but it is no model call or tool run of its own: it carries no
``gen_ai.operation.name``, its OpenInference kind becomes ``CHAIN``, its span kind ``INTERNAL``,
and it is named by its boundary again (``chat gpt-4o`` becomes ``openai.chat.completions.create``,
``execute_tool search`` becomes ``search``), as ``chronicle.boundary`` also says; an ``llm`` span
ends without token counts in either vocabulary. Only the span changes: the envelope saved to the
control plane is the same either way.

Not recognised: a model-call parent that says what it is only when it ends (Google ADK's
``call_llm`` span gets its GenAI attributes after the model answered; its tool spans are known by
their name), and a tool span that is the child of Chronicle's tool span.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Final

from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from chronicle.wire import CallRecord, Kind, RequestRecord

if TYPE_CHECKING:
    from opentelemetry import context as otel_context

__all__ = [
    "counted_below",
    "demote_span",
    "demoted",
    "forget",
    "is_model_call",
    "note_model_call_below",
    "note_span_started",
    "seen_through",
]

_KIND: Final = SpanAttributes.OPENINFERENCE_SPAN_KIND
_LLM: Final = OpenInferenceSpanKindValues.LLM.value
_TOOL: Final = OpenInferenceSpanKindValues.TOOL.value
_CHAIN: Final = OpenInferenceSpanKindValues.CHAIN.value
_OPERATION: Final = gen_ai.GEN_AI_OPERATION_NAME
_EXECUTE_TOOL: Final = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
_MODEL_OPERATIONS: Final = frozenset(
    value.value
    for value in (
        gen_ai.GenAiOperationNameValues.CHAT,
        gen_ai.GenAiOperationNameValues.TEXT_COMPLETION,
        gen_ai.GenAiOperationNameValues.GENERATE_CONTENT,
    )
)
_MODEL_MARKERS: Final = (
    gen_ai.GEN_AI_REQUEST_MODEL,
    gen_ai.GEN_AI_RESPONSE_MODEL,
    gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
    gen_ai.GEN_AI_USAGE_PROMPT_TOKENS,
)
_USAGE_KEYS: Final = frozenset(
    value
    for name, value in vars(SpanAttributes).items()
    if name.startswith(("LLM_TOKEN_COUNT", "LLM_COST")) and isinstance(value, str)
) | frozenset(
    value
    for name, value in vars(gen_ai).items()
    if name.startswith("GEN_AI_USAGE_") and isinstance(value, str)
)
_LOGFIRE_MESSAGE: Final = "logfire.msg"
"""Logfire shows a span by this attribute, set to the span's name at its start."""

_MODEL_CALL: Final[tuple[Kind, str]] = ("llm", "")
_TOOL_SPAN_PREFIX: Final = f"{_EXECUTE_TOOL} "

# Span ids of open Chronicle spans another span counts: one that ended right below, or the one
# above. Set and discard are atomic in CPython; the span's end discards its entry.
_counted: set[int] = set()
seen_through: Final[dict[int, tuple[Kind, str]]] = {}
"""Span id of an open Chronicle request span -> what the framework's span above it counts, for
the boundaries started in it (read it, never write it). Written only under such spans, so it is
empty almost always: then a span started under one of Chronicle's has nothing to look up."""


def is_model_call(span: ReadableSpan) -> bool:
    """Whether a span (not Chronicle's) describes a model call, by its attributes."""
    attributes = span.attributes or {}
    kind = attributes.get(_KIND)
    if kind is not None:
        return kind == _LLM
    operation = attributes.get(_OPERATION)
    if operation is not None:
        return operation in _MODEL_OPERATIONS
    return any(key in attributes for key in _MODEL_MARKERS)


def note_model_call_below(span_id: int) -> None:
    """Another instrumentation's model-call span ended right below Chronicle's ``span_id``."""
    _counted.add(span_id)


def counted_below(span_id: int) -> bool:
    """Whether another span counts the call of Chronicle's span ``span_id`` (a model-call span
    ended below it, or its parent is one); forgets it (ask once, at the end)."""
    if span_id in _counted:
        _counted.discard(span_id)
        return True
    return False


def forget(span_id: int) -> None:
    """Chronicle's span ``span_id`` ended: drop what was noted about it."""
    _counted.discard(span_id)
    if seen_through:
        seen_through.pop(span_id, None)


def demoted(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    """Chronicle's attributes for a call another span counts: no usage or cost, kind ``CHAIN``."""
    kept = {key: value for key, value in attributes.items() if key not in _USAGE_KEYS}
    kept[_KIND] = _CHAIN
    return kept


def demote_span(span: object, boundary: str) -> None:
    """Chronicle's open span (the SDK's, or Logfire's wrapper of it) of a call another span
    counts: no GenAI operation, OpenInference kind ``CHAIN``, span kind ``INTERNAL``, named
    ``boundary`` (the module's rule). The SDK has no public way to drop an attribute or change a
    kind, so its ``Span`` is changed in place; a span of another layout is left as it is."""
    sdk = span if isinstance(span, SdkSpan) else getattr(span, "span", None)
    if not isinstance(sdk, SdkSpan) or not sdk.is_recording():
        return
    attributes = sdk._attributes
    if isinstance(attributes, MutableMapping):
        attributes.pop(_OPERATION, None)
    sdk.set_attribute(_KIND, _CHAIN)
    if getattr(sdk, "_kind", None) is not SpanKind.INTERNAL:
        sdk._kind = SpanKind.INTERNAL
    if _attributes_of(sdk).get(_LOGFIRE_MESSAGE) == sdk.name:
        sdk.set_attribute(_LOGFIRE_MESSAGE, boundary)
    sdk.update_name(boundary)


def note_span_started(
    span: SdkSpan,
    span_id: int,
    record: RequestRecord | CallRecord,
    parent_id: int,
    parent_context: otel_context.Context,
    *,
    ours: bool,
) -> None:
    """Chronicle's span ``span_id`` (holding ``record``) started under the span ``parent_id``
    (the current span of ``parent_context``; ``ours`` when it is one of Chronicle's own): demote
    it now when another instrumentation's span above counts the same call (the module's rule).

    Under one of Chronicle's own spans it looks the parent up in ``seen_through`` (the caller
    need not call it while that is empty); under another span it reads that span's operation and
    kind (a dict lookup each) and at most its name. Never raises for a span of any kind.
    """
    if ours:
        counts = seen_through.get(parent_id)
    else:
        counts = _what_counts(trace_api.get_current_span(parent_context))
    if counts is None:
        return
    if isinstance(record, RequestRecord):
        seen_through[span_id] = counts  # the boundaries started directly in it see through it
        return
    kind, name = counts
    if kind != record.kind or (name and not _names(record.name, name)):
        return
    _counted.add(span_id)
    # Only a span that shows attributes (another exporter sees it) has any to take back.
    if _OPERATION in _attributes_of(span):
        demote_span(span, record.name)


def _names(boundary: str, tool: str) -> bool:
    """Whether a boundary named ``boundary`` runs the tool named ``tool``: the same name, or a
    qualified one ending in it (``@boundary`` names a method or nested function by its
    ``__qualname__``, frameworks name the tool by its ``__name__``)."""
    return boundary == tool or (boundary.endswith(tool) and boundary[-len(tool) - 1] == ".")


def _what_counts(span: object) -> tuple[Kind, str] | None:
    """What another instrumentation's span counts, by the attributes it carries now: a model
    call ``("llm", "")``, a tool run ``("tool", its tool's name or "")``, or ``None``."""
    if not isinstance(span, ReadableSpan):  # not the SDK's: no attributes to read
        return None
    attributes = _attributes_of(span)
    operation = attributes.get(_OPERATION)
    if operation is None:
        kind = attributes.get(_KIND)
        if kind == _LLM:
            return _MODEL_CALL
        if kind is None:
            # Named by the convention (``execute_tool {gen_ai.tool.name}``) before its attributes
            # come, at its end (Google ADK's tool spans).
            title = span.name
            if title.startswith(_TOOL_SPAN_PREFIX):
                return ("tool", title[len(_TOOL_SPAN_PREFIX) :].partition(" ")[0])
            return None
        if kind != _TOOL:
            return None
        name = attributes.get(SpanAttributes.TOOL_NAME)
    elif operation in _MODEL_OPERATIONS:
        return _MODEL_CALL
    elif operation == _EXECUTE_TOOL:
        name = attributes.get(gen_ai.GEN_AI_TOOL_NAME)
    else:
        return None
    return ("tool", name if isinstance(name, str) else "")


def _attributes_of(span: ReadableSpan) -> Mapping[str, object]:
    """A span's attributes as they are now, to read a key or two.

    The SDK keeps them in a ``BoundedAttributes`` whose plain dict answers a missing key about
    ten times faster than the public read-only view (a miss there raises and catches
    ``KeyError``): 0.08 µs instead of 0.7-0.9 µs, per docs/benchmarks.md ("Counted once"). Any
    other layout is read through the public ``attributes``.
    """
    table = getattr(span._attributes, "_dict", None)
    return table if isinstance(table, dict) else (span.attributes or {})
