"""Codecs: how a value JSON does not keep is recorded, and how a replay gives it back.

The capture (``recording/capture.py``) turns every value into plain JSON: a ``datetime`` becomes
its ISO text, a dataclass a dict of its fields, a tuple a list. For an output it also notes, for
each such value, the codec that encoded it; the envelope keeps those notes in its metadata under
``wire.OUTPUT_TYPES`` (a JSON Pointer into ``output.raw`` to a description), and a replay's stub
decodes each value back by them, whatever the function's annotation says. ``output.raw`` itself
stays plain JSON, and a plain JSON output records nothing and pays nothing.

A description is the codec's name, and for a codec that rebuilds a class (an enum, a model, a
dataclass, a named tuple) a space and the class as ``module:QualName``:

======================  ==========================================  ===========================
codec                   recorded as                                 rebuilt with
======================  ==========================================  ===========================
``datetime``, ``date``  ISO 8601 text (``isoformat()``)             ``fromisoformat``
``time``
``uuid``, ``decimal``   ``str(value)``                              ``UUID(text)``,
                                                                    ``Decimal(text)``
``bytes``               ``{"$bytes": "<standard base64>"}``         ``base64`` decoding
``bytearray``
``tuple``, ``set``      a list                                      ``tuple(items)``, ...
``frozenset``
``namedtuple C``        a list                                      ``C._make(items)``
``enum C``              the JSON form of the member's value         ``C(value)``
``pydantic C``          ``model_dump(mode="json")``                 ``C.model_validate``
``dataclass C``         a dict of its fields                        ``C(**init fields)``, the
                                                                    other fields set after
======================  ==========================================  ===========================

A ``TypedDict`` is a dict at run time, so it needs no codec: its values are described one by
one. Integrations register codecs of their own (``register``), each beside the integration it
belongs to: LangChain's messages (``chronicle/integrations/langchain.py``) are one. Such a codec
*claims* the types it knows before the built-in rules look at them, gives the value the capture
walks in their place, and rebuilds it.

A class is found by its recorded path among the classes the function's return annotation names
(so a class defined inside a function works when the annotation names it), else in its module
when that is loaded already (the code under test imported it). A replay never imports: a
recording names ``unittest.__main__`` or any module with side effects in vain, and the value
comes back as its recorded JSON with a warning saying which class was not rebuilt and why.
Nothing is called on a class found but ``model_validate``, its constructor, ``_make`` or the enum
lookup, and only after checking it is the kind of class its codec expects. An object no codec
knows is stored as its ``repr`` and flagged lossy, as before: a replay refuses it.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import sys
import types
from collections.abc import Callable, Mapping
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from pydantic import BaseModel, JsonValue

BYTES_MARKER = "$bytes"
"""The key of ``{"$bytes": "<standard base64>"}``, the JSON form of bytes (flagged ``binary``)."""

DATETIME = "datetime"
DATE = "date"
TIME = "time"
UUID_TEXT = "uuid"
DECIMAL = "decimal"
BYTES = "bytes"
BYTEARRAY = "bytearray"
TUPLE = "tuple"
NAMEDTUPLE = "namedtuple"
SET = "set"
FROZENSET = "frozenset"
ENUM = "enum"
PYDANTIC = "pydantic"
DATACLASS = "dataclass"


class Codec:
    """One way of recording values JSON does not keep, and of rebuilding them.

    ``name`` is what descriptions call it (lowercase, dotted for an integration's:
    ``"langchain.message"``). ``needs_class``: its descriptions carry the value's class, which
    ``decode`` then receives (checked with ``accepts`` first).

    The built-in codecs are applied by the capture's walk itself, which knows how to encode
    their types within its budget; a codec an integration registers says which types it takes
    (``claims``) and what the walk records in their place (``encode``).
    """

    name: str = ""
    needs_class: bool = False

    def claims(self, cls: type) -> bool:
        """Whether this codec encodes values of exactly the type ``cls`` (asked once per type,
        before the built-in rules). Must not import an optional package the type does not
        come from."""
        return False

    def encode(self, value: object) -> object:
        """What the capture walks in place of ``value``: JSON, or values the walk knows (it
        applies the redaction and the limits to it, and describes what it meets inside)."""
        raise NotImplementedError(f"the {self.name} codec is applied by the capture itself")

    def accepts(self, cls: type) -> bool:
        """Whether ``cls``, found for a recorded class path, is a class this codec rebuilds."""
        return True

    def decode(self, value: object, cls: type | None) -> object:
        """The value rebuilt from its recorded JSON form, whose own described values are
        rebuilt already (its dicts and lists are fresh plain ones). Raises when it cannot."""
        raise NotImplementedError


class _Made(Codec):
    """A built-in codec whose JSON form is one JSON type, from which ``make`` builds the value."""

    def __init__(self, name: str, form: type, make: Callable[[Any], object]) -> None:
        self.name = name
        self._form = form
        self._make = make

    def decode(self, value: object, cls: type | None) -> object:
        if not isinstance(value, self._form):
            raise TypeError(f"expected a {self._form.__name__}, found {type(value).__name__}")
        return self._make(value)


def _unmarked(marker: dict[str, object]) -> bytes:
    """The bytes of a ``{"$bytes": "<base64>"}`` marker."""
    text = marker.get(BYTES_MARKER)
    if len(marker) != 1 or not isinstance(text, str):
        raise TypeError('expected a {"$bytes": "<base64>"} marker')
    return base64.b64decode(text, validate=True)


class _NamedTuple(Codec):
    name = NAMEDTUPLE
    needs_class = True

    def accepts(self, cls: type) -> bool:
        return issubclass(cls, tuple) and callable(getattr(cls, "_make", None))

    def decode(self, value: object, cls: type | None) -> object:
        if not isinstance(value, list):
            raise TypeError(f"expected a list, found {type(value).__name__}")
        return cls._make(value)  # type: ignore[union-attr]  # accepts() checked it


class _Enum(Codec):
    name = ENUM
    needs_class = True

    def accepts(self, cls: type) -> bool:
        return issubclass(cls, Enum)

    def decode(self, value: object, cls: type | None) -> object:
        assert cls is not None
        try:
            return cls(value)
        except ValueError:
            if not isinstance(value, list):
                raise
            return cls(_as_tuple(value))  # a member whose value is a tuple was recorded as a list


def _as_tuple(value: object) -> object:
    return tuple(_as_tuple(item) for item in value) if isinstance(value, list) else value


class _Pydantic(Codec):
    name = PYDANTIC
    needs_class = True

    def accepts(self, cls: type) -> bool:
        return issubclass(cls, BaseModel)

    def decode(self, value: object, cls: type | None) -> object:
        model: type[BaseModel] = cls  # type: ignore[assignment]  # accepts() checked it
        return model.model_validate(value)


class _Dataclass(Codec):
    name = DATACLASS
    needs_class = True

    def accepts(self, cls: type) -> bool:
        return dataclasses.is_dataclass(cls)

    def decode(self, value: object, cls: type | None) -> object:
        if not isinstance(value, dict):
            raise TypeError(f"expected a dict of fields, found {type(value).__name__}")
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # accepts() checked it
        given = {f.name: value[f.name] for f in fields if f.init and f.name in value}
        instance: Any = cls(**given)  # type: ignore[misc]  # accepts() checked it
        for field in fields:
            if not field.init and field.name in value:
                # What ``__post_init__`` computed live was recorded: that is what it held.
                object.__setattr__(instance, field.name, value[field.name])
        return instance


_CODECS: dict[str, Codec] = {}
_CLAIMING: list[Codec] = []
"""The registered codecs that claim types (an integration's), in registration order."""
_CLAIMED: dict[type, Codec | None] = {}
"""Which codec claims a type, once asked (bounded; cleared when a codec is registered)."""
_DESCRIPTIONS: dict[tuple[str, type], str] = {}
_CACHE_LIMIT = 4096


def register(codec: Codec) -> None:
    """Add ``codec`` to the registry (replacing one of the same name).

    An integration registers its codecs when its module is imported, which imports nothing of
    the optional package the codec serves: ``claims`` is asked lazily, per type met.
    """
    if not codec.name or codec.name != codec.name.lower() or " " in codec.name:
        raise ValueError(f"a codec's name is lowercase with no spaces, got {codec.name!r}")
    previous = _CODECS.get(codec.name)
    _CODECS[codec.name] = codec
    if previous in _CLAIMING:
        _CLAIMING.remove(previous)
    if type(codec).claims is not Codec.claims:
        _CLAIMING.append(codec)
    _CLAIMED.clear()


def codec_named(name: str) -> Codec | None:
    """The registered codec called ``name``."""
    return _CODECS.get(name)


def claimed_by(cls: type) -> Codec | None:
    """The registered codec that claims values of type ``cls`` (remembered per type)."""
    try:
        return _CLAIMED[cls]
    except KeyError:
        pass
    found = None
    for codec in _CLAIMING:
        try:
            if codec.claims(cls):
                found = codec
                break
        except Exception:  # a codec must not break the capture: it just does not claim it
            continue
    if len(_CLAIMED) >= _CACHE_LIMIT:
        _CLAIMED.clear()
    _CLAIMED[cls] = found
    return found


def describe(name: str, cls: type | None = None) -> str:
    """A description (``wire.OUTPUT_TYPES``): ``name``, or ``name module:QualName`` of ``cls``."""
    if cls is None:
        return name
    key = (name, cls)
    found = _DESCRIPTIONS.get(key)
    if found is None:
        if len(_DESCRIPTIONS) >= _CACHE_LIMIT:
            _DESCRIPTIONS.clear()
        found = _DESCRIPTIONS[key] = f"{name} {class_path(cls)}"
    return found


def class_path(cls: type) -> str:
    """``module:QualName`` of ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def find_class(path: str, known: Mapping[str, type]) -> type | None:
    """The class at ``module:QualName``: among ``known`` (by path), else in its module when that
    is loaded already (in ``sys.modules``: the code under test imported it). ``None`` when not
    found or not a class (one defined in a function cannot be found in its module).

    Never imports anything, and runs no code of the module or its classes to look: the names
    are read from their ``__dict__`` (a module's ``__getattr__``, which may import a submodule
    on demand, and a lazily loaded module are not asked). A recording is data: the name it
    carries picks among classes already loaded, never code to load.
    """
    cls = known.get(path)
    if cls is not None:
        return cls
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        return None
    module = sys.modules.get(module_name)
    if not isinstance(module, types.ModuleType):
        return None  # not loaded: a replay never imports a module a recording names
    found: object = module
    for part in qualname.split("."):
        try:
            namespace = object.__getattribute__(found, "__dict__")
        except AttributeError:
            return None
        found = namespace.get(part) if isinstance(namespace, Mapping) else None
        if found is None:
            return None
    return found if isinstance(found, type) else None


def decode(description: str, value: object, known: Mapping[str, type]) -> object:
    """``value`` (a recorded JSON form, its described values rebuilt) rebuilt as ``description``
    says. Raises ``LookupError`` naming what is missing (a codec, a class), or the codec's own
    error when the value does not fit."""
    name, _, path = description.partition(" ")
    codec = _CODECS.get(name)
    if codec is None:
        raise LookupError(
            f"no codec {name!r} is registered here (recorded by a newer Chronicle, or by an "
            "integration whose package is not installed)"
        )
    cls: type | None = None
    if codec.needs_class:
        cls = find_class(path, known)
        if cls is None:
            raise LookupError(
                f"the class {path} cannot be found (defined inside a function, renamed, or in a "
                "module the code under test has not imported: a replay never imports a module a "
                "recording names); name it in the function's return annotation"
            )
        if not codec.accepts(cls):
            raise LookupError(f"{path} is not a class the {name} codec rebuilds")
    return codec.decode(value, cls)


class DecodedRestore:
    """A ``BoundarySpec(restore=...)`` that rebuilds the recorded output with its described
    values decoded first (``rebuild`` gets dicts and lists, with attribute access, holding the
    rebuilt values), where a plain ``restore`` gets ``output.raw`` as it is.

    Its calls record the encodings of their outputs (``wire.OUTPUT_TYPES``), as a ``@boundary``
    without ``restore`` does; a plain ``restore`` (a wrapped model client's, which rebuilds the
    SDK's own types) records none. Called with ``output.raw`` alone, it rebuilds from the JSON.
    """

    __slots__ = ("rebuild",)

    def __init__(self, rebuild: Callable[[object], object]) -> None:
        self.rebuild = rebuild

    def __call__(self, raw: JsonValue) -> object:
        """The output rebuilt from ``output.raw`` as recorded, nothing decoded first."""
        return self.rebuild(raw)


def records_types(restore: object) -> bool:
    """Whether a call whose spec has this ``restore`` records its output's encodings."""
    return restore is None or isinstance(restore, DecodedRestore)


for _codec in (
    _Made(DATETIME, str, datetime.datetime.fromisoformat),
    _Made(DATE, str, datetime.date.fromisoformat),
    _Made(TIME, str, datetime.time.fromisoformat),
    _Made(UUID_TEXT, str, UUID),
    _Made(DECIMAL, str, Decimal),
    _Made(BYTES, dict, _unmarked),
    _Made(BYTEARRAY, dict, lambda marker: bytearray(_unmarked(marker))),
    _Made(TUPLE, list, tuple),
    _Made(SET, list, set),
    _Made(FROZENSET, list, frozenset),
    _NamedTuple(),
    _Enum(),
    _Pydantic(),
    _Dataclass(),
):
    register(_codec)
