"""Streams and generators: calls that are still running when the function returns.

A streamed model call returns the SDK's stream; a generator boundary returns a generator. Such a
call is over only once its caller has consumed the result, so ``RecordedCall.complete`` asks the
spec's ``StreamFormat`` to ``hand_off`` the result: it gets back a wrapper, from this module, to
give the caller in its place. The wrapper

- passes each item through the moment the SDK (or the generator) yields it; nothing is read
  ahead of the caller;
- attaches the boundary's OpenTelemetry context around each step (``next``, ``send``, ``throw``,
  ``close`` and their async forms), so boundaries called while an item is produced nest under
  this one on every resume, not only the first;
- hands each item to the call (a ``StreamingCall``) to keep, and ends the call exactly once:
  when the stream is exhausted, closed, fails, or is garbage-collected. Every end but exhaustion
  is recorded as incomplete.

The call keeps a ``StreamCapture``: each item is put in JSON form as it passes, before the
caller can change it, and folded by an ``Assembler`` into the output the call records (a model
stream: the response a plain call returns, from ``chronicle.llm``; a generator: the list of its
items), whose strings and whole size are cut to ``max_payload_bytes``. A model stream also
keeps the items themselves, for replay, while they add up to about ``max_payload_bytes``; past
that they are let go. So a very long stream holds a bounded amount.

A ``StreamFormat`` also says how a replay emits the stream again (``restore_item``, ``replay``)
and how to stream a call that was recorded without streaming (``rechunk``); ``chronicle.replay``
reads those.
"""

from __future__ import annotations

import logging
import time
import types
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from opentelemetry import context as otel_context
from pydantic import JsonValue

from chronicle.otel.context import detach
from chronicle.recording.capture import dumps, json_form
from chronicle.redaction import Redaction, is_credential_value, may_name_credential
from chronicle.wire import CHUNK_COUNT, FIRST_CHUNK_MS, INCOMPLETE, STREAMED, shared_fields

logger = logging.getLogger("chronicle")

Flavor = Literal["sync", "async"]


class Assembler(Protocol):
    """Folds a stream's items (JSON, in order) into the output its call records.

    ``add`` takes one item; ``result`` is the output so far, whether or not the stream ran to
    its end. Both are total: odd items are skipped, never raised on. The model providers'
    assemblers (``chronicle.llm.openai_streams.ChatStreamAssembler`` and friends) fit this protocol.
    """

    def add(self, item: JsonValue) -> None:
        """Fold in the next item."""
        ...

    def result(self) -> JsonValue:
        """The output so far, whether or not the stream ran to its end."""
        ...


class StreamingCall(Protocol):
    """The call's side of a hand-off: what a wrapper reports to while its stream runs."""

    kwargs: dict[str, object]
    """The arguments the function was called with (a format's ``hand_off`` may read them)."""

    def step_context(self) -> otel_context.Context | None:
        """The context to attach around each step (the boundary's), or ``None``; read once,
        when the stream is handed off."""
        ...

    def item_keeper(self) -> Callable[[object], None]:
        """What to call with each item as the stream passes it to the caller (it never raises);
        read once, when the stream is handed off."""
        ...

    def end_stream(self, error: BaseException | None = None, *, incomplete: bool = False) -> None:
        """The stream ended (``error``: it raised). Only the first call counts."""
        ...

    def end_with(self, result: object) -> None:
        """The call's result arrived after all, whole (a response body read late)."""
        ...


HandOff = Callable[[object, StreamingCall], object]
"""``hand_off(result, call)``: the wrapper to return in place of ``result``, or ``None`` when
``result`` is not a stream (the call then completes as usual)."""


def _no_rechunk(raw: JsonValue, arguments: Mapping[str, object]) -> list[JsonValue] | None:
    return None


def _follow_recording(arguments: Mapping[str, object]) -> bool | None:
    return None


@dataclass(frozen=True)
class StreamFormat:
    """How one kind of call streams: what is kept while it runs, and how a replay emits it again.

    - ``hand_off``: the wrapper for a live result (see ``HandOff``).
    - ``assembler(limit)``: a fresh ``Assembler`` for one call, keeping strings of at most
      ``limit`` characters.
    - ``keeps_items``: keep the items themselves beside the assembled output (a model stream,
      whose assembled output is the provider's response); otherwise the assembled output is the
      list of items (a generator).
    - ``assembled``: what hooks (``crossing``) and a replay's ``captured_result`` get for the
      assembled JSON output (an SDK response type, say); ``None``: the JSON itself.
    - ``requested(arguments)``: whether a call with these arguments (by name) asks for a stream;
      ``None`` when only the recording can tell. A replay serves each call in the shape it asks
      for.
    - ``item_json``: the JSON of a live item, already JSON-safe (an SDK chunk: the fields the
      server sent, so a replay rebuilds the same object), or ``None`` to have it walked into
      JSON form like any value (as when ``item_json`` is ``None``). It is called before the
      caller gets the item and its result is kept as it is, so it must share no list or dict
      with the item (a serializer's output, not the item's own ``__dict__``).
    - ``restore_item``: one recorded item as the caller gets it (an SDK chunk type); ``None``:
      plain JSON with attribute access.
    - ``replay(items)``: what a stubbed call returns around the restored items (an iterator that
      raises where the recording ended): an SDK-shaped stream, or a generator.
    - ``rechunk(output, arguments)``: the items a streamed call would have yielded for an output
      recorded without streaming, or ``None`` when that cannot be rebuilt faithfully.
    """

    hand_off: HandOff
    assembler: Callable[[int], Assembler]
    replay: Callable[[Iterator[object]], object]
    keeps_items: bool = False
    assembled: Callable[[JsonValue], object] | None = None
    requested: Callable[[Mapping[str, object]], bool | None] = _follow_recording
    item_json: Callable[[object], JsonValue | None] | None = None
    restore_item: Callable[[JsonValue], object] | None = None
    rechunk: Callable[[JsonValue, Mapping[str, object]], list[JsonValue] | None] = _no_rechunk


# ---- generators -------------------------------------------------------------------------------


class ItemList:
    """The assembler of a generator: the list of its items, while they add up to ``limit`` bytes.

    Past the budget the items are no longer kept and ``cut`` is set (the recording is then
    flagged truncated, and a replay yields the kept items only).
    """

    def __init__(self, limit: int) -> None:
        self._budget = limit
        self._items: list[JsonValue] = []
        self.cut = False

    def add(self, item: JsonValue) -> None:
        """Keep ``item`` while the items fit the budget."""
        if self.cut:
            return
        self._budget -= len(dumps(item))
        if self._budget < 0:
            self.cut = True
            return
        self._items.append(item)

    def result(self) -> JsonValue:
        """The items kept, in order."""
        return list(self._items)


def _hand_off_generator(result: object, call: StreamingCall) -> object:
    kind = type(result)
    if kind is types.GeneratorType:
        return RecordedGenerator(result, call)
    if kind is types.AsyncGeneratorType:
        return RecordedAsyncGenerator(result, call)
    return None


def _replay_generator(items: Iterator[object]) -> Iterator[object]:
    yield from items


async def _replay_async_generator(items: Iterator[object]) -> AsyncIterator[object]:
    for item in items:
        yield item


class ReplayedItems:
    """A stubbed generator whose flavor is unknown: iterate it with ``for`` or ``async for``."""

    def __init__(self, items: Iterator[object]) -> None:
        self._items = items

    def __iter__(self) -> ReplayedItems:
        return self

    def __next__(self) -> object:
        return next(self._items)

    def __aiter__(self) -> ReplayedItems:
        return self

    async def __anext__(self) -> object:
        try:
            return next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None


def generator_format(flavor: Flavor | None) -> StreamFormat:
    """The format of a boundary on a generator function (``flavor``) or on any other function.

    Any boundary whose function returns a generator or an async generator records it as a
    stream. A stubbed generator function yields the recorded items (sync or async, as the
    function); for any other function the stub can be iterated either way.
    """
    replay: Callable[[Iterator[object]], object]
    if flavor == "sync":
        replay = _replay_generator
    elif flavor == "async":
        replay = _replay_async_generator
    else:
        replay = ReplayedItems
    requested: Callable[[Mapping[str, object]], bool | None] = (
        _follow_recording if flavor is None else _always
    )
    return StreamFormat(
        hand_off=_hand_off_generator, assembler=ItemList, replay=replay, requested=requested
    )


def _always(arguments: Mapping[str, object]) -> bool:
    return True


GENERATOR_RESULTS = generator_format(None)
"""The format of an ordinary boundary: a generator it returns is recorded as a stream."""


# ---- what a call keeps ------------------------------------------------------------------------


FOLD_BATCH = 16
"""How many passed items a ``StreamCapture`` holds, in JSON form, before folding them into the
output: one loop over a batch costs less than a call per item (docs/benchmarks.md, "Streams
(item 3)")."""


class StreamCapture:
    """What a call keeps of its stream: the assembled output, the items, count and first time.

    ``add`` is called for each item as it passes, on the consumer's thread before the caller
    gets the item, and takes the item's content there and then: an SDK chunk (a format with
    ``item_json``) as the JSON of the fields the server sent, any other item walked into JSON
    form. The caller, or whatever produced the item, may change it afterwards (LlamaIndex
    appends each tool-call argument piece onto the first delta object of a chat stream, a
    generator may yield the same list again, grown); the recording holds the item as it passed.
    The JSON is held and folded into the output ``FOLD_BATCH`` items at a time, and the rest when
    the output, ``items`` or the metadata is read. ``limit`` is ``max_payload_bytes``, which
    bounds the items kept (their size is estimated from a sample) and each string of the output.
    """

    def __init__(self, fmt: StreamFormat, limit: int) -> None:
        self._limit = limit
        self._item_json = fmt.item_json
        self.assembler = fmt.assembler(limit)
        self._items: list[JsonValue] | None = [] if fmt.keeps_items else None
        self._held: list[JsonValue] = []
        self._budget = limit
        self._measured = self._sampled = 0
        self._folded = 0
        self.count = 0
        self.first_ns: int | None = None
        self.lossy = False
        self.truncated = False
        self.masked = False
        """``output``'s redaction changed some string (``JsonForm.masked``)."""

    def add(self, item: object) -> None:
        """Keep ``item``, which the stream is about to pass to its caller, as it is now. Never
        raises: an item that cannot be kept is left out of the recording (and logged)."""
        if self.first_ns is None:
            self.first_ns = time.time_ns()
        self.count += 1
        item_json = self._item_json
        try:
            value = item_json(item) if item_json is not None else None
            if value is None:
                form = json_form(item, max_string_bytes=self._limit)
                value = form.value
                self.lossy = self.lossy or form.lossy
                self.truncated = self.truncated or form.truncated
        except Exception:
            logger.exception("could not keep a stream item; the recording misses it")
            return
        held = self._held
        held.append(value)
        if len(held) >= FOLD_BATCH:
            self._fold()

    @property
    def items(self) -> list[JsonValue] | None:
        """The items kept so far in JSON form (``None``: not kept, or past the budget)."""
        self._fold()
        return self._items

    def _fold(self) -> None:
        """Fold the held items into the output and the kept items; an item that fails is
        skipped. (One loop, no call per item: this runs for every item of every stream.)"""
        held = self._held
        if not held:
            return
        self._held = []
        add = self.assembler.add
        for value in held:
            try:
                self._folded = folded = self._folded + 1
                add(value)
                items = self._items
                if items is None:
                    continue
                # Sized by its repr (close to its JSON's, and cheaper), for the first items and
                # one in eight after that; the others are charged the mean so far (a stream's
                # chunks are alike).
                if folded <= 16 or not folded & 7:
                    size = len(repr(value))
                    self._measured += size
                    self._sampled += 1
                else:
                    size = self._measured // self._sampled
                self._budget -= size
                if self._budget < 0:
                    self._items, self.truncated = None, True  # replay rebuilds from the output
                else:
                    items.append(value)
            except Exception:
                logger.exception("could not keep a stream item; the recording misses it")

    def output(self, redaction: Redaction | None) -> JsonValue:
        """The assembled output in JSON form: redacted by ``redaction``, then cut to the limit."""
        self._fold()
        limit = self._limit
        form = json_form(
            self.assembler.result(),
            max_string_bytes=limit,
            max_total_bytes=limit,
            redaction=redaction,
        )
        self.lossy = self.lossy or form.lossy
        self.truncated = self.truncated or form.truncated or getattr(self.assembler, "cut", False)
        self.masked = form.masked
        return form.value

    def stored_items(
        self, output: JsonValue, redaction: Redaction
    ) -> tuple[JsonValue, JsonValue] | None:
        """The kept items as a recording stores them, or ``None`` when they must not be stored.

        Stored: ``(shared, rest)``, the items split by ``wire.shared_fields`` and each part
        redacted (``redaction.json``; ``shared`` is ``{}`` when no field is shared). Not stored
        when ``output`` (the output as it is recorded) is other than assembled (a secret masked,
        a string cut: the items could hold in pieces what the output no longer does), or when
        the items spell a secret across several of them in a field the assembler does not fold
        into the output (``delta.audio.transcript``, a provider's own extension): the strings at
        the same place in every item (same keys, same list positions) are joined in order and
        redacted, and if that masks anything the items go (the same rule as for the fields the
        output holds). Call only while ``items`` is not ``None``. Never raises.

        One walk over the items gathers those strings and tells whether ``redaction.json``
        would change anything, and only then is it called: the items rarely hold a secret.
        """
        items = self.items or []
        try:
            if output != self.assembler.result():
                return None
            shared, rest = shared_fields(items)
            if not redaction.redactors:
                return shared, rest
            text = redaction.text
            joined_places: list[list[str]] = []
            clean = _gather_items(rest, redaction, joined_places)
            count = len(items)
            for value in shared.values():
                if isinstance(value, str) and value:  # the value of every item, joined
                    joined = value * count
                    if text(joined) is not joined:
                        return None
            for parts in joined_places:
                joined = "".join(parts)
                if text(joined) is not joined:
                    return None
            return (redaction.json(shared) if shared else {}), (
                rest if clean else redaction.json(rest)
            )
        except Exception:
            logger.exception("could not check a stream's chunks; they are not kept")
            return None

    def metadata(self, started_ns: int, incomplete: bool) -> dict[str, JsonValue]:
        """The ``chronicle.*`` keys that describe the stream (see ``chronicle.wire``)."""
        self._fold()
        metadata: dict[str, JsonValue] = {STREAMED: True, CHUNK_COUNT: self.count}
        if self.first_ns is not None:
            metadata[FIRST_CHUNK_MS] = round(max(self.first_ns - started_ns, 0) / 1e6, 3)
        if incomplete:
            metadata[INCOMPLETE] = True
        return metadata


_CLEAN, _CREDENTIAL, _REDACTED = 0, 1, 2
"""What a dict key is to a redaction (``_Verdicts`` remembers it per key): ``text`` keeps it and
it names no credential; it names one (a string under it is masked whole); ``text`` changes it."""

_SCALARS = frozenset({types.NoneType, bool, int, float})
"""The JSON types that hold no text (their subclasses take the longer way)."""


class _Verdicts(dict[object, int]):
    """What each dict key is to ``redaction`` (``_CLEAN``...), worked out on first sight."""

    def __init__(self, redaction: Redaction) -> None:
        super().__init__()
        self._redaction = redaction

    def __missing__(self, key: object) -> int:
        verdict = self[key] = _key_verdict(key, self._redaction)
        return verdict


def _gather(
    values: list[object],
    depth: int,
    redaction: Redaction,
    keys: _Verdicts,
    joined: list[list[str]],
) -> bool:
    """Walk ``values``, the containers found at one place of a stream's items (one per item, in
    their order; the items themselves are at depth 0), place by place down to 32 levels: the
    non-empty strings at each place inside them (a dict key, a list position) that holds more
    than one are appended to ``joined``, in item order; and whether ``redaction.json`` would
    give them back unchanged (``False`` when unsure: it is then called, and tells). ``keys``
    remembers what each dict key is to ``redaction``. A place is walked for all items at once,
    and the commonest types are told apart first: this runs for every item of every stream."""
    if depth >= 32:
        return False
    clean = True
    text = redaction.text
    strings: dict[object, list[str]] = {}
    inner: dict[object, list[object]] = {}
    for value in values:
        if isinstance(value, dict):
            for key, item in value.items():
                verdict = keys[key]
                kind = type(item)  # (isinstance costs a call; exact types first)
                if kind is str:
                    if item:
                        found = strings.get(key)
                        if found is None:
                            strings[key] = [item]
                        else:
                            found.append(item)
                    if (
                        verdict == _REDACTED
                        or (verdict == _CREDENTIAL and is_credential_value(key, item))
                        or text(item) is not item
                    ):
                        clean = False
                elif kind in _SCALARS:
                    if verdict == _REDACTED:
                        clean = False
                elif kind is dict or kind is list or isinstance(item, (dict, list)):
                    group = inner.get(key)
                    if group is None:
                        inner[key] = [item]
                    else:
                        group.append(item)
                    if verdict == _REDACTED:
                        clean = False
                elif isinstance(item, str):  # a subclass: gathered, and left to redaction.json
                    if item:
                        strings.setdefault(key, []).append(item)
                    clean = False
                elif verdict == _REDACTED or isinstance(item, tuple):  # a tuple is not JSON:
                    clean = False  # redaction.json would return a list for it
        else:
            for index, item in enumerate(value):  # type: ignore[arg-type]  # (a list)
                kind = type(item)
                if kind in _SCALARS:
                    continue
                if kind is str or isinstance(item, str):
                    if item:
                        strings.setdefault(index, []).append(item)
                    if text(item) is not item:
                        clean = False
                elif kind is dict or kind is list or isinstance(item, (dict, list)):
                    inner.setdefault(index, []).append(item)
                elif isinstance(item, tuple):
                    clean = False
    for found in strings.values():
        if len(found) > 1:
            joined.append(found)
    for group in inner.values():
        if not _gather(group, depth + 1, redaction, keys, joined):
            clean = False
    return clean


def _gather_items(items: list[JsonValue], redaction: Redaction, joined: list[list[str]]) -> bool:
    """``_gather`` over a stream's items (``rest``): the strings among them share one place, and
    so do the containers (the dicts' keys and the lists' positions are the places inside)."""
    clean = True
    text = redaction.text
    strings: list[str] = []
    containers: list[object] = []
    for item in items:
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is str or isinstance(item, str):
            if item:
                strings.append(item)  # type: ignore[arg-type]
            if text(item) is not item:  # type: ignore[arg-type]
                clean = False
        elif kind is dict or kind is list or isinstance(item, (dict, list)):
            containers.append(item)
        elif isinstance(item, tuple):
            clean = False
    if len(strings) > 1:
        joined.append(strings)
    if containers and not _gather(containers, 0, redaction, _Verdicts(redaction), joined):
        clean = False
    return clean


def _key_verdict(key: object, redaction: Redaction) -> int:
    """What ``key`` is to ``redaction.json``: ``_CLEAN``, ``_CREDENTIAL`` or ``_REDACTED``."""
    if not isinstance(key, str):
        return _CLEAN  # not JSON, and left as it is
    if redaction.text(key) is not key:
        return _REDACTED
    return _CREDENTIAL if redaction.masks_credentials and may_name_credential(key) else _CLEAN


# ---- the wrappers -----------------------------------------------------------------------------


def _abandoned(call: StreamingCall) -> None:
    """A wrapper was garbage-collected before its stream ended."""
    try:
        call.end_stream(None, incomplete=True)
    except BaseException:  # a hook's verdict has nobody to reach here
        logger.exception("ending an abandoned stream failed")


class _Recorded:
    """What the sync and async wrappers share: the inner object, the call, the one ending."""

    def __init__(self, inner: Any, call: StreamingCall) -> None:
        self._inner = inner
        self._call = call
        self._context = call.step_context()
        self._keep = call.item_keeper()
        self._done = False
        self._finalizer = weakref.finalize(self, _abandoned, call)

    def _end(self, error: BaseException | None, incomplete: bool) -> None:
        if self._done:
            return
        self._done = True
        self._finalizer.detach()
        self._call.end_stream(error, incomplete=incomplete)

    def _attach(self) -> object:
        ctx = self._context
        return otel_context.attach(ctx) if ctx is not None else None

    def _raised(
        self, token: object, error: BaseException, done: type[BaseException] | None = None
    ) -> None:
        """A step (or a close) raised ``error``: let go of its context (``token``) and end the
        call, complete when ``error`` is ``done`` (the end of the iteration), else as failed."""
        detach(token, "stream step")
        if done is not None and isinstance(error, done):
            self._end(None, False)
        else:
            self._end(error, True)

    def _closed(self) -> None:
        """The caller closed the stream (itself, or its HTTP response)."""
        self._end(None, True)

    @property
    def response(self) -> object:
        """The SDK stream's HTTP response; closing it ends the call (the SDKs' stream helpers
        close a stream that way)."""
        return _ClosingResponse(self._inner.response, self)

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":  # before __init__ set it
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"<recorded stream of {self._inner!r}>"


class _ClosingResponse:
    """An SDK stream's HTTP response; ``close``/``aclose`` also end the recorded call."""

    def __init__(self, inner: Any, owner: _Recorded) -> None:
        self._inner = inner
        self._owner = owner

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._owner._closed()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._owner._closed()

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


class RecordedIterator(_Recorded):
    """A sync stream (an SDK ``Stream``, any iterator) handed to the caller in place of its own.

    Iterating it iterates the inner stream, one item per step; ``close()``, ``with`` and any
    other attribute go to the inner stream.
    """

    def __iter__(self) -> RecordedIterator:
        return self

    def _step(self, advance: Callable[..., Any] | None = None, *args: Any) -> Any:
        """One step: ``advance(*args)`` (by default the inner stream's ``__next__``) in the
        boundary's context, the item kept; the call ended when it raises."""
        if advance is None:
            advance = self._inner.__next__
        if self._done:
            return advance(*args)
        ctx = self._context  # (attach and detach inline: this runs once per item)
        token = otel_context.attach(ctx) if ctx is not None else None
        try:
            item = advance(*args)
        except BaseException as exc:
            self._raised(token, exc, StopIteration)
            raise
        if token is not None:
            detach(token, "stream step")
        self._keep(item)
        return item

    __next__ = _step  # (a step of its own would cost a call per item)

    def close(self) -> None:
        """Close the inner stream; a stream closed before its end is recorded incomplete."""
        close = getattr(self._inner, "close", None)
        if close is not None:
            token = self._attach()
            try:
                close()
            except BaseException as exc:
                self._raised(token, exc)
                raise
            detach(token, "stream step")
        self._closed()

    def __enter__(self) -> RecordedIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RecordedGenerator(RecordedIterator):
    """A generator handed to the caller in place of its own: ``send`` and ``throw`` go through."""

    def send(self, value: object) -> Any:
        """``generator.send`` with the boundary's context attached."""
        return self._step(self._inner.send, value)

    def throw(self, *args: Any) -> Any:
        """``generator.throw`` with the boundary's context attached."""
        return self._step(self._inner.throw, *args)


class RecordedAsyncIterator(_Recorded):
    """An async stream (an SDK ``AsyncStream``, any async iterator) in place of its own."""

    def __aiter__(self) -> RecordedAsyncIterator:
        return self

    async def __anext__(self) -> Any:
        return await self._astep(self._inner.__anext__)

    async def _astep(self, advance: Callable[..., Any], *args: Any) -> Any:
        if self._done:
            return await advance(*args)
        token = self._attach()
        try:
            item = await advance(*args)
        except BaseException as exc:
            self._raised(token, exc, StopAsyncIteration)
            raise
        detach(token, "stream step")
        self._keep(item)
        return item

    async def _aclose(self, *names: str) -> None:
        for name in names:
            close = getattr(self._inner, name, None)
            if close is None:
                continue
            token = self._attach()
            try:
                outcome = close()
                if hasattr(outcome, "__await__"):
                    await outcome
            except BaseException as exc:
                self._raised(token, exc)
                raise
            detach(token, "stream step")
            break
        self._closed()

    async def close(self) -> None:
        """Close the inner stream (``await``); before its end, the stream is recorded incomplete."""
        await self._aclose("close", "aclose")

    async def aclose(self) -> None:
        """``close`` under the async generator's name."""
        await self._aclose("aclose", "close")

    async def __aenter__(self) -> RecordedAsyncIterator:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class RecordedAsyncGenerator(RecordedAsyncIterator):
    """An async generator in place of its own: ``asend`` and ``athrow`` go through."""

    async def asend(self, value: object) -> Any:
        """``agen.asend`` with the boundary's context attached."""
        return await self._astep(self._inner.asend, value)

    async def athrow(self, *args: Any) -> Any:
        """``agen.athrow`` with the boundary's context attached."""
        return await self._astep(self._inner.athrow, *args)


def hand_off_iterator(result: object, call: StreamingCall, flavor: Flavor) -> object:
    """``result`` wrapped as a recorded stream of ``flavor``, or ``None`` when it is not one.

    A generator is wrapped as a generator whatever ``flavor`` says; another object must have
    ``__next__`` (sync) or ``__anext__`` (async).
    """
    handed = _hand_off_generator(result, call)
    if handed is not None:
        return handed
    kind = type(result)
    if flavor == "async" and hasattr(kind, "__anext__"):
        return RecordedAsyncIterator(result, call)
    if flavor == "sync" and hasattr(kind, "__next__"):
        return RecordedIterator(result, call)
    return None
