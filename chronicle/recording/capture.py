"""Capture: a boundary call's live values, turned into the JSON that gets recorded.

Every boundary call runs this module, so it is built for the hot path: a walk that checks exact
types before anything slower. Which arguments a call passed, by name, is
``recording/arguments.py``'s job (``ArgumentBinder``); this module turns them into JSON.

JSON form
---------
``json_form(value)`` returns a ``JsonForm``: the JSON value plus its flags. ``lossy`` means
information was lost (something was stored as its ``repr`` or a marker); the Python *type* being
lost (a tuple becoming a list) is not counted. ``truncated`` means a string was cut. ``binary``
means bytes were stored as ``{"$bytes": ...}`` markers, which a replay turns back into bytes.
``json_form(value, types=True)`` (an output's) also describes how each value JSON does not keep
was encoded (``JsonForm.types``, a JSON Pointer to a codec's description, ``recording/codecs.py``),
so a replay can give it back as its own type; the table's last column names the codec.

=================================  ===============================================  =============
Value                              JSON form                                        codec
=================================  ===============================================  =============
a type a registered codec claims   what the codec's ``encode`` gives, walked        its own
str, int, bool, None, finite       unchanged (subclasses become the plain type)
float
float NaN / inf / -inf             ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``
list (and subclasses)              list
tuple                              list                                             ``tuple``
named tuple                        list                                             ``namedtuple``
dict, other ``Mapping``            dict; keys that are not str become ``str(key)``
                                   (an Enum key uses its value); lossy only if two
                                   keys then collide, and the later one wins
set, frozenset                     list, sorted when the items sort, else           ``set``,
                                   iteration order                                  ``frozenset``
pydantic model                     ``model_dump(mode="json")``, then walked like    ``pydantic``
                                   the rest (if that raises: ``model_dump()``)
dataclass instance                 dict of its fields, each walked                  ``dataclass``
datetime, date, time               ISO 8601 text (``isoformat()``)                  ``datetime``,
                                                                                    ``date``, ...
UUID, Decimal                      ``str(value)``                                   ``uuid``,
                                                                                    ``decimal``
Enum member                        the JSON form of its ``.value``                  ``enum``
bytes, bytearray                   ``{"$bytes": "<standard base64>"}``, ``binary``  ``bytes``,
                                   (longer than ``max_string_bytes``: cut, lossy)   ``bytearray``
anything else                      ``{"$repr": "<bounded repr>"}``, lossy
a container inside itself          ``{"$repr": "<cycle>"}``, lossy
a container nested 64 deep         ``{"$repr": "<bounded repr>"}``, lossy
a value whose conversion raises    ``{"$repr": "<bounded repr>"}``, lossy
a ``repr`` that raises             ``{"$repr": "<unrepresentable TypeName>"}``
=================================  ===============================================  =============

A bounded repr is at most 1,000 characters, however large the object: containers show
their first items only. A dict whose own key is ``"$repr"`` or ``"$bytes"`` is stored as is; the
``lossy`` and ``binary`` flags are what tell a marker from user data.

With ``max_string_bytes`` set, every string value longer than that many UTF-8 bytes keeps its
first ``max_string_bytes`` bytes (cut on a character boundary) followed by the suffix
``…[truncated N bytes]``, N being the number of bytes removed, and ``truncated`` is set. Dict keys
are never cut (cutting them could make two keys collide).

Copy, not alias
---------------
The result never shares a list or dict with the caller. The envelope is serialized later, on the
delivery thread, and agents routinely mutate their inputs right after a call (``messages.append``
of the reply is the classic case), so an aliased payload would record the *next* state. The walk
has to visit every item anyway (to find NaN, long strings, non-JSON types); rebuilding each
container during that visit costs about half again a check-only walk, and one
``copy.deepcopy`` after a check would cost more than both (docs/benchmarks.md, "Figures behind
the code's choices"). So every container is rebuilt. Strings and numbers are immutable and are
shared. Long flat lists of plain numbers or strings are copied at C speed after one C-speed type
scan.

A boundary call that needs no JSON at the call (no hooks, no other exporter, only the default
redaction) does not walk there: ``recording/snapshot.py`` freezes the value exactly in C, and
this walk runs on its thawed copy when the envelope is built (``wire.CallRecord.settle``).

Dict keys repeat endlessly ("role", "content", "prompt_tokens"): a key the default redaction gave
back unchanged once is remembered (``_KNOWN_KEYS``) and not scanned again, nor checked as a
credential name. That halves the walk of a chat request.

Types, only where they are met
------------------------------
A plain JSON value pays nothing for ``types=True``: exact dicts, lists, strings and numbers take
the same path as before. Where a value JSON does not keep is met, the walk leaves its JSON form
wrapped in a ``_Typed`` (the JSON form and its description) in the output; only when the walk met
any does ``json_form`` take one more pass over the result, which unwraps them and notes each
one's JSON Pointer, stopping as soon as it has found them all.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import logging
import math
import reprlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from enum import Enum
from json.encoder import c_encode_basestring, c_make_encoder  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any, NamedTuple, cast
from uuid import UUID

from pydantic import BaseModel, JsonValue

from chronicle.recording import codecs
from chronicle.recording.codecs import BYTES_MARKER, claimed_by, describe
from chronicle.redaction import (
    CREDENTIAL,
    SHORTEST_SECRET,
    Redaction,
    is_credential_key,
    is_credential_value,
    may_name_credential,
)
from chronicle.wire import pointer_token, valid_text

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


logger = logging.getLogger("chronicle")

__all__ = ["BYTES_MARKER", "JsonForm", "dumps", "json_arguments", "json_form"]

MAX_DEPTH = 64
"""Containers nested this deep (the top value is depth 0) are stored as a bounded repr."""

_NO_LIMIT = sys.maxsize
_MAX_CLAIMS = 1000
"""A codec's ``encode`` may give a value another codec claims, which adds no depth: past this
many in a chain the walk stops (Python's recursion limit stops it sooner; the compiled module's
calls do not count toward that limit)."""
_FLAT_LIST = 32
"""Lists longer than this try the C-speed copy first; shorter ones are cheaper to just walk."""

# ---------------------------------------------------------------------------------------------
# JSON form


class JsonForm(NamedTuple):
    """A value's recorded JSON form and what it cost to get there.

    A ``NamedTuple`` rather than a frozen dataclass: just as immutable, no per-instance dict, and
    half the construction cost (two are built per boundary call; docs/benchmarks.md).
    """

    value: JsonValue
    """The JSON value; shares no list or dict with the original."""
    lossy: bool = False
    """Some part was stored as a ``{"$repr": ...}`` marker, or text was not valid Unicode."""
    truncated: bool = False
    """Some string or container was cut to the limits; each cut says so where it happened."""
    binary: bool = False
    """Some bytes were stored as ``{"$bytes": "<base64>"}``."""
    masked: bool = False
    """The redaction changed some string (a secret masked, a credential-named value replaced)."""
    types: dict[str, str] | None = None
    """With ``types=True``: how each value JSON does not keep was encoded, by JSON Pointer into
    ``value`` (``wire.OUTPUT_TYPES``); ``None`` when there was none (or it was not asked)."""


_new_form = cast("Callable[[type[JsonForm], tuple[object, ...]], JsonForm]", tuple.__new__)
"""Builds a ``JsonForm`` from its six fields in order, at C speed (``_Walker.form``)."""


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` with finite limits, and a marker when an object's own ``repr`` raises."""

    def __init__(self) -> None:
        super().__init__()
        # Set one by one: keyword arguments to ``Repr`` exist only from Python 3.12. The limits
        # multiply with nesting (8 items of 8 items of ...), so they stay small.
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdeque = 8
        self.maxdict = self.maxset = self.maxfrozenset = 8
        self.maxstring = 100
        self.maxlong = 40
        self.maxother = 100

    def repr_instance(self, x: object, level: int) -> str:
        try:
            text = repr(x)
        except Exception:
            return _unrepresentable(x)
        # A top-level object (``level`` not yet decreased) gets room to say what it is.
        return _shorten(text, _REPR_LIMIT if level == self.maxlevel else self.maxother)


_REPR_LIMIT = 1000
_REPR = _BoundedRepr()


def _shorten(text: str, limit: int) -> str:
    """``text`` if it fits, else its two ends around ``...`` (the type leads, a bracket trails)."""
    if len(text) <= limit:
        return text
    head = (limit - 3) // 2
    return text[:head] + "..." + text[len(text) - (limit - 3 - head) :]


def _unrepresentable(value: object) -> str:
    return f"<unrepresentable {type(value).__qualname__}>"


def _bounded_repr(value: object) -> str:
    """At most ``_REPR_LIMIT`` characters, whatever ``value`` is; never raises."""
    try:
        return valid_text(_shorten(_REPR.repr(value), _REPR_LIMIT))
    except Exception:  # e.g. a user class named ``list`` that reprlib mistakes for the builtin
        return _unrepresentable(value)


def _marker(value: object) -> dict[str, JsonValue]:
    return {"$repr": _bounded_repr(value)}


_CYCLE: str = "<cycle>"


def _non_finite(number: float) -> str:
    if number != number:  # NaN is the only float not equal to itself
        return "NaN"
    return "Infinity" if number > 0 else "-Infinity"


# ---- bounds ----------------------------------------------------------------------------------

MAX_INT_DIGITS = 4000
"""Longer integers are stored as a marker: the control plane (like Python's own int-to-text
conversion, limited to 4300 digits) refuses them."""

_SAFE_INT = 2**53
"""Integers within this need no digit count (their JSON text is at most 16 characters)."""
_REDACT_MARGIN = 16 * 1024
"""How far past the cut a long string is still redacted, so a secret that straddles the cut is
masked whole (the longest shape, a PEM private key block, is about 3 KiB)."""
_CUT_SUFFIX = len("…[truncated 1000000 bytes]")
_ITEM_COST = 2
"""Budget charged per list item beyond its own text: the separator and the shortest value."""
_NUMBER_COST = 24
"""Budget charged per float: the longest ``repr`` of a finite double."""


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _digits(bits: int) -> int:
    """The decimal digits of an int of ``bits`` bits, give or take one.

    No text conversion: the int may be beyond what Python converts to text.
    """
    return bits * 30103 // 100000 + 1


_FLAT_NUMBERS = frozenset({int, float, bool})
_FLAT_INTS = frozenset({int, bool})


class _Walker:
    """One conversion: the walk, its flags, its budget, and the containers on the current path.

    Every string is redacted first, then made valid Unicode, then cut to the string limit and to
    what is left of the budget, in that order: a secret is masked before any cut could leave part
    of it. The budget counts (about) the UTF-8 bytes of JSON produced so far; a container that
    would go over it keeps what fits and ends with a note of how much was left out.
    """

    __slots__ = (
        "_active",
        "_budget",
        "_claims",
        "_credentials",
        "_known_keys",
        "_limit",
        "_redact",
        "_types",
        "binary",
        "lossy",
        "masked",
        "truncated",
        "typed",
    )

    def __init__(
        self,
        max_string_bytes: int | None,
        max_total_bytes: int | None = None,
        redaction: Redaction | None = None,
        types: bool = False,
    ) -> None:
        self.lossy = False
        self.truncated = False
        self.binary = False
        self.masked = False
        self._types = types
        self.typed = 0
        """How many ``_Typed`` wrappers the walk left in its result."""
        self._limit = _NO_LIMIT if max_string_bytes is None else max(max_string_bytes, 0)
        self._budget = _NO_LIMIT if max_total_bytes is None else max(max_total_bytes, 0)
        self._redact: Callable[[str], str] | None = None
        self._credentials = False
        self._active: set[int] = set()
        self._claims = 0
        """How many codecs' ``encode`` results are being walked, one inside the other."""
        # Keys ``text`` gave back unchanged before come back unchanged again when it redacts
        # with the defaults (or not at all) and cuts nothing that short: looked up instead.
        self._known_keys = self._limit >= _KEY_ROOM
        if redaction is not None and redaction.redactors:
            self._redact = redaction.text
            self._credentials = redaction.masks_credentials
            self._known_keys = self._known_keys and redaction.defaults_only

    def form(self, value: JsonValue, types: dict[str, str] | None = None) -> JsonForm:
        """``value`` (this walk's result) with the walk's flags, as a ``JsonForm``."""
        # Through ``tuple.__new__``: the NamedTuple's own ``__new__`` is a Python function, and
        # two forms are built per boundary call (docs/benchmarks.md, "Issue 31").
        return _new_form(
            JsonForm, (value, self.lossy, self.truncated, self.binary, self.masked, types)
        )

    # The checks below use ``type(x) is T`` rather than ``isinstance``: exact types are the
    # common case, the check is cheaper, and subclasses (which may override anything) are sent
    # to ``_other`` where every step is guarded.

    def walk(self, value: object, depth: int) -> JsonValue:
        if type(value) is str:
            return self.text(value)
        if type(value) is int:
            return value if -_SAFE_INT < value < _SAFE_INT else self._int(value)
        if type(value) is bool or value is None:
            return value
        if type(value) is float:
            self._budget -= _NUMBER_COST
            return value if math.isfinite(value) else _non_finite(value)
        if type(value) is dict:
            return self._dict(value, id(value), depth)
        if type(value) is list:
            return self._list(value, id(value), depth)
        if type(value) is tuple:
            items = self._list(value, id(value), depth)
            return self._typed(items, codecs.TUPLE) if self._types else items
        return self._other(value, depth)

    def _typed(self, value: JsonValue, codec: str, cls: type | None = None) -> JsonValue:
        """``value``, the JSON form of a value ``codec`` encoded, wrapped with its description
        when this walk describes types. Outer wins: a wrapper directly inside is dropped."""
        if not self._types:
            return value
        if type(value) is _Typed:
            self.typed -= 1
            value = value.value
        self.typed += 1
        return _Typed(codec if cls is None else describe(codec, cls), value)

    def text(self, text: str) -> str:
        """One string, redacted, valid, and within the string limit and the budget."""
        budget = self._budget
        limit = self._limit if self._limit <= budget else max(budget, 0)
        beyond = 0  # bytes of a very long string past the part that was redacted
        redact = self._redact
        if redact is not None:
            if len(text) > limit + _REDACT_MARGIN:
                head = text[: limit + _REDACT_MARGIN]
                beyond = _utf8_size(text[len(head) :])
                text = redact(head)
                if text is not head:
                    self.masked = True
            else:
                redacted = redact(text)
                if redacted is not text:
                    self.masked = True
                    text = redacted
        if text.isascii():
            size = len(text)
        else:
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError:
                text = valid_text(text)
                self.lossy = True
                size = len(text.encode("utf-8"))
        if size + beyond <= limit:
            self._budget = budget - size - 2
            return text
        self._budget = budget - limit - _CUT_SUFFIX
        return self._cut(text, size + beyond, limit)

    def _cut(self, text: str, total: int, limit: int) -> str:
        """``text`` (valid, ``total`` bytes with what lies beyond it) cut to ``limit`` bytes."""
        self.truncated = True
        if text.isascii():
            kept = text[:limit]
            cut = len(kept)
        else:
            encoded = text.encode("utf-8")
            cut = min(limit, len(encoded))
            while 0 < cut < len(encoded) and (encoded[cut] & 0xC0) == 0x80:
                cut -= 1  # never split a multi-byte character
            kept = encoded[:cut].decode("utf-8")
        return f"{kept}…[truncated {total - cut} bytes]"

    def _int(self, value: int) -> JsonValue:
        digits = _digits(value.bit_length())
        if digits > MAX_INT_DIGITS:
            self.lossy = True
            return {"$repr": f"<int of about {digits} digits>"}
        self._budget -= digits + 1
        return value

    def _enter(self, ident: int, value: object, depth: int) -> JsonValue | None:
        """A marker if the container must not be walked (cycle or too deep), else ``None``."""
        if ident in self._active:
            self.lossy = True
            return {"$repr": _CYCLE}
        if depth >= MAX_DEPTH:
            self.lossy = True
            return _marker(value)
        return None

    def _fitting(self, count: int) -> int:
        """How many of ``count`` list items fit the budget at the least each can cost; charges."""
        budget = self._budget
        keep = count if count * _ITEM_COST <= budget else max(budget // _ITEM_COST, 0)
        self._budget = budget - keep * _ITEM_COST
        return keep

    def _list(self, items: list[object] | tuple[object, ...], ident: int, depth: int) -> JsonValue:
        stop = self._enter(ident, items, depth)
        if stop is not None:
            return stop
        count = len(items)
        if count > _FLAT_LIST:
            flat = self._flat_copy(items)
            if flat is not None:
                return flat
        keep = self._fitting(count)
        active = self._active
        active.add(ident)
        try:
            text = self.text
            walk = self.walk
            inner = depth + 1
            out: list[JsonValue] = []
            append = out.append
            for item in items if keep == count else items[:keep]:
                # Inlined for the common leaf types: a call per item is most of the cost.
                if type(item) is str:
                    append(text(item))
                    if self._budget <= 0:
                        break
                elif (
                    (type(item) is int and -_SAFE_INT < item < _SAFE_INT)
                    or type(item) is bool
                    or item is None
                ):
                    append(item)
                else:
                    append(walk(item, inner))
                    if self._budget <= 0:
                        break
            if len(out) < count:
                self.truncated = True
                out.append(f"…[truncated {count - len(out)} items]")
            return out
        finally:
            active.discard(ident)

    def _flat_copy(self, items: list[object] | tuple[object, ...]) -> list[JsonValue] | None:
        """A C-speed copy of a long list of plain leaves, or ``None`` if it needs the full walk.

        A list of numbers longer than the budget allows is cut here too (at the cost of its
        longest number). The casts below are backed by the ``kinds`` check just before each; they
        are to ``Sequence``, as ``items`` may be a tuple (the compiled module checks a list).
        """
        kinds = set(map(type, items))
        if kinds <= _FLAT_INTS:
            digits = _digits(max(map(int.bit_length, cast("Sequence[int]", items))))
            if digits > MAX_INT_DIGITS:
                return None
            return self._numbers(items, digits + 2)  # a sign and a separator
        if kinds == {str} and self._redact is None:
            strings = cast("Sequence[str]", items)
            if not all(map(str.isascii, strings)) or max(map(len, strings)) > self._limit:
                return None
            cost = sum(map(len, strings)) + 3 * len(items)
            if cost > self._budget:
                return None
            self._budget -= cost
            return cast("list[JsonValue]", list(items))
        if float in kinds and kinds <= _FLAT_NUMBERS:
            try:
                finite = all(map(math.isfinite, cast("Sequence[float]", items)))
            except OverflowError:  # an int too large for a float: the full walk handles it
                return None
            if finite:
                return self._numbers(items, _NUMBER_COST)
        return None

    def _numbers(self, items: list[object] | tuple[object, ...], each: int) -> list[JsonValue]:
        """Numbers known to be plain JSON, copied; cut when ``each`` per item goes over budget."""
        count = len(items)
        keep = count if count * each <= self._budget else max(self._budget // each, 0)
        self._budget -= keep * each
        if keep == count:
            return cast("list[JsonValue]", list(items))
        out = cast("list[JsonValue]", list(items[:keep]))
        self.truncated = True
        out.append(f"…[truncated {count - keep} items]")
        return out

    def _dict(
        self,
        items: Mapping[Any, object],
        ident: int,
        depth: int,
        out: dict[str, JsonValue] | None = None,
    ) -> JsonValue:
        """A dict's JSON form. Given ``out`` (as ``arguments`` does), it is filled in
        place and each value is converted on its own: one that raises becomes a marker."""
        stop = self._enter(ident, items, depth)
        if stop is not None:
            return stop
        each = out is not None
        if out is None:
            out = {}
        count = len(items)
        active = self._active
        active.add(ident)
        try:
            text = self.text
            walk = self.walk
            key_text = self._key_text
            inner = depth + 1
            renamed = False
            seen = 0
            known = self._known_keys
            for key, item in items.items():
                seen += 1
                # A key met before (``_KNOWN_KEYS``) is looked up here, inline: as a call it is a
                # measurable share of a chat request's walk (docs/benchmarks.md). Any other key
                # goes through ``_key_text``, the one rule.
                if known and type(key) is str and key in _KNOWN_KEYS and self._budget >= _KEY_ROOM:
                    name = key
                    self._budget -= len(key) + 2  # what ``text`` would charge, for what it gives
                    credential = False
                elif (
                    known and type(key) is str and key in _VALUE_KEYS and self._budget >= _KEY_ROOM
                ):
                    name = key  # a bare "token" or "auth": its value decides (a model's token list)
                    self._budget -= len(key) + 2
                    credential = bool(
                        self._credentials
                        and type(item) is str
                        and len(item) >= 8  # (what ``is_credential_value`` checks first)
                        and is_credential_value(key, item)
                    )
                else:
                    name, credential = key_text(key, item)
                    if name is not key:
                        renamed = True
                try:  # no cost unless something raises
                    if credential:
                        out[name] = CREDENTIAL
                        self.masked = True
                    elif type(item) is str:
                        out[name] = text(item)
                    elif (
                        (type(item) is int and -_SAFE_INT < item < _SAFE_INT)
                        or type(item) is bool
                        or item is None
                    ):
                        out[name] = item
                    else:
                        out[name] = walk(item, inner)
                except Exception:
                    if not each:
                        raise
                    self.lossy = True
                    out[name] = _marker(item)
                if self._budget <= 0:
                    break
            if renamed and len(out) < seen:
                self.lossy = True  # two keys became the same text; the later one won
            if seen < count:
                self.truncated = True
                out[f"…[truncated {count - seen} keys]"] = None
            return out
        finally:
            active.discard(ident)

    def _key_text(self, key: object, value: object) -> tuple[str, bool]:
        """The one rule for a dict key: its text (charged to the budget like any string, so a
        key holding a secret is redacted) and whether ``value``, a non-empty str under it, is
        masked whole as a credential. A key given back unchanged that qualifies is remembered
        in ``_KNOWN_KEYS``, where ``_dict`` finds it the next time without calling this."""
        plain = key if type(key) is str else _key(key)
        name = self.text(plain)
        if name is key and self._known_keys:
            _know(key, self._redact is not None)
        credential = bool(
            self._credentials and isinstance(value, str) and value and _credential(plain, value)
        )
        return name, credential

    def arguments(self, bound: Mapping[str, object]) -> dict[str, JsonValue]:
        """Arguments by name, each converted on its own (one that fails becomes a marker): a
        dict whose values sit at depth 1, walked by ``_dict`` (its known keys included)."""
        out: dict[str, JsonValue] = {}
        try:
            self._dict(bound, id(bound), 0, out)
        except Exception:  # a mapping whose iteration raises: keep what was read
            self.lossy = True
        return out

    def _other(self, value: object, depth: int) -> JsonValue:
        """Everything that is not an exact JSON type; a conversion that raises becomes a marker."""
        try:
            return self._convert(value, depth)
        except Exception:
            self.lossy = True
            return self._repr(value)

    def _repr(self, value: object) -> JsonValue:
        return {"$repr": self.text(_bounded_repr(value))}

    def _convert(self, value: object, depth: int) -> JsonValue:
        kind = type(value)
        codec = claimed_by(kind)
        if codec is not None:
            return self._claimed(codec, value, depth)
        # Enum first: ``StrEnum`` and ``IntEnum`` members are also str and int instances.
        if isinstance(value, Enum):
            return self._enum(value, depth)
        if isinstance(value, str):
            return self.text(str.__str__(value))  # the plain str, whatever __str__ says
        if isinstance(value, int):
            return self.walk(int.__int__(value), depth)
        if isinstance(value, float):
            return self.walk(float.__float__(value), depth)
        if isinstance(value, BaseModel):
            return self._typed(self._model(value, depth), codecs.PYDANTIC, kind)
        if isinstance(value, Mapping):
            return self._dict(value, id(value), depth)
        if isinstance(value, tuple):
            items = self._list(value, id(value), depth)
            if callable(getattr(kind, "_make", None)):  # a named tuple
                return self._typed(items, codecs.NAMEDTUPLE, kind)
            return self._typed(items, codecs.TUPLE)
        if isinstance(value, list):
            return self._list(value, id(value), depth)
        if isinstance(value, (set, frozenset)):
            items = self._set(value, depth)
            return self._typed(
                items, codecs.FROZENSET if isinstance(value, frozenset) else codecs.SET
            )
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._typed(self._dataclass(value, depth), codecs.DATACLASS, kind)
        if isinstance(value, datetime.datetime):  # before date: a datetime is a date
            return self._typed(self.text(value.isoformat()), codecs.DATETIME)
        if isinstance(value, datetime.date):
            return self._typed(self.text(value.isoformat()), codecs.DATE)
        if isinstance(value, datetime.time):
            return self._typed(self.text(value.isoformat()), codecs.TIME)
        if isinstance(value, UUID):
            return self._typed(self.text(str(value)), codecs.UUID_TEXT)
        if isinstance(value, Decimal):
            return self._typed(self.text(str(value)), codecs.DECIMAL)
        if isinstance(value, bytes):
            return self._typed(self._bytes(value), codecs.BYTES)
        if isinstance(value, bytearray):
            return self._typed(self._bytes(value), codecs.BYTEARRAY)
        self.lossy = True
        return self._repr(value)

    def _claimed(self, codec: codecs.Codec, value: object, depth: int) -> JsonValue:
        """A value a registered codec claims: what its ``encode`` gives, walked, described."""
        stop = self._enter(id(value), value, depth)
        if stop is not None:
            return stop
        if self._claims >= _MAX_CLAIMS:  # caught by ``_other``: the value becomes a marker
            raise RecursionError(f"{_MAX_CLAIMS} codecs' values, each encoded into the next")
        self._claims += 1
        try:
            walked = self.walk(codec.encode(value), depth)
        finally:
            self._claims -= 1
        return self._typed(walked, codec.name, type(value) if codec.needs_class else None)

    def _enum(self, member: Enum, depth: int) -> JsonValue:
        """The JSON form of the member's value; the member's class is all a replay needs, so
        nothing inside the value is described."""
        if not self._types:
            return self.walk(member.value, depth + 1)
        self._types = False
        try:
            value = self.walk(member.value, depth + 1)
        finally:
            self._types = True
        return self._typed(value, codecs.ENUM, type(member))

    def _bytes(self, data: bytes | bytearray) -> JsonValue:
        """``{"$bytes": "<base64>"}``; cut (or changed by a redactor) it cannot be given back,
        so it is lossy too."""
        self.binary = True
        # Only what can be kept is encoded: base64 of a 1 GB buffer is never built.
        room = min(self._limit, max(self._budget, 0))
        keep = room // 4 * 3
        if len(data) <= keep:
            encoded = base64.b64encode(data).decode("ascii")
            text = self.text(encoded)
            if text != encoded:
                self.lossy = True
            return {BYTES_MARKER: text}
        encoded = base64.b64encode(bytes(data[:keep])).decode("ascii")
        self.truncated = self.lossy = True
        self._budget -= len(encoded) + _CUT_SUFFIX
        return {BYTES_MARKER: f"{encoded}…[truncated {len(data) - keep} bytes of binary data]"}

    def _model(self, model: BaseModel, depth: int) -> JsonValue:
        stop = self._enter(id(model), model, depth)
        if stop is not None:
            return stop
        try:
            dumped: object = model.model_dump(mode="json")
        except Exception:
            # JSON mode refuses some field types; the Python dump plus this walk keeps the rest.
            dumped = model.model_dump()
        # Walked even though it is fresh: JSON mode still yields NaN and long strings.
        return self.walk(dumped, depth)

    def _set(self, items: set[object] | frozenset[object], depth: int) -> JsonValue:
        stop = self._enter(id(items), items, depth)
        if stop is not None:
            return stop
        try:
            # Items are arbitrary objects: this may not sort, which is caught below.
            ordered: list[object] = sorted(items)  # type: ignore[type-var]
        except Exception:  # mixed types, or an ``__lt__`` that raises
            ordered = list(items)
        # No cycle is possible through a set (its items are hashable, so no list or dict, and a
        # frozenset cannot contain itself): the fresh list's id only satisfies ``_list``.
        return self._list(ordered, id(ordered), depth)

    def _dataclass(self, instance: DataclassInstance, depth: int) -> JsonValue:
        ident = id(instance)
        stop = self._enter(ident, instance, depth)
        if stop is not None:
            return stop
        fields: dict[str, object] = {}
        for field in dataclasses.fields(instance):
            try:
                fields[field.name] = getattr(instance, field.name)
            except Exception:  # a field never set (``init=False``) or a raising descriptor
                self.lossy = True
                fields[field.name] = {"$repr": f"<unreadable field {field.name}>"}
        # Walked as a dict under the instance's id, so a field holding the instance is a cycle.
        return self._dict(fields, ident, depth)


_KEY_ROOM = 64
"""The longest key remembered in ``_KNOWN_KEYS``; a walk uses them while its string limit and
its budget leave this much room (so ``text`` would neither cut them nor run out)."""
_KNOWN_KEYS: dict[str, None] = {}
"""ASCII keys that ``text`` gave back unchanged and that name no credential: dict keys repeat
endlessly ("role", "content", "prompt_tokens"), and a key's scan always finds the same. Bounded
(4,096 keys of at most 64 characters); starts over when full."""
_VALUE_KEYS: dict[str, None] = {}
"""Keys that qualify for ``_KNOWN_KEYS`` but a bare ``token`` or ``auth`` (``Token``,
``AUTH``...), whose value decides whether it is masked (``redaction.is_credential_value``); a
model's token lists repeat them endlessly. Bounded (64); starts over when full."""


def _know(key: str, scanned: bool) -> None:
    """Remember ``key`` (``text`` gave it back unchanged) if it qualifies for ``_KNOWN_KEYS``.

    ``scanned``: the default redaction scanned it. A key not scanned qualifies only if no scan
    would look at it (shorter than ``SHORTEST_SECRET``, no ``@``): a walk with redaction must
    never skip a key only a walk without it has seen.
    """
    if (
        len(key) <= _KEY_ROOM
        and key.isascii()
        and (scanned or (len(key) < SHORTEST_SECRET and "@" not in key))
        and not is_credential_key(key)
    ):
        if may_name_credential(key):  # a bare "token" or "auth": remembered apart
            if len(_VALUE_KEYS) >= 64:
                _VALUE_KEYS.clear()
            _VALUE_KEYS[key] = None
            return
        if len(_KNOWN_KEYS) >= 4096:
            _KNOWN_KEYS.clear()
        _KNOWN_KEYS[key] = None


def _credential(key: str, value: str) -> bool:
    # Credential names are short; a long key is not one (and is not worth a cache entry).
    return len(key) <= 64 and is_credential_value(key, value)


def _key(key: object) -> str:
    """A dict key as text: an Enum by its value, anything else by ``str``."""
    try:
        if isinstance(key, Enum):
            key = key.value
        if isinstance(key, str):
            return str.__str__(key)
        return str(key)
    except Exception:
        return _bounded_repr(key)


# The C encoder itself: ``json.dumps`` builds and wraps one on every call, which doubles the cost
# for small values. No circular-reference markers: a cycle ends in ``RecursionError``.
_C_ENCODE: Callable[[object, int], Iterable[str]] | None = (
    None  # an interpreter without the C accelerator
    if c_make_encoder is None
    else c_make_encoder(None, None, c_encode_basestring, None, ":", ",", False, False, False)
)


def json_form(
    value: object,
    *,
    max_string_bytes: int | None = None,
    max_total_bytes: int | None = None,
    redaction: Redaction | None = None,
    types: bool = False,
) -> JsonForm:
    """The recorded JSON form of ``value`` (see the module docstring for the table and bounds).

    ``redaction`` masks every string (dict keys included, and whole strings stored under a
    credential-named key) before any cut. Never raises (only ``BaseException``s such as
    ``KeyboardInterrupt`` pass): a value that cannot be walked at all is stored as a bounded
    ``{"$repr": ...}`` marker and flagged lossy. Runs in time linear in the part of the value
    that is kept. The result shares no list or dict with the value, and always encodes as UTF-8.
    ``types=True`` also fills ``JsonForm.types`` (see "Types, only where they are met").
    """
    # The most common results (a short string, a number) skip building a walker.
    if type(value) is str:
        if (
            (redaction is None or not redaction.redactors)
            and value.isascii()
            and (max_string_bytes is None or len(value) <= max_string_bytes)
            and (max_total_bytes is None or len(value) <= max_total_bytes)
        ):
            return JsonForm(value)
    elif (type(value) is int and -_SAFE_INT < value < _SAFE_INT) or (
        type(value) is bool or value is None
    ):
        return JsonForm(value)
    walker = _Walker(max_string_bytes, max_total_bytes, redaction, types)
    try:
        result = walker.walk(value, 0)
    except Exception:  # e.g. a dict changed size on another thread mid-walk
        return JsonForm({"$repr": redaction_safe(_bounded_repr(value), redaction)}, lossy=True)
    found = None
    if walker.typed:
        unwrap = _Unwrap(walker.typed)
        result = unwrap.take(result, "")
        found = unwrap.types
    return walker.form(result, found)


class _Typed(dict[str, JsonValue]):
    """A value's JSON form and how it was encoded, left in a walk's result until ``_Unwrap``
    takes it out (never seen outside this module).

    An (empty) dict only so that it is a ``JsonValue`` to the compiled module, which checks
    declared types at run time: the walk and ``_Unwrap`` test exact types, never taking it for
    a dict."""

    __slots__ = ("description", "value")

    def __init__(self, description: str, value: JsonValue) -> None:
        self.description = description
        self.value = value


class _Unwrap:
    """One pass over a walk's result: each ``_Typed`` replaced by its JSON form, its description
    noted under its JSON Pointer; done as soon as all ``left`` are found."""

    __slots__ = ("left", "types")

    def __init__(self, left: int) -> None:
        self.left = left
        self.types: dict[str, str] = {}

    def take(self, value: object, pointer: str) -> JsonValue:
        if type(value) is _Typed:
            self.types[pointer] = value.description
            self.left -= 1
            value = value.value
        if self.left:
            # The containers are the walk's own fresh ones: replacing in place is safe.
            if type(value) is dict:
                for key, item in value.items():
                    kind = type(item)
                    if kind is dict or kind is list or kind is _Typed:
                        value[key] = self.take(item, f"{pointer}/{pointer_token(key)}")
                        if not self.left:
                            break
            elif type(value) is list:
                for index, item in enumerate(value):
                    kind = type(item)
                    if kind is dict or kind is list or kind is _Typed:
                        value[index] = self.take(item, f"{pointer}/{index}")
                        if not self.left:
                            break
        return cast(JsonValue, value)


def json_arguments(
    bound: Mapping[str, object],
    *,
    max_string_bytes: int | None = None,
    max_total_bytes: int | None = None,
    redaction: Redaction | None = None,
) -> JsonForm:
    """The JSON form of arguments by name (``ArgumentBinder.bind``'s result), for ``input.raw``.

    Always a dict with the same keys (unless the budget cuts it, which the last key says). Each
    argument is converted on its own, so one argument that cannot be walked becomes a marker
    without costing the others. ``redaction`` as for ``json_form``: an argument named like a
    credential (``password``, ``api_key``) is masked whole. Never raises.
    """
    walker = _Walker(max_string_bytes, max_total_bytes, redaction)
    return walker.form(walker.arguments(bound))


def redaction_safe(text: str, redaction: Redaction | None) -> str:
    """``text`` redacted (when a redaction is given) and valid Unicode."""
    if redaction is not None:
        text = redaction.text(text)
    return valid_text(text)


# One encoder, built once: ``json.dumps`` with non-default options builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps(value: object) -> str:
    """Compact JSON text of a JSON form (no spaces, non-ASCII kept), e.g. for span attributes.

    Meant for ``json_form`` results, but never raises: anything else (NaN, a stray object, a
    cycle) is first converted with ``json_form``.
    """
    try:
        if _C_ENCODE is not None:
            return "".join(_C_ENCODE(value, 0))
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return _ENCODER.encode(json_form(value).value)
    except Exception:  # an int beyond Python's int-to-text digit limit, for one
        return _ENCODER.encode({"$repr": _unrepresentable(value)})
