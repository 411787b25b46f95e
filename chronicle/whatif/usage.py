"""Tokens, cost and latency of a recorded request, and of its replay, added up the one way every
report, page and check shows them.

A model call's usage is recorded in exclusive buckets (``output.usage``: ``input``,
``cached_read``, ``cache_write``, ``output``, ``reasoning``); a ``Usage`` counts them as a
person reads a bill: ``input_tokens`` is everything the model read (``input + cached_read +
cache_write``), ``output_tokens`` everything it wrote (``output + reasoning``). Its cost comes
from a maintained price table (``genai-prices``, Pydantic's; ``price()``), by the model that
served the call, its provider and when it ran (prices change): a model the table does not know,
or no table installed, makes the cost unknown (``None``), never an error.

A replay's usage (``UsagePair``) stands beside its recording's: a call the replay served from
the recording counts its recorded usage on both sides, a call that ran live counts its new usage
on the replayed side; a recorded call the replay never reached counts on the recorded side only.
``latency_ms`` adds up the calls that ran live as cut-points (the innermost live calls, not the
entry or the path to them), on each side: live, and as recorded. ``Totals`` adds pairs up for
a corpus, and ``Totals.change()`` says it in words: ``tokens -38%, cost -41%, 2 calls slower``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import JsonValue

__all__ = [
    "SLOWER",
    "Priced",
    "Totals",
    "Usage",
    "UsagePair",
    "call_usage",
    "dollars",
    "price",
    "recorded_usage",
]

SLOWER = 1.1
"""A live call is slower than its recording when it took more than this times as long."""

_INSTALL = "the price table is not installed: pip install genai-prices"
_BUCKETS = ("input", "cached_read", "cache_write", "output", "reasoning")


@dataclass(frozen=True)
class Priced:
    """A model call's cost (``usd``), or why it has none (``why``)."""

    usd: Decimal | None
    why: str = ""


@functools.cache
def _table() -> Any:
    try:
        import genai_prices  # optional at run time: a cost is unknown without it
    except ImportError:
        return None
    return genai_prices


def price(
    usage: Mapping[str, Any],
    model: object,
    provider: object = None,
    at: datetime | None = None,
) -> Priced:
    """The cost of one model call from its usage buckets (``output.usage``), the ``model`` that
    served it, its ``provider`` (``None`` or ``unknown``: the table guesses from the model) and
    when it ran; ``Priced(None, why)`` when the table cannot tell. Never raises."""
    if not isinstance(model, str) or not model:
        return Priced(None, "no model recorded")
    table = _table()
    if table is None:
        return Priced(None, _INSTALL)
    counts = tuple(_count(usage.get(key)) for key in _BUCKETS)
    known = provider if isinstance(provider, str) and provider and provider != "unknown" else None
    return _priced(table, counts, model, known, at)


@functools.lru_cache(maxsize=4096)
def _priced(
    table: Any, counts: tuple[int, ...], model: str, provider: str | None, at: datetime | None
) -> Priced:
    """One lookup in the table, kept: a corpus report prices each stubbed call twice (recorded
    and replayed, the same usage), and the same call shape recurs across recordings."""
    fresh, cached, written, output, reasoning = counts
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a bucket the table does not price is not ours
            found = table.calc_price(
                table.Usage(
                    input_tokens=fresh + cached + written,
                    cache_read_tokens=cached,
                    cache_write_tokens=written,
                    output_tokens=output + reasoning,
                ),
                model,
                provider_id=provider,
                genai_request_timestamp=at,
            )
    except LookupError:
        return Priced(None, f"the price table does not know {model!r}")
    except Exception as exc:  # the table's own failure: no price, never an error
        return Priced(None, f"the price table failed for {model!r}: {type(exc).__name__}")
    return Priced(Decimal(found.total_price))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Usage:
    """Model calls' tokens and cost, and live calls' latency, added up.

    ``cost_usd`` is ``None`` when a call's cost is unknown (a model the price table does not
    know); ``calls`` counts the model calls with usage; ``latency_ms`` the live calls' time.
    ``a + b`` adds two (an unknown cost stays unknown)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal | None = Decimal(0)
    calls: int = 0
    latency_ms: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None
            if self.cost_usd is None or other.cost_usd is None
            else self.cost_usd + other.cost_usd
        )
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            cost,
            self.calls + other.calls,
            self.latency_ms + other.latency_ms,
        )

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, JsonValue]:
        """``{"input_tokens", "output_tokens", "cost_usd", "calls", "latency_ms"}``; the cost a
        float of dollars or ``null``."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": None if self.cost_usd is None else float(self.cost_usd),
            "calls": self.calls,
            "latency_ms": round(self.latency_ms, 3),
        }

    @classmethod
    def from_json(cls, value: object) -> Usage:
        """The ``Usage`` ``to_json`` wrote (a missing or malformed field is zero; a malformed
        cost unknown)."""
        body = value if isinstance(value, Mapping) else {}
        cost = body.get("cost_usd", 0)
        latency = body.get("latency_ms")
        return cls(
            _count(body.get("input_tokens")),
            _count(body.get("output_tokens")),
            Decimal(str(cost)) if isinstance(cost, (int, float)) else None,
            _count(body.get("calls")),
            float(latency) if isinstance(latency, (int, float)) else 0.0,
        )

    def describe(self) -> str:
        """``1,234 tokens (1,000 in, 234 out), $0.0012``: for a person."""
        cost = "cost unknown" if self.cost_usd is None else dollars(self.cost_usd)
        return (
            f"{self.tokens:,} tokens ({self.input_tokens:,} in, {self.output_tokens:,} out), {cost}"
        )


def dollars(value: Decimal | float) -> str:
    """``$1.23``, ``$0.0123``, ``$0.000009``: to the micro-dollar, trailing zeros dropped (a
    model call costs fractions of a cent)."""
    text = f"{value:,.6f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def call_usage(
    usage: object, model: object, provider: object = None, at: datetime | None = None
) -> Usage:
    """The ``Usage`` of one model call from its usage buckets (``None``: a call that reported
    none, which counts as no call)."""
    if not isinstance(usage, Mapping):
        return Usage()
    counts = {key: _count(usage.get(key)) for key in _BUCKETS}
    return Usage(
        counts["input"] + counts["cached_read"] + counts["cache_write"],
        counts["output"] + counts["reasoning"],
        price(usage, model, provider, at).usd,
        1,
    )


def recorded_usage(envelopes: Iterable[Mapping[str, Any]]) -> Usage:
    """The usage of the model calls among ``envelopes`` (as the control plane or an incident
    file holds them: JSON), each priced at the time it started."""
    total = Usage()
    for envelope in envelopes:
        output = envelope.get("output")
        if envelope.get("kind") != "llm" or not isinstance(output, Mapping):
            continue
        given = envelope.get("input")
        model = output.get("model") or (given.get("model") if isinstance(given, Mapping) else None)
        status = envelope.get("envelope_status")
        started = status.get("started_at") if isinstance(status, Mapping) else None
        total += call_usage(output.get("usage"), model, output.get("provider"), _instant(started))
    return total


def _instant(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class UsagePair:
    """One recording's usage beside its replay's (see the module docstring), and how many of
    the calls that ran live were slower than recorded (``slower_calls``: over ``SLOWER`` times
    their recorded time)."""

    recorded: Usage = field(default_factory=Usage)
    replayed: Usage = field(default_factory=Usage)
    slower_calls: int = 0

    def to_json(self) -> dict[str, JsonValue]:
        """``{"recorded": {...}, "replayed": {...}, "slower_calls": n}``."""
        return {
            "recorded": self.recorded.to_json(),
            "replayed": self.replayed.to_json(),
            "slower_calls": self.slower_calls,
        }

    @classmethod
    def from_json(cls, value: object) -> UsagePair:
        """The pair ``to_json`` wrote; an absent one is all zero."""
        body = value if isinstance(value, Mapping) else {}
        slower = body.get("slower_calls")
        return cls(
            Usage.from_json(body.get("recorded")),
            Usage.from_json(body.get("replayed")),
            slower if isinstance(slower, int) else 0,
        )


@dataclass
class Totals:
    """Pairs added up over a corpus: ``add(pair)`` each, then read ``recorded``, ``replayed``,
    ``slower_calls``, or ``change()``."""

    recorded: Usage = field(default_factory=Usage)
    replayed: Usage = field(default_factory=Usage)
    slower_calls: int = 0

    def add(self, pair: UsagePair) -> None:
        """Count one recording's pair in."""
        self.recorded += pair.recorded
        self.replayed += pair.replayed
        self.slower_calls += pair.slower_calls

    def change(self) -> str:
        """``tokens -38%, cost -41%, 2 calls slower``: each figure's change from the recording
        to the replay (``same``, ``+n`` from nothing, ``unknown`` when a cost is), then the
        live calls slower than recorded."""
        tokens = _change(Decimal(self.recorded.tokens), Decimal(self.replayed.tokens))
        cost = _change(self.recorded.cost_usd, self.replayed.cost_usd)
        slower = f"{self.slower_calls} call{'s' if self.slower_calls != 1 else ''} slower"
        return f"tokens {tokens}, cost {cost}, {slower}"


def _change(before: Decimal | None, after: Decimal | None) -> str:
    if before is None or after is None:
        return "unknown"
    if before == after:
        return "same"
    if before == 0:
        return f"+{after:,.6g} from none"
    percent = (after - before) / before * 100
    return f"{percent:+.0f}%" if abs(percent) >= 1 else f"{percent:+.1f}%"
