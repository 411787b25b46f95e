"""Validating tool arguments against a tool's JSON Schema, with no dependency.

Chronicle writes tool schemas with pydantic (``agent.tool_schema``), and a profile may list
schemas written by hand (the OpenAI function-calling subset). ``schema_errors(value, schema)``
checks the keywords those use: ``type`` (one or a list), ``enum``, ``const``, ``properties``,
``required``, ``additionalProperties``, ``items`` / ``prefixItems``, ``anyOf`` / ``oneOf`` /
``allOf``, ``$ref`` into the same document (``#/$defs/Order``), the numeric bounds
(``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``), the
length bounds of strings, arrays and objects, and ``pattern``. Other keywords (``format``,
``title``, ``default``, ``description``) are read as annotations, never as failures.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["schema_errors"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
}
_MOST = 20
"""Most errors reported for one value."""


def schema_errors(value: object, schema: Mapping[str, Any]) -> list[str]:
    """Why ``value`` does not validate against ``schema``, one line each (``amount: '3000' is
    not of type integer``); empty when it does. Never raises: a ``$ref`` that does not resolve
    or a ``pattern`` that does not compile is reported as an error of the schema."""
    errors: list[str] = []
    _check(value, schema, schema, "", errors)
    return errors[:_MOST]


def _where(path: str) -> str:
    return path or "the arguments"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_type(value: object, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds = _TYPES.get(name)
    if kinds is None:
        return True  # a type this checker does not know is not held against the value
    if name != "boolean" and isinstance(value, bool):
        return False
    return isinstance(value, kinds)


def _resolve(ref: str, root: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, Mapping) else None


def _check(
    value: object, schema: object, root: Mapping[str, Any], path: str, errors: list[str]
) -> None:
    if len(errors) >= _MOST:
        return
    if schema is True or schema == {}:
        return
    if schema is False:
        errors.append(f"{_where(path)}: no value is allowed here")
        return
    if not isinstance(schema, Mapping):
        return
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _resolve(ref, root)
        if target is None:
            errors.append(f"{_where(path)}: the schema's $ref {ref!r} does not resolve")
            return
        _check(value, target, root, path, errors)
    kinds = schema.get("type")
    if isinstance(kinds, str):
        kinds = [kinds]
    if isinstance(kinds, list) and not any(_is_type(value, str(k)) for k in kinds):
        wanted = " or ".join(str(k) for k in kinds)
        errors.append(f"{_where(path)}: {_shown(value)} is not of type {wanted}")
        return
    if "enum" in schema and isinstance(schema["enum"], list) and value not in schema["enum"]:
        errors.append(f"{_where(path)}: {_shown(value)} is not one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{_where(path)}: {_shown(value)} is not {schema['const']!r}")
    for keyword in ("allOf", "anyOf", "oneOf"):
        options = schema.get(keyword)
        if isinstance(options, list):
            _combined(keyword, value, options, root, path, errors)
    if isinstance(value, dict):
        _object(value, schema, root, path, errors)
    elif isinstance(value, (list, tuple)):
        _array(list(value), schema, root, path, errors)
    elif isinstance(value, str):
        _string(value, schema, path, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _number(value, schema, path, errors)


def _combined(
    keyword: str,
    value: object,
    options: list[Any],
    root: Mapping[str, Any],
    path: str,
    errors: list[str],
) -> None:
    found = []
    for option in options:
        inner: list[str] = []
        _check(value, option, root, path, inner)
        found.append(inner)
    passing = sum(1 for inner in found if not inner)
    if keyword == "allOf":
        for inner in found:
            errors.extend(inner)
    elif keyword == "anyOf" and passing == 0:
        firsts = "; ".join(inner[0] for inner in found if inner)
        errors.append(
            f"{_where(path)}: {_shown(value)} matches none of the allowed forms ({firsts})"
        )
    elif keyword == "oneOf" and passing != 1:
        errors.append(
            f"{_where(path)}: {_shown(value)} matches {passing} of the forms, and must match one"
        )


def _object(
    value: dict[Any, Any],
    schema: Mapping[str, Any],
    root: Mapping[str, Any],
    path: str,
    errors: list[str],
) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = schema.get("required")
    for name in required if isinstance(required, list) else []:
        if name not in value:
            errors.append(f"{_where(path)}: {name!r} is required and missing")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key in properties:
            _check(item, properties[key], root, where, errors)
        elif extra is False:
            errors.append(f"{_where(path)}: {key!r} is not an allowed argument")
        elif isinstance(extra, Mapping):
            _check(item, extra, root, where, errors)
    _size(len(value), "Properties", f"has {len(value)} entries", schema, path, errors)


def _array(
    value: list[Any],
    schema: Mapping[str, Any],
    root: Mapping[str, Any],
    path: str,
    errors: list[str],
) -> None:
    prefix = schema.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        if index < len(prefix):
            _check(item, prefix[index], root, where, errors)
        elif "items" in schema:
            _check(item, schema["items"], root, where, errors)
    _size(len(value), "Items", f"has {len(value)} items", schema, path, errors)
    if schema.get("uniqueItems") is True:
        seen: list[Any] = []
        for item in value:
            if item in seen:
                errors.append(f"{_where(path)}: {_shown(item)} appears twice; items must differ")
                break
            seen.append(item)


def _size(
    count: int, kind: str, shown: str, schema: Mapping[str, Any], path: str, errors: list[str]
) -> None:
    """The schema's ``min<kind>``/``max<kind>`` bounds on a size (``Properties``, ``Items``,
    ``Length``); ``shown`` says the size in the error."""
    for keyword, test, says in (
        (f"min{kind}", operator.ge, "at least"),
        (f"max{kind}", operator.le, "at most"),
    ):
        bound = schema.get(keyword)
        if isinstance(bound, int) and not test(count, bound):
            errors.append(f"{_where(path)}: {shown}, {says} {bound} allowed")


def _string(value: str, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    _size(len(value), "Length", f"is {len(value)} characters long", schema, path, errors)
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            errors.append(f"{_where(path)}: the schema's pattern {pattern!r} does not compile")
            return
        if not matched:
            errors.append(f"{_where(path)}: {_shown(value)} does not match {pattern!r}")


def _number(value: float, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    for keyword, test, says in (
        ("minimum", operator.ge, "below the minimum"),
        ("maximum", operator.le, "above the maximum"),
        ("exclusiveMinimum", operator.gt, "at or below the exclusive minimum"),
        ("exclusiveMaximum", operator.lt, "at or above the exclusive maximum"),
    ):
        bound = schema.get(keyword)
        if (
            isinstance(bound, (int, float))
            and not isinstance(bound, bool)
            and not test(value, bound)
        ):
            errors.append(f"{_where(path)}: {_shown(value)} is {says} {bound}")
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
        ratio = value / step
        if abs(ratio - round(ratio)) > 1e-9:
            errors.append(f"{_where(path)}: {_shown(value)} is not a multiple of {step}")
