"""Validating tool arguments against a tool's JSON Schema, in bounded time, whatever the schema.

Chronicle writes tool schemas with pydantic (``agent.tool_schema``), and a profile may list
schemas written by hand (the OpenAI function-calling subset). Both reach ``chronicle evaluate``
from a recording, so a schema is untrusted input here: the checking is done by the maintained
``jsonschema`` package (draft 2020-12; the optional extra ``evaluate`` installs it), with what it
would run unbounded taken in hand:

- **Regular expressions** (``pattern``, ``patternProperties``) run on ``google-re2``, an engine
  whose time is linear in the text (installed with the same extra). Python's ``re`` backtracks:
  ``^(a+)+$`` on 31 characters runs for minutes holding the GIL, and no length bound keeps every
  pattern fast (``^((a+)+)+$`` needs seconds at 16 characters), so where ``re2`` is not installed,
  or refuses a pattern (a lookaround, a backreference), that pattern is not run: the result says
  so (``SchemaCheck.unchecked``), and the verdict with it.
- **``$ref`` cycles** that never reach a value (``{"$ref": "#"}``, ``A -> B -> A`` through
  ``$ref`` and ``allOf``/``anyOf``/...) are found before validating and reported as an error of
  the schema; a ``$ref`` that does not resolve is one too. A ``$ref`` to another document is
  never fetched (``jsonschema``'s default would fetch it over HTTP, with no timeout).
- **Work**: each check has a budget of keyword evaluations (a schema whose ``anyOf`` branches
  double at each level would otherwise take exponential time) and Python's recursion limit
  (a value or schema nested deeper than can be checked); running out of either is
  ``SchemaCheck.skipped``, never an exception.

``check_arguments(value, schema)`` never raises. ``schema_errors(value, schema)`` is its errors
alone, one line each (``amount: '3000' is not of type integer``).
"""

from __future__ import annotations

import contextvars
import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["INSTALL_HINT", "SchemaCheck", "check_arguments", "regex_engine", "schema_errors"]

INSTALL_HINT = "pip install 'agentplane-chronicle[evaluate]'"
"""How to install what the schema check needs (``jsonschema`` and ``google-re2``)."""

_MOST = 20
"""Most errors reported for one value."""
_STEPS = 10_000
_STEPS_PER_VALUE = 20
"""A check makes at most ``_STEPS`` keyword evaluations, and ``_STEPS_PER_VALUE`` more for each
value the arguments hold (a dict, a list, a string ...): so its time is bounded by the size of
what it checks, whatever the schema. A pydantic schema's check takes about 9 per value (18,000
for 2,000 list items of two fields); 10,000 steps take from 0.1 to 1 s (a ``$ref`` costs most)."""
_PATTERNS_KEPT = 512
"""Compiled patterns kept (the cache is cleared past it)."""

_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = (
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
)
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
"""Keywords that apply a subschema to the same value: a cycle through them never ends."""


@dataclass
class SchemaCheck:
    """What checking one value against one schema found.

    ``errors``: why the value does not validate, one line each (an error of the schema itself,
    such as a ``$ref`` cycle, is one too); empty when it validates. ``unchecked``: what of the
    schema was not applied and why (a pattern not run), one line each. ``skipped``: the value
    was not checked at all, and why (``jsonschema`` not installed, out of budget), else ``None``.
    """

    errors: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    skipped: str | None = None


def schema_errors(value: object, schema: Mapping[str, Any]) -> list[str]:
    """Why ``value`` does not validate against ``schema``, one line each (``amount: '3000' is
    not of type integer``); empty when it does, or when it could not be checked (see
    ``check_arguments``, which says so). Never raises."""
    return check_arguments(value, schema).errors


def regex_engine() -> str:
    """``"re2"`` when patterns run on ``google-re2``, else ``"none"`` (patterns not run)."""
    return "re2" if _re2() is not None else "none"


def check_arguments(value: object, schema: Mapping[str, Any]) -> SchemaCheck:
    """``value`` checked against the JSON Schema ``schema`` (draft 2020-12), in bounded time.

    Never raises (but ``KeyboardInterrupt`` and ``SystemExit``, which pass): whatever cannot be
    checked is said in the result (see ``SchemaCheck``)."""
    result = SchemaCheck()
    if _jsonschema() is None:
        result.skipped = f"the jsonschema package is not installed ({INSTALL_HINT})"
        return result
    try:
        cycle = _ref_cycle(schema)
    except RecursionError:  # pragma: no cover - the walk is iterative
        cycle = None
    if cycle is not None:
        result.errors.append(
            f"the schema's $ref cycle {' -> '.join(cycle)} never reaches a value; fix the "
            "tool's schema (the arguments were not checked against it)"
        )
        return result
    steps = _STEPS + _STEPS_PER_VALUE * _count(value)
    state = _State(steps=steps, unevaluated_off=_pattern_and_unevaluated(schema))
    token = _STATE.set(state)
    try:
        _validate(value, schema, result)
    finally:
        _STATE.reset(token)
    result.unchecked.extend(state.notes)
    return result


# ---- the run ----------------------------------------------------------------------------------


class _OutOfSteps(Exception):
    """The check used its budget of keyword evaluations."""


@dataclass
class _State:
    """One check's budget and what it could not apply (per context: checks may run in threads)."""

    steps: int
    notes: list[str] = field(default_factory=list)
    unevaluated_off: bool = False


_STATE: contextvars.ContextVar[_State] = contextvars.ContextVar("chronicle_schema_check")
_VALIDATOR: list[tuple[Any, Any, Any]] = []
"""The validator class, built on first use (``jsonschema`` imported then)."""
_MODULE: list[Any] = []


def _jsonschema() -> Any:
    """The ``jsonschema`` module (imported on first use: ``import chronicle`` does not pay for
    it), or ``None`` when it is not installed."""
    if not _MODULE:
        try:
            _MODULE.append(importlib.import_module("jsonschema"))
        except ImportError:
            _MODULE.append(None)
    return _MODULE[0]


def _count(value: object) -> int:
    """How many values ``value`` holds, itself included (a walk, not recursion)."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count


def _validate(value: object, schema: Mapping[str, Any], result: SchemaCheck) -> None:
    budget = _STATE.get().steps
    cls, registry_class, unresolvable = _validator_class()
    try:
        seen: set[str] = set()
        # A registry of its own: jsonschema's default one fetches a remote $ref over HTTP (with
        # no timeout), which a recorded schema must never make evaluate do.
        registry = registry_class()
        for error in cls(schema, registry=registry).iter_errors(value):
            for line in _lines(error):
                if line not in seen:
                    seen.add(line)
                    result.errors.append(line)
            if len(result.errors) >= _MOST:
                break
        del result.errors[_MOST:]
    except _OutOfSteps:
        result.errors.clear()
        result.skipped = (
            f"the schema needs more than {budget:,} steps to check this value (it branches "
            "at every level); simplify the tool's schema"
        )
    except RecursionError:
        result.errors.clear()
        result.skipped = (
            "the value or the schema is nested deeper than can be checked, or a $ref loops "
            "back to itself; simplify the tool's schema"
        )
    except unresolvable as exc:
        ref = str(getattr(exc, "ref", ""))
        ref = f"#{ref}" if ref.startswith("/") else ref  # a pointer jsonschema reports bare
        result.errors.append(f"the schema's $ref {ref!r} does not resolve; fix the tool's schema")
    except MemoryError:
        result.errors.clear()
        result.skipped = "the value is too large to check against the schema"
    except Exception as exc:  # a schema jsonschema cannot apply ({"type": 5}, ...)
        text = str(exc).splitlines()[0] if str(exc) else ""
        result.errors.append(
            f"the schema cannot be applied ({type(exc).__name__}: {text[:200]}); fix the "
            "tool's schema"
        )


def _validator_class() -> tuple[Any, Any, Any]:
    """Draft 2020-12 with each keyword counted against the budget and the regular expressions
    run by ``_search``, with the ``referencing`` names it works with (``Registry``,
    ``Unresolvable``): taken once, together, so that what the validator raises is the class
    caught here even when ``referencing`` was imported again since (a host that puts
    ``sys.modules`` back, as pytest's in-process runs do, would otherwise make a second copy)."""
    if _VALIDATOR:
        return _VALIDATOR[0]
    validators = _jsonschema().validators
    Draft202012Validator = validators.Draft202012Validator
    own: dict[str, Callable[..., Iterator[Any]]] = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties(
            Draft202012Validator.VALIDATORS["unevaluatedProperties"]
        ),
    }
    keywords = dict(Draft202012Validator.VALIDATORS) | own
    cls = validators.extend(
        Draft202012Validator,
        {name: _counted(function) for name, function in keywords.items()},
    )
    # The copy jsonschema itself imported (its module's own name for it), else the current one.
    referencing = getattr(validators, "referencing", None)
    if referencing is None or not hasattr(referencing, "exceptions"):
        referencing = importlib.import_module("referencing")
        importlib.import_module("referencing.exceptions")
    _VALIDATOR.append((cls, referencing.Registry, referencing.exceptions.Unresolvable))
    return _VALIDATOR[0]


def _counted(function: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        state = _STATE.get()
        state.steps -= 1
        if state.steps < 0:
            raise _OutOfSteps
        yield from function(validator, value, instance, schema)

    return keyword


# ---- regular expressions ----------------------------------------------------------------------

_UNSUPPORTED = object()
_INVALID = object()
_COMPILED: dict[str, object] = {}
_ENGINE: list[Any] = []


def _re2() -> Any:
    """The ``re2`` module with its options (errors not logged to stderr), or ``None``."""
    if not _ENGINE:
        try:
            re2: Any = importlib.import_module("re2")
            options = re2.Options()
            options.log_errors = False
            _ENGINE.append((re2, options))
        except Exception:  # not installed, or a build that does not load
            _ENGINE.append(None)
    return _ENGINE[0]


def _compiled(pattern: str) -> object:
    """``pattern`` compiled by ``re2``; ``_UNSUPPORTED`` when it is valid for Python but not
    for ``re2`` (or ``re2`` is missing), ``_INVALID`` when it does not compile at all."""
    found = _COMPILED.get(pattern)
    if found is not None:
        return found
    engine = _re2()
    found = _UNSUPPORTED
    if engine is not None:
        re2, options = engine
        try:
            found = re2.compile(pattern, options)
        except Exception:
            found = _UNSUPPORTED
    if found is _UNSUPPORTED:
        try:
            re.compile(pattern)  # compiling runs nothing on the text
        except (re.error, RecursionError, OverflowError, ValueError):
            found = _INVALID
    if len(_COMPILED) >= _PATTERNS_KEPT:
        _COMPILED.clear()
    _COMPILED[pattern] = found
    return found


def _search(pattern: object, text: str) -> bool | None:
    """Whether ``pattern`` matches somewhere in ``text``; ``None`` when it was not run (the
    reason is noted once per pattern). Raises ``re.error`` for a pattern that does not compile."""
    if not isinstance(pattern, str):
        raise re.error(f"{pattern!r} is not a string")
    compiled = _compiled(pattern)
    if compiled is _INVALID:
        raise re.error(f"{pattern!r} does not compile")
    if compiled is _UNSUPPORTED:
        why = (
            "no linear-time regular expression engine is installed "
            f"({INSTALL_HINT} installs google-re2)"
            if _re2() is None
            else "it uses what a linear-time engine does not run (a lookaround or a backreference)"
        )
        note = f"the pattern {pattern!r} was not run: {why}"
        notes = _STATE.get().notes
        if note not in notes:
            notes.append(note)
        return None
    return compiled.search(text) is not None  # type: ignore[attr-defined]


def _bad_pattern(pattern: object) -> Any:
    ValidationError = _jsonschema().exceptions.ValidationError
    return ValidationError(
        f"the schema's pattern {pattern!r} does not compile; fix the tool's schema",
        validator="chronicle:pattern",
    )


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
    ValidationError = _jsonschema().exceptions.ValidationError
    if not validator.is_type(instance, "string"):
        return
    try:
        found = _search(pattern, instance)
    except re.error:
        yield _bad_pattern(pattern)
        return
    if found is False:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object") or not isinstance(patterns, Mapping):
        return
    for pattern, subschema in patterns.items():
        for key, item in instance.items():
            try:
                found = _search(pattern, key)
            except re.error:
                yield _bad_pattern(pattern)
                break
            if found:
                yield from validator.descend(item, subschema, path=key, schema_path=pattern)


def _extras(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The keys of ``instance`` neither ``properties`` nor a ``patternProperties`` pattern
    covers (a pattern not run covers nothing)."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    patterns = schema.get("patternProperties")
    patterns = patterns if isinstance(patterns, Mapping) else {}
    extras = []
    for key in instance:
        if key in properties:
            continue
        covered = False
        for pattern in patterns:
            try:
                covered = bool(_search(pattern, key))
            except re.error:
                covered = False  # reported by patternProperties
            if covered:
                break
        if not covered:
            extras.append(key)
    return extras


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    ValidationError = _jsonschema().exceptions.ValidationError
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        yield ValidationError(f"{', '.join(map(repr, sorted(extras)))} not allowed")


def _unevaluated_properties(
    original: Callable[..., Iterator[Any]],
) -> Callable[..., Iterator[Any]]:
    """jsonschema's own, unless the schema also has ``patternProperties``: its search for the
    keys they cover runs Python's ``re``, so the keyword is not applied then (and noted)."""

    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        state = _STATE.get()
        if state.unevaluated_off:
            note = (
                "unevaluatedProperties was not applied: the schema also has patternProperties, "
                "whose keys it would match without a time bound"
            )
            if note not in state.notes:
                state.notes.append(note)
            return
        yield from original(validator, value, instance, schema)

    return keyword


# ---- the schema, walked before validating -----------------------------------------------------


def _subschemas(pointer: str, node: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    """``(pointer, subschema)`` of each place in ``node`` that holds a schema."""
    for keyword in _SCHEMA_ONE:
        if keyword in node:
            yield f"{pointer}/{keyword}", node[keyword]
    for keyword in _SCHEMA_LISTS:
        items = node.get(keyword)
        if isinstance(items, list):
            for index, item in enumerate(items):
                yield f"{pointer}/{keyword}/{index}", item
    for keyword in _SCHEMA_MAPS:
        entries = node.get(keyword)
        if isinstance(entries, Mapping):
            for key, item in entries.items():
                yield f"{pointer}/{keyword}/{_escaped(str(key))}", item


def _escaped(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _schemas(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Every object schema in ``schema`` by its JSON Pointer (``""`` the root), walked without
    recursion (a schema may be nested deeper than Python recurses)."""
    found: dict[str, Mapping[str, Any]] = {}
    stack: list[tuple[str, object]] = [("", schema)]
    while stack:
        pointer, node = stack.pop()
        if not isinstance(node, Mapping) or pointer in found:
            continue
        found[pointer] = node
        stack.extend(_subschemas(pointer, node))
    return found


def _pattern_and_unevaluated(schema: Mapping[str, Any]) -> bool:
    nodes = _schemas(schema).values()
    return any("patternProperties" in n for n in nodes) and any(
        "unevaluatedProperties" in n for n in nodes
    )


def _ref_target(ref: str, nodes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The pointer a local ``$ref`` (``#/$defs/A``) names, when it names an object schema."""
    if not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
        return None  # an anchor or another document: jsonschema resolves (or refuses) those
    target = ref[1:]
    return target if target in nodes else None


def _ref_cycle(schema: Mapping[str, Any]) -> list[str] | None:
    """A chain of schemas that apply one another to the same value without end (``$ref`` and
    the in-place keywords: ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else``),
    as ``#pointer`` names, its first repeated last; ``None`` when there is none."""
    nodes = _schemas(schema)

    def next_of(pointer: str) -> list[str]:
        node = nodes[pointer]
        out = []
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = _ref_target(ref, nodes)
            if target is not None:
                out.append(target)
        for keyword in _IN_PLACE_LISTS:
            items = node.get(keyword)
            if isinstance(items, list):
                out.extend(f"{pointer}/{keyword}/{i}" for i in range(len(items)))
        out.extend(f"{pointer}/{keyword}" for keyword in _IN_PLACE_ONE if keyword in node)
        return [p for p in out if p in nodes]

    done: set[str] = set()
    for start in nodes:
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        pending: list[Iterator[str]] = [iter(next_of(start))]
        while pending:
            following = next(pending[-1], None)
            if following is None:
                finished = path.pop()
                done.add(finished)
                on_path.discard(finished)
                pending.pop()
                continue
            if following in on_path:
                loop = [*path[path.index(following) :], following]
                return [f"#{p}" for p in loop]
            if following in done:
                continue
            path.append(following)
            on_path.add(following)
            pending.append(iter(next_of(following)))
    return None


# ---- errors, one line each --------------------------------------------------------------------


def _where(error: Any) -> str:
    path = ""
    for part in error.absolute_path:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path or "the arguments"


def _shown(value: object) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = f"<a {type(value).__name__} nested too deep to show>"
    return text if len(text) <= 60 else text[:57] + "..."


_BOUNDS = {
    "minimum": "below the minimum",
    "maximum": "above the maximum",
    "exclusiveMinimum": "at or below the exclusive minimum",
    "exclusiveMaximum": "at or above the exclusive maximum",
}
_SIZES = {
    "minLength": ("at least", "is {n} characters long"),
    "maxLength": ("at most", "is {n} characters long"),
    "minItems": ("at least", "has {n} items"),
    "maxItems": ("at most", "has {n} items"),
    "minProperties": ("at least", "has {n} entries"),
    "maxProperties": ("at most", "has {n} entries"),
}


def _lines(error: Any) -> list[str]:
    """One jsonschema error as Chronicle's lines (``where: what``)."""
    where = _where(error)
    keyword = error.validator
    expected = error.validator_value
    value = error.instance
    if keyword == "chronicle:pattern":
        return [f"{where}: {error.message}"]
    if keyword is None:
        return [f"{where}: no value is allowed here"]
    if keyword == "type":
        kinds = [expected] if isinstance(expected, str) else list(expected)
        return [f"{where}: {_shown(value)} is not of type {' or '.join(map(str, kinds))}"]
    if keyword == "enum":
        return [f"{where}: {_shown(value)} is not one of {_shown(expected)}"]
    if keyword == "const":
        return [f"{where}: {_shown(value)} is not {_shown(expected)}"]
    if keyword == "required" and isinstance(value, Mapping) and isinstance(expected, list):
        return [
            f"{where}: {name!r} is required and missing" for name in expected if name not in value
        ]
    if keyword == "additionalProperties" and isinstance(value, Mapping):
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        return [f"{where}: {key!r} is not an allowed argument" for key in _extras(value, schema)]
    if keyword == "anyOf":
        firsts: dict[object, str] = {}
        for inner in error.context or ():
            option = inner.relative_schema_path[0] if inner.relative_schema_path else None
            if option not in firsts:
                lines = _lines(inner)
                if lines:
                    firsts[option] = lines[0]
        said = "; ".join(firsts.values())
        return [f"{where}: {_shown(value)} matches none of the allowed forms ({said})"]
    if keyword == "oneOf":
        how = "none" if error.context else "more than one"
        return [f"{where}: {_shown(value)} matches {how} of the forms, and must match one"]
    if keyword in _BOUNDS:
        return [f"{where}: {_shown(value)} is {_BOUNDS[keyword]} {expected}"]
    if keyword == "multipleOf":
        return [f"{where}: {_shown(value)} is not a multiple of {expected}"]
    if keyword in _SIZES:
        says, shown = _SIZES[keyword]
        size = len(value) if hasattr(value, "__len__") else 0
        return [f"{where}: {shown.format(n=size)}, {says} {expected} allowed"]
    if keyword == "pattern":
        return [f"{where}: {_shown(value)} does not match {expected!r}"]
    if keyword == "uniqueItems":
        return [f"{where}: {_shown(value)} holds an item twice; items must differ"]
    message = str(error.message)
    return [f"{where}: {message if len(message) <= 160 else message[:157] + '...'}"]
