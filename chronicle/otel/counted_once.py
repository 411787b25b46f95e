"""Counted once: when another instrumentation also traces a model call, one span carries it.

With OpenInference's OpenAI instrumentor (or OpenLLMetry, or Logfire's ``instrument_openai``)
on, a call through a wrapped client makes two spans: Chronicle's ``llm`` boundary span and, as
its child, the instrumentor's span of the same request. Backends add up the token counts (and
the cost derived from them) of every LLM span, so each call would count twice.

The rule: the other instrumentation's span carries the LLM kind and the usage. Chronicle's
``ChronicleSpanProcessor`` sees that span end (it is on the same provider) while Chronicle's span
is still open, and notes it here; when Chronicle's span finishes, it becomes an OpenInference
``CHAIN`` span without token counts (OpenInference or GenAI), keeping the model, the messages and
its place in the tree. Only the direct children of a Chronicle span are considered, and only
those that describe a model call: OpenInference kind ``LLM``, or a GenAI model operation, model
or usage attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["counted_below", "demoted", "forget", "is_model_call", "note_model_call_below"]

_KIND: Final = SpanAttributes.OPENINFERENCE_SPAN_KIND
_LLM: Final = OpenInferenceSpanKindValues.LLM.value
_CHAIN: Final = OpenInferenceSpanKindValues.CHAIN.value
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

# Span ids of open Chronicle spans below which another instrumentation's model-call span ended.
# Set and discard are atomic in CPython; the span's end discards its entry.
_below: set[int] = set()


def is_model_call(span: ReadableSpan) -> bool:
    """Whether a span (not Chronicle's) describes a model call, by its attributes."""
    attributes = span.attributes or {}
    kind = attributes.get(_KIND)
    if kind is not None:
        return kind == _LLM
    operation = attributes.get(gen_ai.GEN_AI_OPERATION_NAME)
    if operation is not None:
        return operation in _MODEL_OPERATIONS
    return any(key in attributes for key in _MODEL_MARKERS)


def note_model_call_below(span_id: int) -> None:
    """Another instrumentation's model-call span ended right below Chronicle's ``span_id``."""
    _below.add(span_id)


def counted_below(span_id: int) -> bool:
    """Whether a model-call span was noted below ``span_id``; forgets it (ask once, at the end)."""
    if span_id in _below:
        _below.discard(span_id)
        return True
    return False


def forget(span_id: int) -> None:
    """Chronicle's span ``span_id`` ended: drop what was noted about it."""
    _below.discard(span_id)


def demoted(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    """Chronicle's attributes for a call another span counts: no usage or cost, kind ``CHAIN``."""
    kept = {key: value for key, value in attributes.items() if key not in _USAGE_KEYS}
    kept[_KIND] = _CHAIN
    return kept
