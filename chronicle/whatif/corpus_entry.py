"""The entry a corpus replay calls: ``load_entry("module:function")`` imports it (with the
current directory on ``sys.path``, as ``python -m`` does), ``entry_of`` finds a recording's entry
envelope, and ``call_of`` calls the entry with the recorded input: a function with its bound
arguments (``bind_input``, typed by its annotations), an ASGI app sent the recorded HTTP request
(``http_outcome`` compares its answer with the recorded one). A recording never picks what code
runs: the user names the entry, and it must match the recorded entry's name.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentplane_primitives.models import Envelope
from pydantic import JsonValue, TypeAdapter

from chronicle.errors import CorpusError as CorpusError  # its home; imported here too
from chronicle.errors import ReplayError
from chronicle.recording import http_entry
from chronicle.save.incident import Incident


@dataclass(frozen=True)
class Entry:
    """The function a corpus replay calls: ``path`` as the user named it, its boundary ``name``."""

    fn: Callable[..., Any]
    path: str
    name: str
    asgi: bool = False
    """An ASGI app, called with each recorded HTTP request (``name`` is then empty)."""

    @property
    def is_async(self) -> bool:
        """Whether calling it returns an awaitable (``async def``)."""
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(
            inspect.unwrap(self.fn)
        )


# ---- the entry --------------------------------------------------------------------------------


def load_entry(path: str) -> Entry:
    """Import ``module:function`` (``module:Class.method`` too) with the current directory on
    ``sys.path``, as ``python -m`` does. Raises ``CorpusError`` saying what to fix when it
    cannot be imported or is not a Chronicle boundary."""
    module_name, sep, qualname = path.partition(":")
    if not sep or not module_name or not qualname:
        raise CorpusError(f"--entry takes module:function (app.agent:handle), got {path!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise CorpusError(
            f"the entry {path} cannot be imported: {type(exc).__name__}: {exc}; run from the "
            "folder the module is imported from (it is on sys.path), or check its name"
        ) from None
    for part in qualname.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CorpusError(
                f"the entry {path}: module {module_name} has no {qualname!r}; check the name"
            ) from None
    if not callable(target):
        raise CorpusError(f"the entry {path} is not a function ({type(target).__name__})")
    spec = getattr(target, "__chronicle_boundary__", None)
    if spec is None:
        if http_entry.is_asgi_app(target):
            return Entry(target, path, "", asgi=True)
        raise CorpusError(
            f"the entry {path} is not a Chronicle boundary, so no recording names it; decorate "
            'the function that handles a request with @chronicle.boundary("name"), or name an '
            "ASGI app served through ChronicleMiddleware(app, record_request=True)"
        )
    return Entry(target, path, str(spec.name))


def entry_of(incident: Incident) -> Envelope:
    """The recorded entry: the first call of the first span with no enclosing boundary.
    Raises ``ReplayError`` when there is none."""
    first = incident.spans[0].span_id
    for envelope in incident.envelopes_of(first):
        if envelope.parent_envelope_id is None:
            return envelope
    raise ReplayError("the recording has no top-level call to replay")


def bind_input(fn: Callable[..., Any], raw: JsonValue) -> tuple[list[Any], dict[str, Any]]:
    """The recorded ``input.raw`` (arguments by name) as ``fn``'s positional and keyword
    arguments, each rebuilt through its annotation when it has one (a pydantic model, a
    dataclass). Raises ``ValueError`` naming a parameter with no recorded value."""
    if not isinstance(raw, dict):
        raise ValueError("its recorded input is not a set of arguments by name")
    values = dict(raw)
    hints, parameters = _parameters_of(fn)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    var_keyword = False
    for parameter in parameters:
        name, kind = parameter.name, parameter.kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = True
            continue
        if name not in values:
            if kind is inspect.Parameter.VAR_POSITIONAL or parameter.default is not parameter.empty:
                continue
            raise ValueError(f"its recorded input has no value for the parameter {name!r}")
        value = _typed(values.pop(name), hints.get(name))
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            args.append(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value if isinstance(value, list) else [value])
        else:
            kwargs[name] = value
    if values and not var_keyword:
        raise ValueError(
            f"its recorded input has arguments the entry does not take: {', '.join(sorted(values))}"
        )
    kwargs.update(values)
    return args, kwargs


@functools.lru_cache(maxsize=64)
def _parameters_of(
    fn: Callable[..., Any],
) -> tuple[dict[str, Any], tuple[inspect.Parameter, ...]]:
    """``fn``'s resolved annotations and its parameters, read once per entry (a corpus binds
    every recording's input to the same function)."""
    try:
        hints = typing.get_type_hints(inspect.unwrap(fn))
    except Exception:
        hints = {}
    return hints, tuple(inspect.signature(fn).parameters.values())


@functools.lru_cache(maxsize=256)
def _adapter(annotation: object) -> TypeAdapter[Any]:
    """The pydantic adapter of ``annotation``, built once (building one costs more than a
    recording's replay; ``TypeError``: an annotation that cannot be a cache key)."""
    return TypeAdapter(typing.cast(Any, annotation))


def _typed(value: JsonValue, annotation: object) -> object:
    if annotation is None:
        return value
    try:
        try:
            adapter = _adapter(annotation)
        except TypeError:  # unhashable: built for this value alone
            adapter = TypeAdapter(typing.cast(Any, annotation))
        return adapter.validate_python(value)
    except Exception:
        return value


def call_of(entry: Entry, raw: JsonValue) -> Callable[[], object]:
    """What calling ``entry`` with the recorded input ``raw`` is: a function entry called with
    its arguments (``bind_input``), an ASGI app sent the recorded request (it returns the status
    the app answered). Raises ``ValueError`` saying why it cannot be called
    (``http_entry.BodyNotRecorded`` for a request whose body was not recorded)."""
    if entry.asgi:
        scope, body = http_entry.asgi_request(raw)
        return lambda: asyncio.run(http_entry.call_app(entry.fn, scope, body))
    args, kwargs = bind_input(entry.fn, raw)
    if entry.is_async:
        return lambda: asyncio.run(entry.fn(*args, **kwargs))
    return lambda: entry.fn(*args, **kwargs)


def http_outcome(status: object, recorded_output: JsonValue) -> str | None:
    """Why a replayed HTTP request failed: an answer of 500 or above where the recording got
    less, or the reverse; ``None`` when both agree."""
    recorded = recorded_output.get("status") if isinstance(recorded_output, dict) else None
    if not isinstance(status, int) or not isinstance(recorded, int):
        return None
    if (status >= 500) == (recorded >= 500):
        return None
    return f"the app answered HTTP {status}, where the recording got {recorded}"
