"""Incident files: a recorded request kept in git as a regression test.

An incident file holds the envelopes of one trace's request spans (one span, or every span of a
multi-service trace), written so that it diffs well: pretty JSON (two-space indent, UTF-8, a final
newline), the top-level keys in the order ``trace_id``, ``metadata`` (when there is any),
``spans``, ``envelopes``, spans in start order and each span's envelopes in call order. The
file's own structure has its keys sorted (the metadata, each span, each envelope's fields and
those of its ``envelope_status``, ``links``, ``input``, ``output`` and ``metadata``), while every
recorded value beneath them (``input.raw``, ``output.raw``, the messages, a metadata entry's
value...) keeps its keys in the order the code produced them: a dict a stubbed call returns from
the file is the dict the code returned (``list(result)`` and ``json.dumps(result)`` as recorded),
as a replay from the control plane serves it. Every envelope is validated with the
``agentplane_primitives`` model and written as the model dumps it (``null`` fields left out), so
a file saved from the control plane and one recorded by the pytest plugin look alike, and
recording an unchanged run again changes only ids and times::

    {
      "trace_id": "4bf9...",
      "spans": [{"service": "support-agent", "span_id": "00f0...", "started_at": "..."}],
      "envelopes": [{"envelope_id": "...", "name": "model", ...}, ...]
    }

A file may also hold ``metadata`` (after ``trace_id``): what is known of how it was recorded. The
pytest plugin writes ``recorded_by`` (``"pytest"``), ``test`` (the test's node id) and
``outcome`` (``"passed"``, or ``"failed"`` with ``failure``, the error's first line, redacted): a
file recorded from a failing test says so, so that a failure of the environment (no network, a
bad key) is not mistaken for the incident. Files are written atomically (a temporary file in the
same folder, then renamed over the old one): a crash or a parallel writer never leaves half a
file.

``Incident.read`` also reads the bare body of ``GET /v1/traces/{t}/spans/{s}/envelopes``
(``{"envelopes": [...]}``) and a plain list of envelopes, which older files hold.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentplane_primitives.models import Envelope
from pydantic import JsonValue, ValidationError

from chronicle import wire
from chronicle.errors import ControlPlaneError, ReplayError
from chronicle.save.client import HttpControlPlane, invalid_envelope
from chronicle.save.untrusted import MAX_DEPTH, deeper_than, read_json, too_deep


@dataclass(frozen=True)
class IncidentSpan:
    """One request span of an incident: which service handled it, when, and under which call.

    ``service`` and ``started_at`` are ``None`` in files that hold envelopes only.
    ``parent_envelope_id`` is the envelope (in another span) whose call this span served.
    """

    span_id: str
    service: str | None = None
    started_at: datetime | None = None
    parent_envelope_id: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The span's entry in the file (``None`` fields left out)."""
        body: dict[str, JsonValue] = {"span_id": self.span_id}
        if self.service is not None:
            body["service"] = self.service
        if self.started_at is not None:
            body["started_at"] = self.started_at.isoformat().replace("+00:00", "Z")
        if self.parent_envelope_id is not None:
            body["parent_envelope_id"] = self.parent_envelope_id
        return body


@dataclass(frozen=True)
class Incident:
    """The envelopes of one or more request spans of one trace, with what is known of the spans.

    ``spans`` are in start order and each holds at least one envelope; ``envelopes`` are grouped
    by span in that order, each span's in call order.
    """

    trace_id: str
    spans: tuple[IncidentSpan, ...]
    envelopes: tuple[Envelope, ...]
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)
    """How the file was recorded (see the module docstring); empty when nothing is known."""

    @classmethod
    def of(
        cls,
        envelopes: Iterable[Envelope | Mapping[str, Any]],
        spans: Iterable[IncidentSpan] = (),
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Incident:
        """An incident of ``envelopes`` (models or JSON), ordered; spans without one are left out.

        ``spans`` describe the envelopes' spans; a span they do not describe is listed by id only.
        ``metadata`` says how it was recorded (kept as given).
        Raises ``ValueError`` when there are no envelopes or they come from several traces, and
        ``pydantic.ValidationError`` for an item that is not a valid envelope.
        """
        models = [e if isinstance(e, Envelope) else Envelope.model_validate(e) for e in envelopes]
        if not models:
            raise ValueError("an incident needs at least one envelope")
        traces = sorted({e.trace_id for e in models})
        if len(traces) > 1:
            raise ValueError(f"the envelopes come from {len(traces)} traces: {', '.join(traces)}")
        by_span: dict[str, list[Envelope]] = {}
        for envelope in models:
            by_span.setdefault(envelope.span_id, []).append(envelope)
        known = {span.span_id: span for span in spans}
        listed = [known.get(span_id, IncidentSpan(span_id)) for span_id in by_span]
        first_seen = {span_id: position for position, span_id in enumerate(by_span)}
        listed.sort(key=lambda s: (s.started_at is None, s.started_at or 0, first_seen[s.span_id]))
        ordered = [e for span in listed for e in wire.call_order(by_span[span.span_id])]
        return cls(traces[0], tuple(listed), tuple(ordered), dict(metadata or {}))

    @classmethod
    def read(cls, path: Path) -> Incident:
        """Read an incident file (or a saved envelopes body) as untrusted input
        (``chronicle.save.untrusted.read_json``: a regular file only, within ``max_file_bytes``,
        UTF-8, bounded in values and depth).

        Raises ``FileNotFoundError`` when there is no file, and ``ReplayError`` naming the file
        and the problem when it cannot be read, is not JSON, or holds no valid envelopes (a
        ``RecordingFileError`` for what keeps it from being read at all).
        """
        data = read_json(path)
        items = data.get("envelopes") if isinstance(data, dict) else data
        if not isinstance(items, list) or not items:
            raise ReplayError(
                f"replay: {path} holds no envelopes; expected an incident file written by "
                "`python -m chronicle save` or the pytest plugin ({'envelopes': [...], ...})"
            )
        for position, item in enumerate(items):
            if deeper_than(item, MAX_DEPTH):
                raise too_deep(path, f"holds an envelope (item {position})")
        spans = data.get("spans", []) if isinstance(data, dict) else []
        metadata = data.get("metadata") if isinstance(data, dict) else None
        try:
            return cls.of(
                items,
                [_span_of(item) for item in spans if isinstance(item, dict)],
                metadata if isinstance(metadata, dict) else None,
            )
        except ValidationError as exc:
            where = f"{path} holds an invalid envelope"
            raise invalid_envelope(
                exc, where, "save it again with `python -m chronicle save`"
            ) from None
        except ValueError as exc:
            raise ReplayError(f"replay: {path}: {exc}") from None

    def envelopes_of(self, span_id: str) -> list[Envelope]:
        """The envelopes of one span, in call order."""
        return [e for e in self.envelopes if e.span_id == span_id]

    def to_text(self) -> str:
        """The file's text: stable, pretty JSON ending in a newline (see the module docstring)."""
        body: dict[str, Any] = {"trace_id": self.trace_id}
        if self.metadata:
            body["metadata"] = _sorted(dict(self.metadata))
        body |= {
            "spans": [_sorted(span.to_json()) for span in self.spans],
            "envelopes": [_envelope_json(e) for e in self.envelopes],
        }
        return json.dumps(body, indent=2, ensure_ascii=False) + "\n"

    def write(self, path: Path) -> None:
        """Write the file (its folder created if needed), replacing one that exists, atomically:
        a reader (another pytest worker, say) sees the old file or the new one, never a part."""
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
        )
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
                out.write(self.to_text())
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


@dataclass(frozen=True)
class SpanChoice:
    """A trace of several spans, read with no span chosen: what to choose from.

    ``spans`` are the spans with envelopes, in start order; ``counts`` their envelope counts.
    """

    trace_id: str
    spans: tuple[IncidentSpan, ...]
    counts: Mapping[str, int]

    def describe(self) -> str:
        """The spans (id, service, start, envelope count) and how to choose, a few lines."""
        width = max(len(s.service or "?") for s in self.spans)
        lines = [
            f"trace {self.trace_id} has {len(self.spans)} spans with envelopes; save one with "
            "--span SPAN_ID, or all of them as one incident with --all-spans:",
            f"  {'SPAN_ID':<16}  {'SERVICE':<{width}}  {'STARTED (UTC)':<23}  ENVELOPES",
        ]
        for span in self.spans:
            started = (
                span.started_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if span.started_at else "?"
            )
            lines.append(
                f"  {span.span_id:<16}  {span.service or '?':<{width}}  {started:<23}  "
                f"{self.counts[span.span_id]}"
            )
        return "\n".join(lines)


def read_incident(
    client: HttpControlPlane, trace_id: str, span_id: str | None = None, *, all_spans: bool = False
) -> Incident | SpanChoice:
    """The incident of a recorded trace on the control plane.

    ``span_id`` picks one span; ``all_spans`` keeps every span with envelopes; with neither, a
    trace of one span gives its incident and a trace of several a ``SpanChoice``. Raises
    ``ControlPlaneError`` naming the id to check when the trace or the span is unknown or has no
    envelopes (and when the control plane cannot be read).
    """
    trace = client.get_trace(trace_id)
    if trace is None:
        raise ControlPlaneError(
            f"trace {trace_id} is not on the control plane at {client.url}; check the id",
            status_code=404,
        )
    spans = [_span_of(item) for item in trace.get("spans", []) if isinstance(item, dict)]
    envelopes = client.trace_envelopes(trace_id)
    counts = Counter(str(e.get("span_id")) for e in envelopes)
    if span_id is not None:
        if span_id not in {s.span_id for s in spans} | set(counts):
            raise ControlPlaneError(
                f"trace {trace_id} has no span {span_id}; its spans: "
                f"{', '.join(s.span_id for s in spans) or 'none'}"
            )
        envelopes = [e for e in envelopes if e.get("span_id") == span_id]
    if not envelopes:
        where = f"span {span_id} of trace {trace_id}" if span_id else f"trace {trace_id}"
        raise ControlPlaneError(
            f"{where} has no envelopes on {client.url}, so there is nothing to replay; were its "
            "calls delivered (chronicle.flush())?"
        )
    incident = Incident.of(envelopes, spans)
    if span_id is None and not all_spans and len(incident.spans) > 1:
        return SpanChoice(trace_id, incident.spans, dict(counts))
    return incident


def _span_of(item: Mapping[str, Any]) -> IncidentSpan:
    started = item.get("started_at")
    service = item.get("service")
    parent = item.get("parent_envelope_id")
    return IncidentSpan(
        span_id=str(item.get("span_id", "")),
        service=service if isinstance(service, str) else None,
        started_at=_time(started) if isinstance(started, str) else None,
        parent_envelope_id=parent if isinstance(parent, str) else None,
    )


def _time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


_VALUE_PARTS = frozenset({"input", "output", "metadata"})
"""The envelope's parts whose fields are sorted but whose values are kept as recorded."""


def _envelope_json(envelope: Envelope) -> dict[str, Any]:
    """The envelope as the file holds it: its fields sorted, and those of its parts; below the
    fields of ``input``, ``output`` and ``metadata``, every value in the order it was recorded."""
    body = envelope.model_dump(mode="json", exclude_none=True)
    kept: dict[str, Any] = {}
    for key in sorted(body):
        value = body[key]
        if key in _VALUE_PARTS and isinstance(value, dict):
            kept[key] = {field: value[field] for field in sorted(value)}
        else:
            kept[key] = _sorted(value)
    return kept


def _sorted(value: Any) -> Any:
    """``value`` with the keys of every object in it sorted (lists keep their order)."""
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_sorted(item) for item in value]
    return value
