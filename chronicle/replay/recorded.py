"""Recorded JSON given back to code that expects objects, and recorded failures raised again.

``restore_plain(raw)`` turns a stubbed ``output.raw`` into ``RecordedDict``/``RecordedList``
(subclasses of ``dict`` and ``list``, so equality, indexing, ``json.dumps`` and ``isinstance``
checks for dict and list keep working) whose keys can also be read as attributes:
``resp.body.rows[0]``. ``restore_binary`` also turns ``{"$bytes": ...}`` markers into bytes.

``restore_typed(raw, types, ...)`` gives back a value by what was recorded: each value the
envelope describes (``wire.OUTPUT_TYPES``) is rebuilt by its codec (``recording/codecs.py``), its
own described values first; dicts and lists around them keep attribute access, those inside
them are plain. A value that cannot be rebuilt (its class cannot be found, it no longer
validates) comes back as its recorded JSON, with a warning naming the call and the place.

``restore_value(raw, annotation, binary, ..., types)`` is a ``@boundary`` stub's result: by what
was recorded when the envelope describes any value; else (a plain JSON output, or a recording
made before types were recorded) through the boundary's return annotation when it names a type
JSON does not keep (a pydantic model, a dataclass, a ``TypedDict``, an enum, ``bytes``, anywhere
inside it: ``list[Item]``, ``Item | None``): the recorded JSON is validated as that type with
pydantic. Other annotations (``dict``, ``list[str]``, ``Any``), annotations pydantic cannot
validate (a ``typing.TypedDict`` before Python 3.12) and none at all give ``restore_plain``'s
result.

``restore_with(restore, ...)`` is the result of a boundary with a ``restore`` of its own: a
``codecs.DecodedRestore`` gets the output decoded as above, any other ``output.raw`` as it is.

``refuse_unrecorded(...)`` raises ``UnrecordedOutputError`` for an output that was not recorded
whole (``capture_output`` off, or cut to ``max_payload_bytes``): never served as ``None``.
``replayed_failure(...)`` is the exception a stub raises for a recorded failure.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import functools
import logging
import typing
from collections.abc import Callable, Mapping

from agentplane_primitives.enums import Status
from agentplane_primitives.models import Envelope
from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError

from chronicle.errors import AbortCall, RecordedCallError, UnrecordedOutputError
from chronicle.recording import codecs
from chronicle.recording.codecs import BYTES_MARKER, class_path, find_class
from chronicle.recording.failure import RestoreError
from chronicle.wire import output_recorded, output_truncated, pointer_token, pointer_tokens

logger = logging.getLogger("chronicle")


class RecordedDict(dict[str, object]):
    """A recorded JSON object; ``d.key`` reads ``d["key"]``."""

    __slots__ = ()

    def __getattr__(self, name: str) -> object:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"the recorded object has no key {name!r} (keys: {', '.join(self) or 'none'})"
            ) from None


class RecordedList(list[object]):
    """A recorded JSON array whose items are restored the same way."""

    __slots__ = ()


_LEAVES = frozenset({str, int, float, bool, type(None)})
"""JSON leaves: given back as they are, with no call (most of a result's items are leaves)."""


def restore_plain(raw: object) -> object:
    """``raw`` with every dict and list made attribute-accessible (a new structure); any other
    object in it (a value rebuilt already) is kept as it is."""
    if isinstance(raw, dict):
        return RecordedDict(
            {key: v if type(v) in _LEAVES else restore_plain(v) for key, v in raw.items()}
        )
    if isinstance(raw, list):
        return RecordedList([v if type(v) in _LEAVES else restore_plain(v) for v in raw])
    return raw


def restore_binary(raw: JsonValue) -> object:
    """``restore_plain``, with ``{"$bytes": ...}`` markers turned back into ``bytes``.

    Only for an output the envelope flags as binary: the flag, not the shape, says a one-key
    dict is a marker.
    """
    if isinstance(raw, dict):
        if len(raw) == 1:
            data = _bytes(raw)
            if data is not None:
                return data
        return RecordedDict({key: restore_binary(value) for key, value in raw.items()})
    if isinstance(raw, list):
        return RecordedList(restore_binary(value) for value in raw)
    return raw


def _bytes(marker: dict[str, JsonValue]) -> bytes | None:
    text = marker.get(BYTES_MARKER)
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _plain(raw: JsonValue) -> object:
    """A fresh copy of ``raw`` with plain dicts and lists."""
    if isinstance(raw, dict):
        return {key: v if type(v) in _LEAVES else _plain(v) for key, v in raw.items()}
    if isinstance(raw, list):
        return [v if type(v) in _LEAVES else _plain(v) for v in raw]
    return raw


# ---- by what was recorded ---------------------------------------------------------------------


class _Node:
    """The described values at and below one place of the output (a tree of JSON Pointers)."""

    __slots__ = ("children", "description")

    def __init__(self) -> None:
        self.description: str | None = None
        self.children: dict[str, _Node] = {}


def restore_typed(
    raw: JsonValue, types: Mapping[str, str], what: str, annotation: object = None
) -> object:
    """``raw`` with each value ``types`` describes (``wire.OUTPUT_TYPES``) rebuilt by its codec.

    ``what`` names the call in warnings (``"call 2 of 'search'"``). Classes are looked up among
    those ``annotation`` names first (see ``codecs.find_class``). Dicts and lists outside any
    described value keep attribute access (``restore_plain``); inside one they are plain. Never
    raises: a value that cannot be rebuilt is its recorded JSON, and a warning says why.
    """
    root = _Node()
    for pointer, description in types.items():
        tokens = pointer_tokens(pointer)
        if tokens is None or not isinstance(description, str):
            continue  # not this format: nothing to rebuild there
        node = root
        for token in tokens:
            node = node.children.setdefault(token, _Node())
        node.description = description
    return _Decoder(_classes(annotation), what).decode(raw, root, "", outside=True)


class _Decoder:
    __slots__ = ("_known", "_what")

    def __init__(self, known: Mapping[str, type], what: str) -> None:
        self._known = known
        self._what = what

    def decode(self, raw: JsonValue, node: _Node, pointer: str, *, outside: bool) -> object:
        """``raw`` at ``pointer``, rebuilt as ``node`` says; ``outside``: no value around it is
        described (its plain dicts and lists then keep attribute access)."""
        inner = outside and node.description is None
        children = node.children
        value: object
        if isinstance(raw, dict):
            value = {
                key: (
                    self.decode(
                        item, children[key], f"{pointer}/{pointer_token(key)}", outside=inner
                    )
                    if key in children
                    else restore_plain(item)
                    if inner
                    else _plain(item)
                )
                for key, item in raw.items()
            }
        elif isinstance(raw, list):
            value = (
                [
                    (
                        self.decode(item, children[str(i)], f"{pointer}/{i}", outside=inner)
                        if str(i) in children
                        else restore_plain(item)
                        if inner
                        else _plain(item)
                    )
                    for i, item in enumerate(raw)
                ]
                if children
                else (restore_plain(raw) if inner else _plain(raw))
            )
        else:
            value = raw
        if node.description is None:
            if inner and isinstance(value, dict) and not isinstance(value, RecordedDict):
                return RecordedDict(value)
            if inner and isinstance(value, list) and not isinstance(value, RecordedList):
                return RecordedList(value)
            return value
        try:
            return codecs.decode(node.description, value, self._known)
        except Exception as exc:
            logger.warning(
                "cannot rebuild the %s recorded at %s of the output of %s (%s: %s); "
                "it is returned as recorded JSON",
                node.description,
                repr(pointer) if pointer else "the top",
                self._what,
                type(exc).__name__,
                exc,
            )
            return restore_plain(value) if outside else value


_CLASSES: dict[object, dict[str, type]] = {}
"""The classes each return annotation names, by ``module:QualName`` (bounded)."""


def _classes(annotation: object) -> dict[str, type]:
    """The classes ``annotation`` names, anywhere inside it, and those their fields name."""
    if annotation is None:
        return {}
    try:
        return _CLASSES[annotation]
    except KeyError:
        pass
    except TypeError:  # an unhashable annotation
        return _named_classes(annotation, {}, 0)
    found = _named_classes(annotation, {}, 0)
    if len(_CLASSES) >= 1024:
        _CLASSES.clear()
    _CLASSES[annotation] = found
    return found


def _named_classes(annotation: object, found: dict[str, type], depth: int) -> dict[str, type]:
    if depth > 8:
        return found
    if isinstance(annotation, type):
        path = class_path(annotation)
        if path in found or annotation.__module__ == "builtins":
            return found
        found[path] = annotation
        fields: list[object] = []
        try:
            if issubclass(annotation, BaseModel):
                fields = [field.annotation for field in annotation.model_fields.values()]
            elif dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation):
                fields = list(typing.get_type_hints(annotation).values())
        except Exception:  # a forward reference that does not resolve: its fields go unnamed
            fields = []
        for field in fields:
            _named_classes(field, found, depth + 1)
        return found
    if typing.get_origin(annotation) is typing.Literal:
        return found
    for arg in typing.get_args(annotation):
        _named_classes(arg, found, depth + 1)
    return found


# ---- through the return annotation ------------------------------------------------------------


def restore_value(
    raw: JsonValue,
    annotation: object,
    binary: bool,
    name: str,
    n: int,
    types: Mapping[str, str] | None = None,
) -> object:
    """A stubbed result of call ``n`` of ``name``: rebuilt by ``types`` (the envelope's
    ``wire.OUTPUT_TYPES``) when it describes any value, else validated as ``annotation`` when
    that names a type JSON does not keep, else ``restore_plain``'s (``restore_binary``'s) result.

    A recording that does not validate (the annotation changed since, or never held) gives the
    plain restored JSON and logs a warning naming the call.
    """
    what = f"call {n} of {name!r}"
    if types:
        return restore_typed(raw, types, what, annotation)
    value = restore_binary(raw) if binary else restore_plain(raw)
    if annotation is None or not _rebuilds(annotation):
        return value
    try:
        adapter = _adapter(annotation)
    except Exception:  # an annotation pydantic cannot validate: the recorded JSON is the value
        logger.debug("no validator for %s", _name(annotation), exc_info=True)
        return value
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        logger.warning(
            "the recorded result of %s does not validate as its return annotation %s "
            "(%s); it is returned as recorded JSON",
            what,
            _name(annotation),
            exc.errors()[0]["msg"] if exc.errors() else exc,
        )
    except Exception:  # a validator that fails other than by refusing the value
        logger.warning(
            "cannot rebuild %s through its return annotation %s; it is returned as recorded JSON",
            what,
            _name(annotation),
            exc_info=True,
        )
    return value


def restore_with(
    restore: Callable[[JsonValue], object],
    raw: JsonValue,
    types: Mapping[str, str] | None,
    binary: bool,
    name: str,
    n: int,
) -> object:
    """The stubbed result of call ``n`` of ``name``, whose boundary rebuilds results itself:
    a ``codecs.DecodedRestore`` gets the output with its described values decoded (as
    ``restore_value`` without an annotation gives it), any other ``restore`` the raw JSON."""
    if isinstance(restore, codecs.DecodedRestore):
        return restore.rebuild(restore_value(raw, None, binary, name, n, types))
    return restore(raw)


def refuse_unrecorded(envelope: Envelope, name: str, n: int, *, url: str | None) -> None:
    """Raise ``UnrecordedOutputError`` when the recorded call succeeded but its output was not
    recorded whole (``capture_output`` off, or cut to ``max_payload_bytes``). A failure is
    raised again from its recorded error, which needs no output."""
    if envelope.envelope_status.status is Status.FAILURE:
        return
    if not output_recorded(envelope):
        raise UnrecordedOutputError(name, n, "not recorded", url=url)
    if output_truncated(envelope):
        raise UnrecordedOutputError(name, n, "cut", url=url)


def _name(annotation: object) -> str:
    return getattr(annotation, "__qualname__", None) or repr(annotation)


@functools.lru_cache(maxsize=1024)
def _adapter(annotation: object) -> TypeAdapter[object]:
    return TypeAdapter(typing.cast(typing.Any, annotation))


_REBUILDS: dict[object, bool] = {}
"""Which annotations name a type JSON does not keep (a stub asks on every call)."""


def _rebuilds(annotation: object) -> bool:
    """Whether ``annotation`` names a type JSON does not keep (remembered when hashable)."""
    try:
        return _REBUILDS[annotation]
    except KeyError:
        found = _REBUILDS[annotation] = _names_rich_type(annotation)
        return found
    except TypeError:  # an unhashable annotation
        return _names_rich_type(annotation)


def _names_rich_type(annotation: object, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if isinstance(annotation, type):
        if issubclass(annotation, (BaseModel, enum.Enum, bytes, bytearray)):
            return True
        if dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation):
            return True
    if typing.get_origin(annotation) is typing.Literal:
        return False  # its arguments are values, not types
    return any(_names_rich_type(arg, depth + 1) for arg in typing.get_args(annotation))


# ---- recorded failures ------------------------------------------------------------------------


def replayed_failure(
    name: str,
    n: int,
    error_type: str,
    message: str,
    detail: Mapping[str, JsonValue],
    restore_error: RestoreError | None,
    *,
    url: str | None = None,
) -> BaseException:
    """The exception a stub raises for call ``n`` of ``name``, recorded as a failure.

    The boundary's own rebuild first (a wrapped client's SDK exception), then the recorded class
    when it can be imported and built from the recorded message, else ``RecordedCallError``
    naming the original type. A rebuilt exception has a ``RecordedCallError`` as its cause, so a
    traceback says it was replayed and how to run the call live instead. ``url`` is the control
    plane's page for the recorded trace, when it was read from one.
    """
    replayed = RecordedCallError(name, n, error_type, message, url=url)
    rebuilt: BaseException | None = None
    if restore_error is not None:
        try:
            rebuilt = restore_error(error_type, message, detail)
        except Exception:
            logger.debug("could not rebuild the recorded %s", error_type, exc_info=True)
    if rebuilt is None and error_type != "AbortCall":
        path = detail.get("class")
        rebuilt = _by_class(path, message) if isinstance(path, str) else None
    if rebuilt is None:
        return replayed
    rebuilt.__cause__ = replayed
    return rebuilt


def _by_class(path: str, message: str) -> BaseException | None:
    """An instance of the class at ``"module:QualName"`` built from ``message``, if possible
    (found as ``codecs.find_class`` finds a class: never in a package not imported already)."""
    found = find_class(path, {})
    if found is None or not issubclass(found, Exception) or issubclass(found, AbortCall):
        return None
    try:
        return found(message)
    except Exception:  # a constructor that needs more than a message
        return None
