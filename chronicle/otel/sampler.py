"""``ReplaySampler``: nothing started during a replay is sampled.

Replay must write nothing: not to the control plane and not, as recorded spans, to the user's
exporters. Chronicle's own boundaries decide before their body runs and start no span at all
while replaying; this sampler covers every other span started inside a replay (the user's own,
or a library's) on providers that use it, and, while a replay is active in the process, spans
started in contexts that do not carry it (unless every active replay has ``export_spans``). A
replay recorded as a new trace (``record=True``) counts as exporting: its spans are the new
trace's.
Chronicle wraps the environment's sampler in it when it builds the provider; wrap your own
sampler in it to get the same on yours.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes
from typing_extensions import override

from chronicle.otel.context import ACTIVE_REPLAYS, current_replay_in


class ReplaySampler(Sampler):
    """Drops every span started inside a Chronicle replay; defers to ``root`` otherwise."""

    def __init__(self, root: Sampler) -> None:
        self._root = root

    @property
    def root(self) -> Sampler:
        """The sampler it defers to outside replays."""
        return self._root

    @override
    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        replay = current_replay_in(parent_context)
        if replay is not None:
            if not replay.export_spans:
                return SamplingResult(Decision.DROP, None, trace_state)
        elif ACTIVE_REPLAYS and not all(r.export_spans for r in ACTIVE_REPLAYS.snapshot()):
            # Started outside any replay's context while one runs (another thread): the replay
            # writes nothing anywhere, so this span is not exported either.
            return SamplingResult(Decision.DROP, None, trace_state)
        return self._root.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    @override
    def get_description(self) -> str:
        return f"ReplaySampler{{{self._root.get_description()}}}"


def drops_below_dropped(sampler: Sampler) -> bool:
    """Whether ``sampler`` drops every span whose local parent it dropped, without being asked
    (``ChronicleTracer.start_unsampled``): ``ALWAYS_OFF``; ``TraceIdRatioBased``, whose decision
    is the trace id's, so the parent's; a ``ParentBased`` (the SDK's default, and the
    ``parentbased_*`` of ``OTEL_TRACES_SAMPLER``) whose ``local_parent_not_sampled`` is one of
    these; a ``ReplaySampler`` over one of these (it only drops more). Any other sampler (a
    subclass, the user's own) might sample such a span: ``False``, and it is asked."""
    if isinstance(sampler, ReplaySampler):
        sampler = sampler.root
    kind = type(sampler)
    if kind is StaticSampler:
        return sampler.should_sample(None, 0, "").decision is Decision.DROP
    if kind is TraceIdRatioBased:
        return True
    if kind is ParentBased or kind is ParentBasedTraceIdRatio:
        below: Sampler = sampler._local_parent_not_sampled  # type: ignore[attr-defined]
        return type(below) is not ParentBased and drops_below_dropped(below)
    return False
