"""What a recorded model call cost, in US dollars, by a maintained price table (``genai-prices``,
Pydantic's, not one written here): ``Constraint.at_most("cost_usd", ...)`` reads it, and so
should anything else that reports a cost, so that every figure Chronicle shows agrees.

A call's price comes from its recorded usage (``output.usage``: exclusive buckets, so the
table's input is ``input + cached_read + cache_write`` of which ``cached_read`` and
``cache_write`` are priced as such, and its output ``output + reasoning``), the model that
served it (``output.model``, else the one asked for), the provider (``output.provider`` when
known) and the time it started (prices change). A call the table cannot price (no usage
recorded, a model it does not know, the package not installed) has no price, with the reason;
never an exception. The table is asked in one place, ``chronicle.whatif.usage.price``, which the
replay reports share; this module reads a recorded envelope for it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chronicle.read.connection import instant
from chronicle.whatif.usage import Priced, price

__all__ = ["Priced", "call_cost", "call_tokens"]


def call_tokens(envelope: dict[str, Any]) -> int | None:
    """Every usage bucket of a model call added up; ``None`` when it recorded no usage."""
    usage = _usage(envelope)
    if usage is None:
        return None
    return sum(int(usage.get(key) or 0) for key in _BUCKETS)


_BUCKETS = ("input", "cached_read", "cache_write", "output", "reasoning")


def _usage(envelope: dict[str, Any]) -> dict[str, Any] | None:
    output = envelope.get("output")
    usage = output.get("usage") if isinstance(output, dict) else None
    return usage if isinstance(usage, dict) else None


def call_cost(envelope: dict[str, Any]) -> Priced:
    """The cost of one recorded model call (an ``llm`` envelope as the control plane stores
    it), or why it cannot be told."""
    usage = _usage(envelope)
    if usage is None:
        return Priced(None, "no usage recorded")
    output = envelope.get("output") if isinstance(envelope.get("output"), dict) else {}
    body = envelope.get("input") if isinstance(envelope.get("input"), dict) else {}
    model = (output or {}).get("model") or (body or {}).get("model")
    if not isinstance(model, str) or not model:
        return Priced(None, "no model recorded")
    provider = (output or {}).get("provider")
    status = envelope.get("envelope_status") if isinstance(envelope, dict) else None
    started = instant((status or {}).get("started_at")) if isinstance(status, dict) else None
    return price(usage, model, provider, started if isinstance(started, datetime) else None)
