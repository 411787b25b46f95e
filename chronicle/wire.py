"""What exactly Chronicle sends to the control plane, and how it reads it back.

The one place that knows the wire format. The recording side fills plain records
(``RequestRecord`` for a request span, ``CallRecord`` for one boundary crossing) with what it
captured, already redacted; the builders here turn a record plus its span's ids and times into
an ``agentplane_primitives`` ``Trace``, ``Span`` or ``Envelope``, validated against the models.
Replay and the in-memory double read envelopes back through ``call_order`` and
``invocation_of``.

The ``chronicle.`` prefix is reserved for the metadata keys defined here; user metadata may not
use it.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any, Literal

from agentplane_primitives.models import Envelope, LlmInput, LlmOutput, OutputError, Span, Trace
from agentplane_primitives.types import SCHEMA_VERSION
from pydantic import JsonValue

from chronicle.llm.canonical import LlmAdapter

try:  # optional (the ``fast`` extra): the same JSON, encoded several times faster
    import orjson
except ImportError:  # pragma: no cover - the plain install
    orjson = None  # type: ignore[assignment]

logger = logging.getLogger("chronicle")

RESERVED_PREFIX = "chronicle."
SEQUENCE = "chronicle.sequence"
"""Start order of a call in its request span, from 1; the control plane orders envelopes by it."""
INVOCATION = "chronicle.invocation_index"
"""The n-th call of this boundary name in its request span, from 1; replay matches on it."""
LOSSY_INPUT = "chronicle.lossy_input"
"""Part of the input was not JSON and is stored as ``{"$repr": ...}``."""
LOSSY_OUTPUT = "chronicle.lossy_output"
"""Part of the output was not JSON; a replay cannot return it and says so."""
TRUNCATED = "chronicle.truncated"
"""Something recorded was cut to ``max_payload_bytes`` (on a Trace: the label ``"true"``)."""
LOSSY_METADATA = "chronicle.lossy_metadata"
"""A metadata value was stored as ``{"$repr": ...}`` or had text that is not valid Unicode."""
LOSSY_LABEL = "chronicle.lossy"
"""Trace label ``"true"``: a label or the trace name had text that is not valid Unicode."""
AGENT = "chronicle.agent"
"""Span metadata: the JSON form of the service's ``AgentProfile`` (``chronicle/agent.py``)."""
SERVICE_VERSION = "chronicle.service_version"
"""Span metadata: the build of the service that recorded it (the ``service_version`` setting)."""
KEPT = "chronicle.kept"
"""Span metadata of a request the sampler dropped and Chronicle kept: why (``chronicle.keep``)."""
STREAMED = "chronicle.streamed"
"""The call's result was consumed as a stream: a streamed model call, or a generator."""
CHUNK_COUNT = "chronicle.chunk_count"
"""How many items (chunks, events, yielded values) the stream passed to the caller."""
FIRST_CHUNK_MS = "chronicle.time_to_first_chunk_ms"
"""Milliseconds from the start of the call to the stream's first item."""
INCOMPLETE = "chronicle.incomplete"
"""The stream did not run to its end: the consumer stopped early, it failed, or it was dropped."""
CHUNKS = "chronicle.chunks"
"""A streamed model call's chunks or events (JSON), in order, so a replay can emit them again,
less the fields they all share (``SHARED_CHUNK_FIELDS``).

Absent when they added up to more than ``max_payload_bytes`` (``TRUNCATED`` is then set): a
replay rebuilds the stream from the assembled response in ``output.raw`` instead."""
CHUNKS_REBUILT = "chronicle.chunks_rebuilt"
"""A streamed model call's chunks are not stored because its output was stored other than the
stream assembled it: redaction masked something (a secret the chunks could hold in pieces, split
across deltas, which no per-chunk redaction sees whole) or a string was cut. ``CHUNKS`` is absent
and a replay rebuilds the stream from ``output.raw`` with the format's ``rechunk`` (the same
content in other chunk boundaries; ``CHUNK_COUNT`` still counts the live chunks)."""
SHARED_CHUNK_FIELDS = "chronicle.shared_chunk_fields"
"""The top-level fields every chunk of ``CHUNKS`` had, with the same value (a chat stream's
``id``, ``model``, ``created``, ...), stored once instead of in each chunk."""
BINARY_OUTPUT = "chronicle.binary_output"
"""The output holds bytes as ``{"$bytes": "<base64>"}`` markers; a replay gives back bytes."""
OUTPUT_TYPES = "chronicle.output_types"
"""How the output's values that JSON does not keep were encoded, for a replay to give them back
as their own types: a map from a JSON Pointer (RFC 6901) into ``output.raw`` (``""`` is the whole
output, ``"/rows/0/when"`` one value inside it) to a description, the codec's name alone
(``"datetime"``, ``"tuple"``, ``"langchain.message"``) or followed by a space and the value's class
as ``module:QualName`` (``"dataclass app.models:Hit"``). Only those values are listed, so
``output.raw`` stays plain JSON, and an output that is plain JSON has no key at all. Written for
``@boundary`` functions and integrations that decode by it (``recording/codecs.py``), not for
wrapped model clients, which rebuild the SDK's own types from ``output.raw``."""
OUTPUT_NOT_RECORDED = "chronicle.output_not_recorded"
"""The call's output was not recorded (``capture_output`` was off): a replay refuses to stub it."""
TRUNCATED_OUTPUT = "chronicle.truncated_output"
"""The output itself was cut to ``max_payload_bytes`` (``TRUNCATED`` says only that something
was): a replay refuses to stub it."""
ERROR = "chronicle.error"
"""What a failure's ``output.error`` (``type``, ``message``) cannot hold, for a replay to raise
it again: ``class`` (``"module:QualName"`` of the exception), and for an HTTP error (an SDK's
``APIStatusError``, say) ``status_code``, ``headers`` (credential headers left out, values
redacted), ``body`` (the exception's parsed ``body``, redacted) and ``request``
(``{"method", "url"}``, the URL without user info, query or fragment)."""
ENTRY = "chronicle.entry"
"""The import path (``module:QualName``) of the function a span's outermost boundary wraps: set
only on a call with no enclosing boundary in its span, the request's entry. A corpus replay
(``chronicle replay --entry``) calls the entry the user names with the recorded input and checks
that its boundary has the recorded name; the path is shown, never imported from the recording."""

REPLAYED_FROM = "chronicle.replayed_from"
"""On an envelope of a replay recorded with ``record=True``: the id of the recorded envelope
that served the call (a stub, an override, or a call inside a stubbed one), so the new trace
says which calls ran live (no key) and which were served from the recording."""
REPLAY_OF = "chronicle.replay_of"
"""On the Span of a replay recorded with ``record=True``: ``{"trace_id", "span_id"}`` of the
span it replayed (also an OpenTelemetry link). ``chronicle traces --replays-of`` reads it."""
EVALUATES = "chronicle.evaluates"
"""On a saved evaluation (``evaluate(..., save=True)``, ``chronicle evaluate --save``): the trace
label naming the trace it evaluates, and its Span's ``{"trace_id"}`` of it."""
EVALUATION = "chronicle.evaluation"
"""The trace label every saved evaluation carries (``"saved"``): the one filter listing them.
``chronicle.evaluation.passed`` (``"true"``/``"false"``) says whether no verdict failed, and one
``chronicle.verdict.<agent>.<check>[.<rule>]`` label per check holds its status
(``chronicle/read/verdicts.py``)."""

Kind = Literal["tool", "llm"]


def hex_id(value: int, width: int) -> str:
    """An OTel id as lowercase hex: ``width`` 32 for a trace id, 16 for a span id."""
    return format(value, f"0{width}x")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc(ns: int) -> datetime:
    """An OTel timestamp (ns since the epoch) as an aware UTC datetime, to the microsecond below.

    Exact integer arithmetic (a float of the seconds would round some microseconds up), so
    ``_timestamp`` can write the same text without building the datetime.
    """
    return _EPOCH + timedelta(microseconds=ns // 1000)


_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _pair(match: re.Match[str]) -> str:
    return match.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def valid_text(text: str) -> str:
    """``text`` as it can be sent: every lone surrogate written out as ``\\udXXX``.

    Python strings may hold lone surrogates (``os.fsdecode``, ``surrogateescape``, JSON's
    ``"\\ud83d"`` from a cut emoji); UTF-8, and so JSON on the wire, cannot. A surrogate pair
    (two halves in a row) becomes the one character it encodes. Returns ``text`` itself when it is
    already valid. Never raises for a str.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        joined = _SURROGATE_PAIR.sub(_pair, text)
        return joined.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# ---- the records ----------------------------------------------------------------------------


@dataclass(eq=False)
class RequestRecord:
    """What a request span captured: the body of its ``Span`` entity and its ``Trace``'s labels.

    ``metadata`` is read when the entity is built, so keys added while the span is open are sent
    with its close write. ``failed`` is set before the span ends.
    """

    service: str
    metadata: dict[str, JsonValue]
    parent_envelope_id: str | None = None
    trace_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    failed: bool = False


Deferred = tuple[object, "Callable[[CallRecord, object], None]"]
"""A captured value whose walk into JSON form waits for the envelope: ``(copy, finish)``
(``CallRecord.defer``)."""


@dataclass(eq=False, slots=True)
class CallRecord:
    """What one boundary crossing captured, already in JSON form and redacted.

    ``trace_id`` and ``span_id`` name the enclosing request span; the envelope id is the
    boundary span's own id, given to the builder. For an ``llm`` call ``adapter`` derives the
    canonical fields from ``input_raw`` and ``output_raw`` (once; see ``canonical``).
    """

    name: str
    kind: Kind
    trace_id: str
    span_id: str
    parent_envelope_id: str | None
    sequence: int
    invocation: int
    attempt: int = 1
    retry_of: str | None = None
    adapter: LlmAdapter | None = None
    input_raw: JsonValue = field(default_factory=dict)
    output_raw: JsonValue = None
    error: tuple[str, str] | None = None
    """``(type, message)`` of a failed call, message redacted and cut."""
    metadata: dict[str, JsonValue] = field(default_factory=dict)
    _canonical: tuple[LlmInput, LlmOutput] | None = field(default=None, repr=False)
    deferred: list[Deferred] | None = field(default=None, repr=False)
    """Captures taken on the caller's thread and not yet in JSON form (``defer``)."""

    def defer(self, copy: object, finish: Callable[[CallRecord, object], None]) -> None:
        """Turn ``copy`` into its JSON form later: ``finish(self, copy)`` runs in ``settle``.

        ``copy`` is the record's own (nothing else holds it): a snapshot's frozen bytes
        (``recording/snapshot.py``), or a stream's capture and its items in JSON form; the
        memory bounds count it (``save.delivery.record_size``).
        """
        deferred = self.deferred
        if deferred is None:
            self.deferred = [(copy, finish)]
        else:
            deferred.append((copy, finish))

    def settle(self) -> None:
        """Run what ``defer`` left, in order, each once; on the thread that builds the envelope,
        before anything reads ``input_raw``, ``output_raw`` or ``metadata``. A ``finish`` that
        raises is logged and leaves its part as it was (as a capture that fails on the caller's
        thread does)."""
        deferred = self.deferred
        while deferred:
            copy, finish = deferred.pop(0)
            try:
                finish(self, copy)
            except Exception:
                logger.exception("could not capture a value of %r", self.name)

    def canonical(self, *, ended: bool = True) -> tuple[LlmInput, LlmOutput]:
        """The ``llm`` canonical input and output, derived once from the redacted raw.

        ``ended=False``: for an open write, while the call may still be running; derived and not
        kept, so the close write derives them again with the output. An adapter that fails
        degrades to raw-only fields (logged): recording never stops on it.
        """
        self.settle()
        if self._canonical is not None:
            return self._canonical
        pair = _canonical_pair(self.adapter, self.input_raw, self.output_raw, self.error)
        if ended:
            self._canonical = pair
        return pair


def _canonical_pair(
    adapter: LlmAdapter | None,
    input_raw: JsonValue,
    output_raw: JsonValue,
    error: tuple[str, str] | None,
) -> tuple[LlmInput, LlmOutput]:
    raw = input_raw if isinstance(input_raw, dict) else {}
    provider = adapter.provider if adapter is not None else "unknown"
    try:
        if adapter is None:
            raise TypeError("no adapter")
        llm_input = adapter.to_input(raw)
    except Exception:
        logger.exception("the %s adapter failed on an input; raw kept", provider)
        model = raw.get("model")
        llm_input = LlmInput(
            model=model if isinstance(model, str) and model else "unknown", messages=[], raw=raw
        )
    failure = OutputError(type=error[0], message=error[1]) if error is not None else None
    if failure is not None and output_raw is None:
        return llm_input, LlmOutput(error=failure)
    # A stream that failed part way keeps what it received beside the error.
    try:
        assert adapter is not None
        llm_output = adapter.to_output(output_raw, llm_input)
    except Exception:
        logger.exception("the %s adapter failed on an output; raw kept", provider)
        llm_output = LlmOutput(raw=output_raw)
    if failure is not None:
        llm_output.error = failure
    return llm_input, llm_output


# ---- the builders ---------------------------------------------------------------------------


def trace_entity(record: RequestRecord, trace_id: str) -> Trace:
    """The ``POST /v1/traces`` body: the trace's id, name and labels."""
    return Trace.model_validate(
        {
            "trace_id": trace_id,
            "name": record.trace_name,
            "metadata": record.labels,
            "state": "open",
        }
    )


def span_entity(
    record: RequestRecord, trace_id: str, span_id: str, started_ns: int, ended_ns: int | None
) -> Span:
    """The ``PUT /v1/traces/{t}/spans/{s}`` body: open while ``ended_ns`` is ``None``."""
    body: dict[str, Any] = {
        "span_id": span_id,
        "trace_id": trace_id,
        "parent_envelope_id": record.parent_envelope_id,
        "service": record.service,
        "metadata": dict(record.metadata),
        "started_at": utc(started_ns),
    }
    if ended_ns is None:
        body["state"] = "open"
    else:
        body.update(
            state="closed",
            status="failure" if record.failed else "success",
            ended_at=utc(max(ended_ns, started_ns)),
        )
    return Span.model_validate(body)


def _envelope_body(
    record: CallRecord,
    envelope_id: str,
    started_ns: int,
    ended_ns: int | None,
    when: Callable[[int], object],
) -> dict[str, Any]:
    """The envelope's structure, written once: what ``envelope_entity`` validates and what
    ``envelope_json`` encodes. Open while ``ended_ns`` is ``None``. ``when`` writes a time (a
    ``datetime`` for the model, pydantic's own text for the JSON). An ``llm`` envelope's input and
    output are its canonical models; a tool's are ``{"raw": ...}`` (with the error beside the raw
    output a stream that failed part way kept). ``metadata`` is the last key."""
    record.settle()
    error = record.error
    started = when(started_ns)
    if ended_ns is None:
        status: dict[str, object] = {"state": "open", "started_at": started}
    else:
        status = {
            "state": "closed",
            "status": "failure" if error is not None else "success",
            "started_at": started,
            "ended_at": when(max(ended_ns, started_ns)),
        }
    body: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "envelope_id": envelope_id}
    body["span_id"] = record.span_id
    body["trace_id"] = record.trace_id
    if record.parent_envelope_id is not None:
        body["parent_envelope_id"] = record.parent_envelope_id
    body["name"] = record.name
    body["kind"] = record.kind
    body["attempt"] = record.attempt
    body["links"] = (
        [{"type": "retry_of", "envelope_id": record.retry_of}] if record.retry_of else []
    )
    body["envelope_status"] = status
    if record.kind == "llm":
        llm_input, llm_output = record.canonical(ended=ended_ns is not None)
        body["input"] = llm_input
        if ended_ns is not None:
            body["output"] = llm_output
    else:
        body["input"] = {"raw": record.input_raw if isinstance(record.input_raw, dict) else {}}
        if ended_ns is not None:
            output: dict[str, JsonValue] = {}
            if record.output_raw is not None:  # pydantic leaves a None raw out
                output["raw"] = record.output_raw
            if error is not None:
                output["error"] = {"type": error[0], "message": error[1]}
            body["output"] = output
    metadata: dict[str, JsonValue] = {SEQUENCE: record.sequence, INVOCATION: record.invocation}
    metadata.update(record.metadata)
    body["metadata"] = metadata
    return body


def envelope_entity(
    record: CallRecord, envelope_id: str, started_ns: int, ended_ns: int | None
) -> Envelope:
    """One envelope of ``POST /v1/envelopes:batch``, validated: open while ``ended_ns`` is
    ``None``. What hooks receive, and what ``envelope_json`` falls back to."""
    return Envelope.model_validate(_envelope_body(record, envelope_id, started_ns, ended_ns, utc))


# ---- the envelope's JSON, straight from the record ------------------------------------------

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _dumps_stdlib(value: Any) -> bytes:
    return _ENCODER.encode(value).encode("utf-8")


def _dumps_orjson(value: Any) -> bytes:
    assert orjson is not None
    return orjson.dumps(value)


_dumps: Callable[[Any], bytes] = _dumps_stdlib if orjson is None else _dumps_orjson
"""Compact UTF-8 JSON of a JSON form; raises ``TypeError``/``ValueError`` on anything else.

With the optional ``orjson`` (``pip install 'agentplane-chronicle[fast]'``) several times faster
than the standard library's encoder; both make the same JSON for what the capture produces
(``tests/test_wire_conformance.py`` runs with each).
"""
_METADATA_KEY = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*")


@functools.lru_cache(maxsize=4096)  # metadata keys repeat endlessly
def _is_metadata_key(key: str) -> bool:
    return _METADATA_KEY.fullmatch(key) is not None


_second: tuple[int, str] = (-1, "")
"""The last whole second ``_timestamp`` wrote, and its text (envelopes come in bursts)."""


def _timestamp(ns: int) -> str:
    """``utc(ns)`` as pydantic writes an aware UTC datetime (``...:20.120000Z``, ``...:20Z``)."""
    global _second
    micros = ns // 1000
    second, fraction = divmod(micros, 1_000_000)
    last, text = _second  # one read: another thread may replace the pair, never half of it
    if second != last:
        text = utc(ns).replace(microsecond=0).isoformat()[:-6]  # isoformat ends in "+00:00"
        _second = (second, text)
    return f"{text}.{fraction:06d}Z" if fraction else f"{text}Z"


def envelope_json(
    record: CallRecord, envelope_id: str, started_ns: int, ended_ns: int | None
) -> bytes | Envelope:
    """``envelope_entity(...)`` as the JSON the control plane receives, without the round trip.

    The same JSON as ``envelope_entity(...).model_dump_json(exclude_none=True)`` (parsed, equal;
    ``tests/test_wire_conformance.py`` proves it for every shape the recording side produces),
    built from the record directly: every part of a tool envelope is made by Chronicle in a form
    the models accept (ids from OpenTelemetry, times, the JSON form of the payloads), and an
    ``llm`` envelope's canonical input and output are validated models already. What Chronicle
    does not control is checked here: the boundary name, the metadata keys (user metadata must
    match the models' key pattern) and the text (valid UTF-8). Anything else takes the validated
    path: the ``Envelope`` of ``envelope_entity`` is returned (it raises on invalid data as
    before), for the caller to encode like any other entity.
    """
    body = _envelope_body(record, envelope_id, started_ns, ended_ns, _timestamp)
    metadata = body["metadata"]
    error = record.error
    if (
        type(record.name) is not str
        or not record.name
        or not all(type(key) is str and _is_metadata_key(key) for key in metadata)
        or record.attempt < 1
        or (error is not None and not error[0])
    ):
        return envelope_entity(record, envelope_id, started_ns, ended_ns)
    try:
        if record.kind != "llm":
            return _dumps(body)
        # The canonical models are validated already: spliced in as pydantic writes them.
        del body["metadata"]
        llm_input = body.pop("input")
        llm_output = body.pop("output", None)
        parts = [_dumps(body)[:-1], b',"input":', _model_json(llm_input)]
        if llm_output is not None:
            parts += [b',"output":', _model_json(llm_output)]
        return b"".join([*parts, b',"metadata":', _dumps(metadata), b"}"])
    except (TypeError, ValueError, UnicodeError, RecursionError):
        # Not the JSON form the capture makes (a user's metadata= value, say): validate it.
        return envelope_entity(record, envelope_id, started_ns, ended_ns)


def _model_json(model: LlmInput | LlmOutput) -> bytes:
    return model.model_dump_json(exclude_none=True).encode("utf-8")


# ---- the read side --------------------------------------------------------------------------


def sequence_of(envelope: Envelope) -> int | None:
    """The envelope's start order in its span, or ``None`` when it was recorded without one."""
    value = envelope.metadata.get(SEQUENCE)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def invocation_of(envelope: Envelope) -> int | None:
    """Which call of its name the envelope is (from 1), or ``None`` when not numbered."""
    value = envelope.metadata.get(INVOCATION)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def call_order(envelopes: Iterable[Envelope]) -> list[Envelope]:
    """Envelopes in the order their calls started (``chronicle.sequence``; unnumbered last)."""

    def key(item: tuple[int, Envelope]) -> tuple[int, int]:
        position, envelope = item
        sequence = sequence_of(envelope)
        return (sequence if sequence is not None else 1 << 62, position)

    return [envelope for _, envelope in sorted(enumerate(envelopes), key=key)]


def output_is_lossy(envelope: Envelope) -> bool:
    """Whether the recorded output holds ``{"$repr": ...}`` markers instead of the value."""
    return bool(envelope.metadata.get(LOSSY_OUTPUT))


def is_streamed(envelope: Envelope) -> bool:
    """Whether the recorded call's result was consumed as a stream."""
    return envelope.metadata.get(STREAMED) is True


def is_incomplete(envelope: Envelope) -> bool:
    """Whether the recorded stream stopped before its end (early stop, failure, dropped)."""
    return envelope.metadata.get(INCOMPLETE) is True


def chunk_count(envelope: Envelope) -> int | None:
    """How many items the recorded stream passed to its caller, if it was streamed."""
    value = envelope.metadata.get(CHUNK_COUNT)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def recorded_chunks(envelope: Envelope) -> list[JsonValue] | None:
    """A streamed model call's recorded chunks (shared fields put back), or ``None`` when they
    were not kept."""
    value = envelope.metadata.get(CHUNKS)
    if not isinstance(value, list):
        return None
    shared = envelope.metadata.get(SHARED_CHUNK_FIELDS)
    if not isinstance(shared, dict) or not shared:
        return value
    return [{**shared, **chunk} if isinstance(chunk, dict) else chunk for chunk in value]


def shared_fields(chunks: list[JsonValue]) -> tuple[dict[str, JsonValue], list[JsonValue]]:
    """``(fields, chunks without them)``: the top-level scalar fields every chunk has with the
    same value, and the chunks less those fields, keys in their order (the input is not
    modified)."""
    first = chunks[0] if chunks and isinstance(chunks[0], dict) else None
    if first is None or len(chunks) < 2:
        return {}, chunks
    shared: dict[str, JsonValue] = {
        key: value
        for key, value in first.items()
        if (value is None or isinstance(value, (str, int, float, bool))) and value == value
    }
    # The common case is one C call and one tuple comparison per chunk (a plain dict's values
    # picked by key; a subclass could make up a missing one, so it is compared item by item).
    pick = itemgetter(*shared) if shared else None
    expected = pick(first) if pick is not None else None
    for chunk in chunks:
        if type(chunk) is dict and pick is not None:
            try:
                if pick(chunk) == expected:
                    continue
            except KeyError:
                pass
        elif not isinstance(chunk, dict):
            return {}, chunks
        elif shared.items() <= chunk.items():
            continue
        for key in [key for key, value in shared.items() if chunk.get(key, chunk) != value]:
            del shared[key]
        if not shared:
            return {}, chunks
        pick = itemgetter(*shared)
        expected = pick(first)
    keys = list(shared)
    rest: list[JsonValue] = []
    for chunk in chunks:
        kept = dict(chunk)  # type: ignore[arg-type]  # every chunk is a dict (checked above)
        for key in keys:
            del kept[key]
        rest.append(kept)
    return shared, rest


def output_is_binary(envelope: Envelope) -> bool:
    """Whether the recorded output holds bytes as ``{"$bytes": ...}`` markers."""
    return bool(envelope.metadata.get(BINARY_OUTPUT))


def error_detail(envelope: Envelope) -> dict[str, JsonValue]:
    """The recorded detail of a failure (see ``ERROR``); ``{}`` when there is none."""
    detail = envelope.metadata.get(ERROR)
    return detail if isinstance(detail, dict) else {}


def output_types(envelope: Envelope) -> dict[str, str] | None:
    """The recorded encodings of the output's values (see ``OUTPUT_TYPES``), or ``None`` when
    the output was recorded as plain JSON (or by a Chronicle that did not record them)."""
    value = envelope.metadata.get(OUTPUT_TYPES)
    if not isinstance(value, dict) or not value:
        return None
    return {pointer: found for pointer, found in value.items() if isinstance(found, str)}


def output_recorded(envelope: Envelope) -> bool:
    """Whether the call's output was recorded at all (``capture_output`` was on)."""
    return envelope.metadata.get(OUTPUT_NOT_RECORDED) is not True


_CUT = "…[truncated "
"""How every cut the capture makes begins: ``…[truncated N bytes]`` after a string's kept part,
``…[truncated N items]`` as a list's last item, ``…[truncated N keys]`` as a dict's last key."""


def output_truncated(envelope: Envelope) -> bool:
    """Whether the recorded output was cut to ``max_payload_bytes``.

    ``TRUNCATED_OUTPUT`` says so; an envelope recorded before that key existed says only that
    something was cut (``TRUNCATED``), and then the output is searched for the capture's cuts.
    """
    metadata = envelope.metadata
    if metadata.get(TRUNCATED_OUTPUT) is True:
        return True
    if metadata.get(TRUNCATED) is not True or OUTPUT_NOT_RECORDED in metadata:
        return False
    output = envelope.output
    return output is not None and holds_cut(output.raw)


def holds_cut(raw: JsonValue) -> bool:
    """Whether ``raw`` holds one of the capture's cuts (``…[truncated ...``)."""
    if isinstance(raw, str):
        return _CUT in raw
    if isinstance(raw, list):
        return any(holds_cut(item) for item in raw)
    if isinstance(raw, dict):
        return any(_CUT in key or holds_cut(item) for key, item in raw.items())
    return False


def pointer_token(key: str) -> str:
    """A dict key as one JSON Pointer reference token (``~`` as ``~0``, ``/`` as ``~1``)."""
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def pointer_tokens(pointer: str) -> list[str] | None:
    """A JSON Pointer's reference tokens, unescaped (``""``: none, the whole value); ``None``
    when ``pointer`` is not one (it must be empty or start with ``/``)."""
    if not pointer:
        return []
    if not pointer.startswith("/"):
        return None
    return [
        token.replace("~1", "/").replace("~0", "~") if "~" in token else token
        for token in pointer[1:].split("/")
    ]
