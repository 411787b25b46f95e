"""Replaying streams: a stubbed streamed call or generator yields what was recorded.

``stub_stream`` answers a stubbed call when the call asks for a stream or the recording is one
(``chronicle.streamed``). The call gets what it would have got live, in the shape it asks for:

- a recorded stream, to a call that streams: the recorded items again, in order, restored as the
  caller's types (SDK chunk or event objects for a wrapped client), inside what the call returns
  (an SDK-shaped ``ReplayedStream``, or a generator). A stream recorded as failing raises after
  its last item, where it failed, what a stubbed call raises for a recorded failure (the SDK's
  own exception, the generator's own class, else ``RecordedCallError``); one that stopped early
  (the consumer broke off, or the items outgrew ``max_payload_bytes``) raises ``ReplayError`` if
  read past what was recorded. When a model stream's chunks were let go (past
  ``max_payload_bytes``), they are rebuilt from the assembled response.
- a recorded stream, to a call that does not stream: the plain path serves the assembled
  response (``output.raw``), unless the stream stopped early (``ReplayError``: it cannot be served
  whole).
- a recording that was not streamed, to a call that streams: the items are rebuilt from the
  output (``StreamFormat.rechunk``), or ``ReplayError`` says the format cannot.

``ReplayedStream`` and ``AsyncReplayedStream`` stand in for the SDKs' ``Stream``/``AsyncStream``
(iteration, ``close``, ``with``, a ``response`` with no headers), so the SDKs' own helpers
(``text_stream``, ``get_final_message()``, ``get_final_completion()``) work on them unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import httpx
from agentplane_primitives.models import Envelope
from pydantic import JsonValue

from chronicle import wire
from chronicle.errors import LossyReplayError, ReplayError
from chronicle.recording.call import CallSpec
from chronicle.replay.recorded import replayed_failure, restore_plain


def stub_stream(
    spec: CallSpec,
    n: int,
    envelope: Envelope,
    arguments: Mapping[str, object],
    *,
    url: str | None = None,
) -> tuple[object, object] | None:
    """``(what the call returns, what the replay keeps as its result)`` for a streamed call.

    ``None`` when neither the call nor the recording streams, or when the plain path answers (a
    recorded stream to a call that does not stream; a recorded failure or lossy output, which it
    raises). Raises ``ReplayError`` when the recording cannot be served in the shape the call
    asks for; errors name the trace's page at ``url``.
    """
    fmt = spec.stream_format
    if fmt is None:
        return None
    streamed = wire.is_streamed(envelope)
    asked = fmt.requested(arguments)
    wants = streamed if asked is None else asked
    failed = _failed(envelope)
    output = envelope.output
    raw: JsonValue = output.raw if output is not None else None
    if not wants:
        if streamed and wire.is_incomplete(envelope) and not failed:
            raise ReplayError(
                f"replay: call {n} of {spec.name!r} was recorded as a stream that stopped early "
                f"(after {wire.chunk_count(envelope)} item(s)), so it cannot be served whole to "
                "a call that does not stream; call it streamed as recorded, or run it live with "
                f"ReplayPlan().run({spec.name!r}, {n})"
            )
        return None
    if wire.output_is_lossy(envelope):
        if streamed:
            raise LossyReplayError(spec.name, n, url=url)
        return None
    ending: BaseException | None = None
    if not streamed:
        if failed:
            return None  # raised at the call, as it was
        items = fmt.rechunk(raw, arguments) if fmt.keeps_items else _as_items(raw)
        if items is None:
            raise ReplayError(
                f"replay: call {n} of {spec.name!r} was recorded without streaming and its "
                "output cannot be rebuilt as the stream this call asks for; call it the way it "
                f"was recorded (not streamed), or run it live with "
                f"ReplayPlan().run({spec.name!r}, {n})"
            )
    else:
        kept = wire.recorded_chunks(envelope) if fmt.keeps_items else _as_items(raw)
        rebuilt = kept is None and fmt.keeps_items
        items = fmt.rechunk(raw, arguments) if rebuilt else kept
        if items is None:
            raise ReplayError(
                f"replay: the recording of call {n} of {spec.name!r} holds neither its stream's "
                "items nor an output they can be rebuilt from; record it again, or run it live "
                f"with ReplayPlan().run({spec.name!r}, {n})"
            )
        ending = _ending(spec, n, envelope, len(items), rebuilt, url)
    restore = fmt.restore_item or restore_plain
    value = fmt.replay(_emit(items, restore, ending, f"{spec.name!r} call {n}"))
    assembled = fmt.assembled(raw) if fmt.assembled is not None else restore_plain(raw)
    return value, assembled


def _failed(envelope: Envelope) -> bool:
    status = envelope.envelope_status.status
    return status is not None and status.value == "failure"


def _as_items(raw: JsonValue) -> list[JsonValue] | None:
    return list(raw) if isinstance(raw, list) else None


def _ending(
    spec: CallSpec, n: int, envelope: Envelope, kept: int, rebuilt: bool, url: str | None
) -> BaseException | None:
    """What the replayed stream raises after its last item: what the recorded one did.

    A recorded failure is raised as a stubbed plain call raises it (``replayed_failure``): the
    SDK's own exception for a wrapped client's stream, a generator's own class when it can be
    rebuilt from the recorded message, else ``RecordedCallError``.
    """
    name = spec.name
    if _failed(envelope):
        output = envelope.output
        error = output.error if output is not None else None
        return replayed_failure(
            name,
            n,
            error.type if error is not None else "Exception",
            error.message if error is not None else "(no message recorded)",
            wire.error_detail(envelope),
            spec.restore_error,
            url=url,
        )
    count = wire.chunk_count(envelope)
    if wire.is_incomplete(envelope):
        return ReplayError(
            f"replay: the recorded stream of {name!r} call {n} stopped after {count} item(s) "
            "(its consumer stopped early, or it was dropped), so there is nothing more to "
            "replay; stop reading where the recorded run did, or run the call live with "
            f"ReplayPlan().run({name!r}, {n})"
        )
    if not rebuilt and count is not None and count > kept:
        return ReplayError(
            f"replay: only the first {kept} of the {count} items of {name!r} call {n} were "
            "recorded (they outgrew max_payload_bytes); raise max_payload_bytes and record "
            f"again, or run the call live with ReplayPlan().run({name!r}, {n})"
        )
    return None


def _emit(
    items: list[JsonValue],
    restore: Callable[[JsonValue], object],
    ending: BaseException | None,
    what: str,
) -> Iterator[object]:
    for position, item in enumerate(items):
        try:
            value = restore(item)
        except Exception as exc:
            # An edited or foreign recording: say which item, not an AttributeError later.
            raise ReplayError(
                f"replay: item {position} of the recorded stream of {what} cannot be rebuilt: "
                f"{exc}; record the call again, or run it live"
            ) from None
        yield value
    if ending is not None:
        raise ending


# ---- what a stubbed SDK stream looks like -----------------------------------------------------


class ReplayedResponse:
    """The HTTP response of a replayed stream: nothing was sent, so it has no headers."""

    status_code = 200
    http_version = "HTTP/1.1"
    is_closed = False

    @property
    def headers(self) -> httpx.Headers:
        """No headers were recorded: an empty, case-insensitive ``httpx.Headers``."""
        return httpx.Headers()

    def close(self) -> None:
        """Mark it closed."""
        self.is_closed = True

    async def aclose(self) -> None:
        """Mark it closed."""
        self.is_closed = True


class _ReplayedItems:
    """The recorded items of a stubbed streamed call, and the response it was closed through."""

    def __init__(self, items: Iterator[object]) -> None:
        self._items = items
        self.response = ReplayedResponse()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} (replayed)>"


class ReplayedStream(_ReplayedItems):
    """A stubbed streamed call's result, in place of the SDK's ``Stream``: the recorded items."""

    def __iter__(self) -> ReplayedStream:
        return self

    def __next__(self) -> object:
        if self.response.is_closed:
            raise StopIteration
        return next(self._items)

    def close(self) -> None:
        """Stop the stream (there is no connection to release)."""
        self.response.close()

    def __enter__(self) -> ReplayedStream:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.close()


class AsyncReplayedStream(_ReplayedItems):
    """A stubbed streamed call's result, in place of the SDK's ``AsyncStream``."""

    def __aiter__(self) -> AsyncReplayedStream:
        return self

    async def __anext__(self) -> object:
        if self.response.is_closed:
            raise StopAsyncIteration
        try:
            return next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        """Stop the stream (there is no connection to release)."""
        self.response.close()

    async def __aenter__(self) -> AsyncReplayedStream:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        await self.close()
