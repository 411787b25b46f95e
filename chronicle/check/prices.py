"""What a recorded model call cost, in US dollars, by a maintained price table (``genai-prices``,
Pydantic's, not one written here): ``Constraint.at_most("cost_usd", ...)`` reads it, and so
should anything else that reports a cost, so that every figure Chronicle shows agrees.

A call's price comes from its recorded usage (``output.usage``: exclusive buckets, so the
table's input is ``input + cached_read + cache_write`` of which ``cached_read`` and
``cache_write`` are priced as such, and its output ``output + reasoning``), the model that
served it (``output.model``, else the one asked for), the provider (``output.provider`` when
known) and the time it started (prices change). A call the table cannot price (no usage
recorded, a model it does not know, the package not installed) has no price, with the reason;
never an exception.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from chronicle.read.connection import instant

__all__ = ["Priced", "call_cost", "call_tokens"]

_INSTALL = "the price table is not installed: pip install genai-prices"


@dataclass(frozen=True)
class Priced:
    """A model call's cost (``usd``), or why it has none (``why``)."""

    usd: Decimal | None
    why: str = ""


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


@functools.cache
def _table() -> Any:
    try:
        import genai_prices  # optional: only a cost rule needs it
    except ImportError:
        return None
    return genai_prices


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
    table = _table()
    if table is None:
        return Priced(None, _INSTALL)
    cached, written = int(usage.get("cached_read") or 0), int(usage.get("cache_write") or 0)
    provider = (output or {}).get("provider")
    status = envelope.get("envelope_status") if isinstance(envelope, dict) else None
    started = instant((status or {}).get("started_at")) if isinstance(status, dict) else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a bucket the table does not price is not ours
            found = table.calc_price(
                table.Usage(
                    input_tokens=int(usage.get("input") or 0) + cached + written,
                    cache_read_tokens=cached,
                    cache_write_tokens=written,
                    output_tokens=int(usage.get("output") or 0) + int(usage.get("reasoning") or 0),
                ),
                model,
                provider_id=provider
                if isinstance(provider, str) and provider != "unknown"
                else None,
                genai_request_timestamp=started if isinstance(started, datetime) else None,
            )
    except LookupError:
        return Priced(None, f"the price table does not know {model!r}")
    except Exception as exc:  # the table's own failure: no price, never an error
        return Priced(None, f"the price table failed for {model!r}: {type(exc).__name__}")
    return Priced(Decimal(found.total_price))
