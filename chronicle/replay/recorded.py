"""Recorded JSON given back to code that expects objects, and recorded failures raised again.

``restore_plain(raw)`` turns a stubbed ``output.raw`` into ``RecordedDict``/``RecordedList``
(subclasses of ``dict`` and ``list``, so equality, indexing, ``json.dumps`` and ``isinstance``
checks for dict and list keep working) whose keys can also be read as attributes:
``resp.body.rows[0]``. ``restore_binary`` also turns ``{"$bytes": ...}`` markers into bytes.

``restore_value(raw, annotation, binary)`` goes through the boundary's return annotation when it
names a type JSON does not keep (a pydantic model, a dataclass, a ``TypedDict``, an enum,
``bytes``, anywhere inside it: ``list[Item]``, ``Item | None``): the recorded JSON is validated
as that type with pydantic. Other annotations (``dict``, ``list[str]``, ``Any``) and none at all
give ``restore_plain``'s result.

``replayed_failure(...)`` is the exception a stub raises for a recorded failure.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import functools
import importlib
import logging
import sys
import typing
from collections.abc import Mapping

from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError

from chronicle.errors import AbortCall, RecordedCallError
from chronicle.recording.call import RestoreError
from chronicle.recording.capture import BYTES_MARKER

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


def restore_plain(raw: JsonValue) -> object:
    """``raw`` with every dict and list made attribute-accessible (a new structure)."""
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


# ---- through the return annotation ------------------------------------------------------------


def restore_value(raw: JsonValue, annotation: object, binary: bool, name: str, n: int) -> object:
    """A stubbed result of call ``n`` of ``name``: validated as ``annotation`` when that names a
    type JSON does not keep, else ``restore_plain``'s (``restore_binary``'s) result.

    A recording that does not validate (the annotation changed since, or never held) gives the
    plain restored JSON and logs a warning naming the call.
    """
    value = restore_binary(raw) if binary else restore_plain(raw)
    if annotation is None or not _rebuilds(annotation):
        return value
    what = f"call {n} of {name!r}"
    try:
        return _adapter(annotation).validate_python(value)
    except ValidationError as exc:
        logger.warning(
            "chronicle: the recorded result of %s does not validate as its return annotation %s "
            "(%s); it is returned as recorded JSON",
            what,
            _name(annotation),
            exc.errors()[0]["msg"] if exc.errors() else exc,
        )
    except Exception:  # an annotation pydantic cannot build a validator for
        logger.warning(
            "chronicle: cannot rebuild %s through its return annotation %s; it is returned as "
            "recorded JSON",
            what,
            _name(annotation),
            exc_info=True,
        )
    return value


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
            logger.debug("chronicle: could not rebuild the recorded %s", error_type, exc_info=True)
    if rebuilt is None and error_type != "AbortCall":
        path = detail.get("class")
        rebuilt = _by_class(path, message) if isinstance(path, str) else None
    if rebuilt is None:
        return replayed
    rebuilt.__cause__ = replayed
    return rebuilt


def _by_class(path: str, message: str) -> BaseException | None:
    """An instance of the class at ``"module:QualName"`` built from ``message``, if possible."""
    module_name, _, qualname = path.partition(":")
    try:
        found: object = sys.modules.get(module_name) or importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)  # a class defined in a function (<locals>) fails here
    except Exception:
        return None
    if not (isinstance(found, type) and issubclass(found, Exception)) or issubclass(
        found, AbortCall
    ):
        return None
    try:
        return found(message)
    except Exception:  # a constructor that needs more than a message
        return None
