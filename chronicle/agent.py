"""Agent profiles: what an agent is for, carried on every Span it records.

``AgentProfile(name, goal, ...)`` describes the agent a service runs: its goal, the instructions
and constraints it should follow, its tools and its model. Set it with
``configure(agent=profile)`` (or only a name and version with ``CHRONICLE_AGENT_NAME`` and
``CHRONICLE_AGENT_VERSION``) and every Span the service records carries its JSON form
(``span_form``) in ``metadata["chronicle.agent"]`` (``wire.AGENT``), with an ``agent_id``
derived from that content, so a trace can be judged against what the agent was meant to do and
found by agent (``chronicle traces --agent NAME``).

``tools=None`` means the service's own tools: every function decorated with
``@boundary(kind="tool")`` in this process, each with its name, the first paragraph of its
docstring as the description, and a JSON Schema of its parameters built from its signature with
pydantic. The boundary decorator feeds that registry (``register_tool``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import pydantic
from pydantic import JsonValue

from chronicle.errors import ConfigurationError

__all__ = [
    "AgentProfile",
    "register_tool",
    "resolve_profile",
    "tool_schema",
]

logger = logging.getLogger("chronicle")

_ID_PREFIX = "agt_"
_ID_HEX = 20

_tools: dict[str, Callable[..., Any]] = {}
_tools_lock = threading.Lock()
_tools_version = 0
_warned: set[str] = set()


def register_tool(name: str, fn: Callable[..., Any]) -> None:
    """Add a ``@boundary(kind="tool")`` function to this process's tools. Cheap and never
    raises: the schema is built when a profile needs it.

    The first function registered under a name defines that tool (a same-named replacement,
    such as the fixed version a replay runs, does not change it), except that the same function
    decorated again (a module reloaded, a notebook cell run twice) replaces itself.
    """
    global _tools_version
    with _tools_lock:
        known = _tools.get(name)
        if known is not None and _where(known) != _where(fn):
            return
        _tools[name] = fn
        _tools_version += 1


def _where(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def registered_tools() -> dict[str, Callable[..., Any]]:
    """The tools registered so far, by name, in registration order."""
    with _tools_lock:
        return dict(_tools)


def _first_paragraph(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines()).strip()


def tool_schema(name: str, fn: Callable[..., Any]) -> dict[str, JsonValue]:
    """``{"name", "description", "parameters"}`` for one tool function.

    ``parameters`` is the JSON Schema of the arguments as Chronicle records them: declared
    parameters by name (a first ``self``/``cls`` left out), ``*args`` as a list under its own
    name, ``**kwargs`` as additional properties. Raises ``ConfigurationError`` naming the tool and
    the reason when the schema cannot be built (an annotation pydantic cannot describe, or one
    that does not resolve).
    """
    where = _where(fn)
    fix = (
        "annotate its parameters with JSON types (str, int, list[str], a pydantic model, ...) "
        "or list the tools yourself: AgentProfile(..., tools=[...])"
    )
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ConfigurationError(
            "agent", f"the parameters of tool {name!r} ({where}) cannot be read: {exc}; {fix}"
        ) from None
    parameters = list(signature.parameters.values())
    if parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    fields: dict[str, Any] = {}
    extra: Literal["allow", "forbid"] = "forbid"
    for index, parameter in enumerate(parameters):
        annotation = hints.get(parameter.name, Any)
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            extra = "allow"
            continue
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            annotation = list[annotation]  # type: ignore[valid-type]
            default = pydantic.Field([], alias=parameter.name)
        elif parameter.default is inspect.Parameter.empty:
            default = pydantic.Field(alias=parameter.name)
        else:
            default = pydantic.Field(parameter.default, alias=parameter.name)
        fields[f"p{index}"] = (annotation, default)  # aliases keep names pydantic would refuse
    try:
        model = pydantic.create_model(
            f"{name}_arguments", __config__=pydantic.ConfigDict(extra=extra), **fields
        )
        schema: dict[str, Any] = model.model_json_schema(by_alias=True)
        json.dumps(schema)
    except Exception as exc:
        text = str(exc).strip()
        reason = text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(exc).__name__
        raise ConfigurationError(
            "agent", f"the JSON Schema of tool {name!r} ({where}) cannot be built: {reason}; {fix}"
        ) from None
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    if extra == "forbid":
        schema.pop("additionalProperties", None)
    return {"name": name, "description": _first_paragraph(fn), "parameters": schema}


def _json_copy(value: object, what: str) -> Any:
    """A plain-JSON deep copy of ``value``, or ``ConfigurationError`` naming ``what``."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"AgentProfile {what}", f"must be JSON: {exc}") from None


def _strings(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigurationError(
            f"AgentProfile {what}", f"expects a list of strings, got {value!r}"
        )
    if not all(isinstance(item, str) and item.strip() for item in value):
        raise ConfigurationError(
            f"AgentProfile {what}", f"expects non-empty strings, got {list(value)!r}"
        )
    return tuple(value)


class AgentProfile:
    """The agent a service runs, attached to every Span it records (``configure(agent=...)``).

    ``name`` (required) and ``goal`` are plain text; ``instructions`` and ``constraints`` are
    lists of rules; ``tools`` is a list of ``{"name", "description", "parameters"}`` (a JSON
    Schema), or ``None`` for this process's ``@boundary(kind="tool")`` functions; ``model`` is a
    model name or a mapping (``{"name": "gpt-4o", "temperature": 0.1}``); ``metadata`` holds JSON
    values such as ``version``, ``team`` or ``environment``. A bad value raises
    ``ConfigurationError`` here; a derived tool whose schema cannot be built raises it at
    ``configure``.
    """

    __slots__ = (
        "_cache",
        "constraints",
        "goal",
        "instructions",
        "metadata",
        "model",
        "name",
        "tools",
    )

    def __init__(
        self,
        name: str,
        goal: str = "",
        *,
        instructions: Sequence[str] = (),
        constraints: Sequence[str] = (),
        tools: Sequence[Mapping[str, object]] | None = None,
        model: str | Mapping[str, object] | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(
                "AgentProfile name", f"is required: a non-empty string, got {name!r}"
            )
        if not isinstance(goal, str):
            raise ConfigurationError("AgentProfile goal", f"expects a string, got {goal!r}")
        self.name = name.strip()
        self.goal = goal.strip()
        self.instructions = _strings(instructions, "instructions")
        self.constraints = _strings(constraints, "constraints")
        self.tools: tuple[dict[str, JsonValue], ...] | None = (
            None if tools is None else tuple(_check_tool(tool, i) for i, tool in enumerate(tools))
        )
        if isinstance(model, str):
            model = {"name": model}
        if model is not None and not isinstance(model, Mapping):
            raise ConfigurationError(
                "AgentProfile model", f"expects a model name or a mapping, got {model!r}"
            )
        self.model: dict[str, JsonValue] | None = (
            None if model is None else _json_copy(dict(model), "model")
        )
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ConfigurationError(
                "AgentProfile metadata", f"expects a mapping, got {type(metadata).__name__}"
            )
        self.metadata: dict[str, JsonValue] = _json_copy(dict(metadata or {}), "metadata")
        self._cache: tuple[int, dict[str, JsonValue]] | None = None

    def __repr__(self) -> str:
        return f"AgentProfile(name={self.name!r}, agent_id={self.agent_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentProfile) and self._content(True) == other._content(True)

    def __hash__(self) -> int:
        return hash(self.agent_id)

    @property
    def agent_id(self) -> str:
        """``agt_`` and 20 hex digits of the SHA-256 of the profile's content: the same profile
        (tools included) gets the same id in every process and run."""
        return str(self.to_json()["agent_id"])

    def with_version(self, version: str) -> AgentProfile:
        """A copy with ``metadata["version"] = version``."""
        copy = AgentProfile(
            self.name,
            self.goal,
            instructions=self.instructions,
            constraints=self.constraints,
            tools=self.tools,
            model=self.model,
            metadata={**self.metadata, "version": version},
        )
        return copy

    def to_json(self, *, strict: bool = True) -> dict[str, JsonValue]:
        """The form stored on each Span: ``agent_id``, ``name``, ``goal``, ``instructions``,
        ``constraints``, ``tools``, ``model`` and ``metadata``.

        With ``tools=None`` the tools are those registered when this is called (cached until
        another is registered). ``strict``: a tool whose schema cannot be built raises
        ``ConfigurationError``; otherwise it is left out and a warning is logged once.
        """
        version = _tools_version
        cached = self._cache
        if cached is not None and cached[0] == version:
            return cached[1]
        content = self._content(strict)
        digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
        form: dict[str, JsonValue] = {"agent_id": _ID_PREFIX + digest[:_ID_HEX], **content}
        self._cache = (version, form)
        return form

    def span_form(self) -> dict[str, JsonValue]:
        """``to_json(strict=False)`` for a request span that is opening: never raises (a
        failure is logged and only the name is carried)."""
        try:
            return self.to_json(strict=False)
        except Exception:
            logger.exception("the agent profile %r could not be built", self.name)
            return {"name": self.name}

    def _content(self, strict: bool) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "goal": self.goal,
            "instructions": list(self.instructions),
            "constraints": list(self.constraints),
            "tools": list(self.tools) if self.tools is not None else _derived_tools(strict),
            "model": self.model,
            "metadata": self.metadata,
        }


def _check_tool(tool: object, index: int) -> dict[str, JsonValue]:
    what = f"tools[{index}]"
    if not isinstance(tool, Mapping):
        raise ConfigurationError(
            f"AgentProfile {what}",
            f"expects a mapping with name, description and parameters, got {tool!r}",
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"AgentProfile {what}", "needs a non-empty 'name'")
    description = tool.get("description", "")
    if not isinstance(description, str):
        raise ConfigurationError(f"AgentProfile {what}", "'description' must be a string")
    parameters = tool.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, Mapping):
        raise ConfigurationError(
            f"AgentProfile {what}", "'parameters' must be a JSON Schema object (a mapping)"
        )
    return _json_copy({**tool, "name": name, "description": description}, what)  # type: ignore[no-any-return]


def _derived_tools(strict: bool) -> list[JsonValue]:
    found: list[JsonValue] = []
    for name, fn in registered_tools().items():
        try:
            found.append(tool_schema(name, fn))
        except ConfigurationError as exc:
            if strict:
                raise
            if name not in _warned:
                _warned.add(name)
                logger.warning("tool %r is left out of the agent profile: %s", name, exc)
    return found


def resolve_profile(
    agent: AgentProfile | None, name: str | None, version: str | None
) -> AgentProfile | None:
    """The profile a configuration describes, checked (``strict`` tool schemas).

    ``agent`` (from code) wins; ``name`` alone makes a profile of that name; ``version`` goes in
    ``metadata["version"]`` unless the profile already has one. A version with no agent is an
    error.
    """
    if agent is None and name is None:
        if version is not None:
            raise ConfigurationError(
                "agent_version",
                "needs an agent: set agent_name (CHRONICLE_AGENT_NAME) or configure(agent=...)",
            )
        return None
    profile = agent if agent is not None else AgentProfile(str(name))
    if version is not None and "version" not in profile.metadata:
        profile = profile.with_version(version)
    profile.to_json(strict=True)
    return profile
