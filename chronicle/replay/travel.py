"""What travels between services in a replay across services, and what comes back.

- ``Descriptor``: the replay a let-through call carries (the recorded trace, the callee's
  recorded span or the caller's envelope its span was parented on, the plan's entries,
  ``strict``, ``match``, ``ignore``, a nonce and an expiry), written as
  ``v1.<base64url JSON>.<base64url HMAC-SHA256>`` in the ``chronicle-replay`` header, signed with
  the shared ``replay_token``; ``decode`` verifies it (signature, expiry, a nonce seen once per
  process) or raises ``ReplayRefusedError`` saying what to set.
- ``Report``: what the service sends back in the ``chronicle-replay-report`` header (its call
  log with each call's arguments and result in JSON form, divergences, the plan entries it
  matched, its handler's error), at most ``MAX_REPORT_BYTES``: ``write_report`` leaves out the
  largest calls' values first, then trims the call log, and never drops an unexpected
  divergence; ``read_report`` reads it on the caller's side.

Pure encoding and checking: no replay runs here (``replay/remote.py`` does that).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import hmac
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chronicle.errors import ReplayError, ReplayRefusedError
from chronicle.replay.divergence import Divergence
from chronicle.replay.load import MAX_DEPTH
from chronicle.replay.run import Match

logger = logging.getLogger("chronicle")

HEADER = "chronicle-replay"
"""Request header carrying the signed replay to a service a call is let through to."""
REPORT_HEADER = "chronicle-replay-report"
"""Response header carrying the service's report back (base64url JSON)."""
REFUSED_HEADER = "chronicle-replay-refused"
"""Response header saying why a service refused the replay (the body says it too)."""
TTL_SECONDS = 300
"""How long a signed replay may be used after it was signed."""
MAX_REPORT_BYTES = 12 * 1024
"""Largest report header a service sends (HTTP clients refuse much larger header blocks)."""
_MAX_DIFF = 600
_VERSION = "v1"

Entry = tuple[str, int | None, str]
"""A plan entry as it travels: ``(name, n, what)``, ``what`` as ``ReplayPlan.entries`` says."""


# ---- what travels ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Descriptor:
    """The replay a let-through call carries, as the caller signed it."""

    trace_id: str
    span_id: str | None
    """The service's recorded span, when the caller's replay knew it from the trace."""
    parent_envelope_id: str
    """The caller's recorded envelope of this call: the service's span was parented on it."""
    entries: tuple[Entry, ...]
    models: tuple[tuple[str, int | None, str], ...]
    strict: bool
    match: Match
    ignore: tuple[str, ...]
    nonce: str
    expires: float
    caller: str | None
    record_into: tuple[str, str] | None = None
    """``record=True``: the caller's new trace and its recorded let-through call, which the
    service's recording joins (parented on that call)."""

    def encode(self, token: str) -> str:
        """The header value: ``v1.<payload>.<signature>``."""
        body = {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_envelope_id": self.parent_envelope_id,
            "entries": [list(entry) for entry in self.entries],
            "models": [list(model) for model in self.models],
            "strict": self.strict,
            "match": self.match,
            "ignore": list(self.ignore),
            "nonce": self.nonce,
            "expires": self.expires,
            "caller": self.caller,
            "record_into": None if self.record_into is None else list(self.record_into),
        }
        payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8"))
        return f"{_VERSION}.{payload}.{_b64(_mac(token, payload))}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _loads(data: bytes) -> Any:
    """JSON from a header, refused (``ValueError``) when it nests deeper than any replay header
    or report holds (``load.MAX_DEPTH``): what reaches recursive code later is bounded here.
    ``RecursionError`` and ``MemoryError`` come out as ``ValueError`` too."""
    try:
        value = json.loads(data)
    except (RecursionError, MemoryError) as exc:
        raise ValueError(f"JSON that cannot be read ({type(exc).__name__})") from None
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:  # a walk, not recursion
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)
    return value


def _mac(token: str, payload: str) -> bytes:
    return hmac.new(token.encode("utf-8"), payload.encode("ascii"), hashlib.sha256).digest()


def _entry(item: object) -> Entry | None:
    if not isinstance(item, list) or len(item) != 3:
        return None
    name, n, what = item
    if not isinstance(name, str) or not isinstance(what, str):
        return None
    if n is not None and (not isinstance(n, int) or isinstance(n, bool)):
        return None
    return name, n, what


def decode(value: str, token: str | None, *, now: float | None = None) -> Descriptor:
    """Verify and read a ``chronicle-replay`` header value with this service's ``token``.

    Raises ``ReplayRefusedError`` (403: no token, a signature that does not verify, expired;
    400: not a replay header) with a message that says what to set.
    """
    if not token:
        raise ReplayRefusedError(
            "this service accepts replays (accept_replay) but has no replay_token to check "
            "them with; set CHRONICLE_REPLAY_TOKEN (configure(replay_token=...)) to the token "
            "the caller signs with"
        )
    version, _, rest = value.strip().partition(".")
    payload, _, signature = rest.partition(".")
    if version != _VERSION or not payload or not signature:
        raise ReplayRefusedError(
            f"the {HEADER} header is not a replay this service reads (expected "
            f"{_VERSION}.<payload>.<signature>); send it with the same Chronicle version",
            status=400,
        )
    try:
        given = _unb64(signature)
    except (binascii.Error, ValueError):
        given = b""
    if not hmac.compare_digest(given, _mac(token, payload)):
        raise ReplayRefusedError(
            f"the {HEADER} header's signature does not verify with this service's "
            "replay_token; set the same CHRONICLE_REPLAY_TOKEN on the caller and on this service"
        )
    try:
        body = _loads(_unb64(payload))
        entries = tuple(e for e in (_entry(i) for i in body["entries"]) if e is not None)
        models = tuple(
            (str(m[0]), m[1] if isinstance(m[1], int) else None, str(m[2]))
            for m in body.get("models", ())
            if isinstance(m, list) and len(m) == 3
        )
        match = body["match"]
        into = body.get("record_into")
        descriptor = Descriptor(
            trace_id=str(body["trace_id"]),
            span_id=body["span_id"] if isinstance(body["span_id"], str) else None,
            parent_envelope_id=str(body["parent_envelope_id"]),
            entries=entries,
            models=models,
            strict=bool(body["strict"]),
            match="input" if match == "input" else "order",
            ignore=tuple(str(p) for p in body["ignore"]),
            nonce=str(body["nonce"]),
            expires=float(body["expires"]),
            caller=body["caller"] if isinstance(body.get("caller"), str) else None,
            record_into=(str(into[0]), str(into[1])) if isinstance(into, list) else None,
        )
    except (ValueError, KeyError, TypeError, IndexError, OverflowError, binascii.Error):
        raise ReplayRefusedError(
            f"the {HEADER} header is signed but its payload is not a replay; send it with the "
            "same Chronicle version",
            status=400,
        ) from None
    now = time.time() if now is None else now
    if descriptor.expires < now:
        raise ReplayRefusedError(
            f"the replay expired {now - descriptor.expires:.0f} s ago (a replay may be used for "
            f"{TTL_SECONDS} s after it is signed); run the caller's replay again, and check "
            "that the two machines' clocks agree"
        )
    if not _NONCES.first_use(descriptor.nonce, descriptor.expires, now):
        raise ReplayRefusedError(
            "this replay was already served once (a signed replay is used for one request); "
            "run the caller's replay again"
        )
    return descriptor


class _Nonces:
    """Nonces of the replays served, kept until they expire: a captured header is served once."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._by_expiry: list[tuple[float, str]] = []  # a heap: the next to expire first
        self._lock = threading.Lock()

    def first_use(self, nonce: str, expires: float, now: float) -> bool:
        """Whether ``nonce`` is new (then it is kept until ``expires``); O(log n) a call."""
        with self._lock:
            heap = self._by_expiry
            while heap and heap[0][0] < now:
                self._seen.discard(heapq.heappop(heap)[1])
            if nonce in self._seen:
                return False
            self._seen.add(nonce)
            heapq.heappush(heap, (expires, nonce))
            return True


_NONCES = _Nonces()


# ---- the report ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """What a service that replayed its span sends back."""

    service: str | None
    span_id: str | None
    calls: tuple[tuple[str, int, str, int | None], ...]
    divergences: tuple[Divergence, ...]
    matched: tuple[Entry, ...]
    error: str | None
    omitted: int = 0
    inputs: Mapping[tuple[str, int], dict[str, object]] = field(default_factory=dict)
    """Each call's arguments by name (JSON form, redacted as a recording is), by ``(name, n)``."""
    results: Mapping[tuple[str, int], object] = field(default_factory=dict)
    """What each call that returned returned (JSON form, redacted), by ``(name, n)``."""
    values_left_out: bool = False
    """Some calls' values were left out (the size bound): those calls have neither."""


def write_report(report: Report, limit: int = MAX_REPORT_BYTES) -> str:
    """The report as a header value of at most ``limit`` characters.

    Past the bound, the calls' values are left out first (the largest call's input and result
    together, so a call has both or neither; ``values_left_out`` says so), then the call log is
    cut (from its end), then the divergences' diffs, then divergences themselves (the expected
    ones first); ``omitted`` counts the calls and divergences left out, and the last divergence
    kept says how many more there were, so a cut report never hides one.
    """
    calls = [list(c) for c in report.calls]
    values = {
        key: [report.inputs[key], *([report.results[key]] if key in report.results else [])]
        for key in report.inputs
    }
    left_out = report.values_left_out
    found = sorted(report.divergences, key=lambda d: d.expected)  # unexpected first
    diffs = [d.diff[:_MAX_DIFF] for d in found]
    omitted = report.omitted

    def encoded() -> str:
        body = {
            "service": report.service,
            "span_id": report.span_id,
            "calls": calls,
            "divergences": [
                {
                    "name": d.name,
                    "index": d.index,
                    "kind": d.kind,
                    "diff": diff,
                    "expected": d.expected,
                    "call": d.call,
                    "under": d.under,
                }
                for d, diff in zip(found, diffs, strict=True)
            ],
            "matched": [list(m) for m in report.matched],
            "error": None if report.error is None else report.error[:2000],
            "omitted": omitted,
            "values": [[name, n, *kept] for (name, n), kept in values.items()],
            "values_left_out": left_out,
        }
        return _b64(json.dumps(body, separators=(",", ":"), default=repr).encode("utf-8"))

    text = encoded()
    if len(text) > limit and values:
        left_out = True
        sizes = {key: len(json.dumps(kept, default=repr)) for key, kept in values.items()}
        saved = 0  # bytes left out since the last measure, as base64 counts them
        for key in sorted(sizes, key=sizes.__getitem__, reverse=True):  # the largest first
            if len(text) <= limit:
                break
            del values[key]
            saved += sizes[key] * 4 // 3
            if saved >= len(text) - limit:  # enough by the estimate: measure again
                text, saved = encoded(), 0
        text = encoded()
    while len(text) > limit and calls:
        cut = max(1, len(calls) // 4)
        del calls[-cut:]
        omitted += cut
        text = encoded()
    if len(text) > limit:
        diffs = ["(diff left out: the report's size bound)"] * len(diffs)
        text = encoded()
    while len(text) > limit and len(found) > 1:
        cut = max(1, (len(found) - 1) // 4)
        del found[-cut:], diffs[-cut:]
        omitted += cut
        diffs[-1] = f"{diffs[-1]} ({omitted} more left out of the report: see the service's log)"
        text = encoded()
    return text


def read_report(value: str, host: str) -> Report:
    """A report header's value, read; ``ReplayError`` when it is not one."""
    try:
        body = _loads(_unb64(value.strip()))
        calls = tuple(
            (str(c[0]), int(c[1]), str(c[2]), c[3] if isinstance(c[3], int) else None)
            for c in body["calls"]
        )
        found = tuple(
            Divergence(
                str(d["name"]),
                d["index"] if isinstance(d["index"], int) else None,
                d["kind"] if d["kind"] in ("input", "unused", "plan", "network") else "input",
                str(d["diff"]),
                bool(d["expected"]),
                d["call"] if isinstance(d["call"], int) else None,
                under=d["under"] if isinstance(d.get("under"), str) else None,
            )
            for d in body["divergences"]
        )
        matched = tuple(e for e in (_entry(m) for m in body["matched"]) if e is not None)
        error = body.get("error")
        inputs: dict[tuple[str, int], dict[str, object]] = {}
        results: dict[tuple[str, int], object] = {}
        for item in body.get("values") or ():  # [name, n, input] or [name, n, input, result]
            if isinstance(item, list) and len(item) in (3, 4) and isinstance(item[2], dict):
                key = (str(item[0]), int(item[1]))
                inputs[key] = item[2]
                if len(item) == 4:
                    results[key] = item[3]
        return Report(
            service=body["service"] if isinstance(body.get("service"), str) else None,
            span_id=body["span_id"] if isinstance(body.get("span_id"), str) else None,
            calls=calls,
            divergences=found,
            matched=matched,
            error=str(error) if error is not None else None,
            omitted=int(body.get("omitted") or 0),
            inputs=inputs,
            results=results,
            values_left_out=bool(body.get("values_left_out")),
        )
    except (ValueError, KeyError, TypeError, IndexError, OverflowError, binascii.Error):
        raise ReplayError(
            f"replay: {host} answered with a {REPORT_HEADER} header that is not a replay "
            "report; run the same Chronicle version on both sides"
        ) from None
