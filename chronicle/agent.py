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
pydantic. The boundary decorator feeds that registry (``register_tool``). Deriving them never
fails: a parameter whose annotation cannot be resolved or described is left without a type, and
one warning names the tool.

A constraint is text, or a ``Constraint(text, check=...)`` whose ``check`` is a Python predicate
over a trace's calls (``chronicle.evaluate`` runs it). Only the text is recorded: the callable
lives in code, so every trace and every replay of the agent is checked by the same function.
The common rules need no code: ``Constraint.before("lookup_policy", "issue_refund")``,
``Constraint.never("delete_file")``, ``Constraint.only(["search", "lookup"])`` and
``Constraint.at_most("tool_calls" | "tokens" | "cost_usd", limit)`` make a ``Constraint`` whose
check is a ``Rule``: its kind and parameters are data, recorded with the profile (under
``rules``), so a trace is checked by them in any process, without the agent's code
(``chronicle/check/rules.py`` evaluates them).
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
    "Constraint",
    "Rule",
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
_UNTYPED: dict[str, Any] = {}
"""The schema of a parameter whose type cannot be described: any JSON value."""


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
    """``{"name", "description", "parameters"}`` for one tool function. Never raises.

    ``parameters`` is the JSON Schema of the arguments as Chronicle records them: declared
    parameters by name (a first ``self``/``cls`` left out), ``*args`` as a list under its own
    name, ``**kwargs`` as additional properties. A parameter whose annotation does not resolve
    (a class local to a function, under ``from __future__ import annotations``) or that JSON
    Schema cannot describe (a connection object) is listed without a type, and one warning per
    tool names the tool, those parameters and what to do.
    """
    where = _where(fn)
    untyped: dict[str, str] = {}
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        parameters, untyped["*"] = [], f"its signature cannot be read: {exc}"
    if parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    annotations = _annotations(fn, parameters, untyped)
    fields: dict[str, Any] = {}
    extra: Literal["allow", "forbid"] = "allow" if "*" in untyped else "forbid"
    for index, parameter in enumerate(parameters):
        annotation = annotations.get(parameter.name, Any)
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
        field = (annotation, default)  # aliases keep names pydantic would refuse
        reason = _undescribable(field)
        if reason is not None:
            untyped[parameter.name] = reason
            field = (Any, default)
        fields[f"p{index}"] = field
    built = _model_schema(name, extra, fields)
    if isinstance(built, str):  # every field passed alone; together they did not
        untyped["*"] = f"its parameters cannot be described together: {built}"
        built = {"type": "object", "properties": {}}
    schema = built
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    if extra == "forbid":
        schema.pop("additionalProperties", None)
    if untyped and name not in _warned:
        _warned.add(name)
        described = "; ".join(
            reason if param == "*" else f"{param}: {reason}" for param, reason in untyped.items()
        )
        logger.warning(
            "tool %r (%s) is listed in the agent profile with parameters it cannot describe "
            "(%s): annotate them with JSON types (str, int, list[str], a pydantic model, ...) "
            "or list the tools yourself: AgentProfile(..., tools=[...])",
            name,
            where,
            described,
        )
    return {"name": name, "description": _first_paragraph(fn), "parameters": schema}


def _annotations(
    fn: Callable[..., Any], parameters: list[inspect.Parameter], untyped: dict[str, str]
) -> dict[str, Any]:
    """Each parameter's resolved annotation; one that does not resolve is left out (no type)
    and its reason put in ``untyped``."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:
        pass  # some annotation does not resolve: resolve them one at a time
    names = getattr(fn, "__globals__", {})
    found: dict[str, Any] = {}
    for parameter in parameters:
        annotation = parameter.annotation
        if annotation is inspect.Parameter.empty:
            continue
        try:
            found[parameter.name] = typing.get_type_hints(
                _Holder(annotation, names), include_extras=True
            )["value"]
        except Exception as exc:
            untyped[parameter.name] = f"its annotation {annotation!r} does not resolve ({exc})"
    return found


class _Holder:
    """An object whose one annotation is ``value``, resolved in ``names`` by get_type_hints."""

    def __init__(self, annotation: object, names: dict[str, Any]) -> None:
        self.__annotations__ = {"value": annotation}
        self.__globals__ = names


def _undescribable(field: tuple[Any, Any]) -> str | None:
    """Why one parameter's JSON Schema cannot be built, or ``None`` when it can."""
    if field[0] is Any:
        return None
    found = _model_schema("parameter", "forbid", {"p": field})
    return found if isinstance(found, str) else None


def _model_schema(
    name: str, extra: Literal["allow", "forbid"], fields: dict[str, Any]
) -> dict[str, Any] | str:
    """The JSON Schema of a model of ``fields``, or why pydantic cannot build it."""
    try:
        model = pydantic.create_model(
            f"{name}_arguments", __config__=pydantic.ConfigDict(extra=extra), **fields
        )
        schema: dict[str, Any] = model.model_json_schema(by_alias=True)
        json.dumps(schema)
    except Exception as exc:
        text = str(exc).strip()
        return text.splitlines()[0].split(". ")[0].rstrip(".") if text else type(exc).__name__
    return schema


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


CallCheck = Callable[[Sequence[Any]], object]
"""A constraint's predicate: receives a trace's calls in order (``chronicle show``'s
``CallNode`` rows, envelopes only) and returns ``True`` when the rule holds, ``False`` when it
does not, or the calls that break it (empty: it holds)."""


RULE_KINDS = ("before", "never", "only", "at_most")
"""The kinds of rule a ``Rule`` (a ``Constraint`` constructor) records."""
MEASURES = ("tool_calls", "tokens", "cost_usd")
"""What ``Constraint.at_most`` can bound, over a trace's calls: its tool calls (the span's entry,
the agent itself, is not one), its model calls' tokens (every usage bucket) or their cost in US
dollars (priced by the ``genai-prices`` table)."""


def _tool_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(what, f"expects a tool's name (a non-empty string), got {value!r}")
    return value.strip()


_rule_checker: Callable[[Rule, Sequence[Any]], Sequence[str]] | None = None
"""The labels of the calls that break a rule, set by ``chronicle.check.rules`` when it is imported
(which ``import chronicle`` does): the checks read the trace's calls, a layer above this one."""


def use_rule_checker(checker: Callable[[Rule, Sequence[Any]], Sequence[str]]) -> None:
    """Make ``checker`` the one ``Rule.__call__`` asks (``chronicle.check.rules`` does this)."""
    global _rule_checker
    _rule_checker = checker


class Rule:
    """A rule without code: ``kind`` (``before``, ``never``, ``only``, ``at_most``) and its
    parameters, made by the ``Constraint`` constructors and recorded with the profile.

    A ``Rule`` is a constraint's ``check``: called with a trace's calls (``CallNode`` rows) it
    returns the labels of the calls that break it (empty: it holds), as any check does;
    ``chronicle.evaluate`` reads its fuller answer (an ``undetermined`` cost, a reason naming
    the calls) from ``chronicle.check.rules``. ``to_json()`` is its recorded form
    (``{"kind": "before", "first": ..., "then": ...}``) and ``Rule.from_json`` reads it back,
    raising ``ConfigurationError`` for a form that is not a rule.
    """

    __slots__ = ("kind", "params")

    def __init__(self, kind: str, params: Mapping[str, Any]) -> None:
        self.kind, self.params = _rule_form(kind, params)

    @property
    def __name__(self) -> str:  # checks are named by their function's name in reasons
        return self.kind

    def to_json(self) -> dict[str, JsonValue]:
        """``{"kind": ..., **params}``: what the profile records."""
        return {"kind": self.kind, **self.params}

    @classmethod
    def from_json(cls, form: Mapping[str, Any]) -> Rule:
        """The rule ``to_json`` recorded. Raises ``ConfigurationError`` for another form."""
        if not isinstance(form, Mapping):
            raise ConfigurationError("Rule", f"expects a recorded rule (a mapping), got {form!r}")
        params = {k: v for k, v in form.items() if k not in ("kind", "text")}
        return cls(str(form.get("kind")), params)

    def __call__(self, calls: Sequence[Any]) -> list[str]:
        """The labels of the calls (``CallNode`` rows, in call order) that break the rule;
        empty when it holds or cannot be told (``chronicle.evaluate`` says which)."""
        checker = _rule_checker
        if checker is None:  # chronicle.check is imported with the package: never in practice
            raise ConfigurationError(
                "Rule", "has no checker yet: import chronicle (the package) before checking a rule"
            )
        return list(checker(self, calls))

    def describe(self) -> str:
        """The rule in words: a constraint's text when none is given."""
        params = self.params
        if self.kind == "before":
            return f"{params['first']} is called before {params['then']}"
        if self.kind == "never":
            return f"{' or '.join(params['tools'])} is never called"  # type: ignore[arg-type]
        if self.kind == "only":
            return f"only {', '.join(params['tools'])} are called"  # type: ignore[arg-type]
        limit, measure = params["limit"], params["measure"]
        if measure == "cost_usd":
            return f"the model calls cost at most ${limit:g} a request"
        if measure == "tokens":
            return f"the model calls use at most {limit} tokens a request"
        return f"at most {limit} tool calls a request"

    def __repr__(self) -> str:
        return f"Rule({self.kind!r}, {self.params!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rule) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))


def _rule_form(kind: str, params: Mapping[str, Any]) -> tuple[str, dict[str, JsonValue]]:
    """``kind`` and its parameters, checked and in their recorded form."""
    what = f"Constraint.{kind}"
    if kind == "before":
        first = _tool_name(params.get("first"), f"{what} first")
        then = _tool_name(params.get("then"), f"{what} then")
        if first == then:
            raise ConfigurationError(what, f"needs two different tools, got {first!r} twice")
        return kind, {"first": first, "then": then}
    if kind in ("never", "only"):
        tools = params.get("tools")
        if isinstance(tools, str) or not isinstance(tools, Sequence) or not tools:
            raise ConfigurationError(what, f"expects one or more tool names, got {tools!r}")
        return kind, {"tools": list(dict.fromkeys(_tool_name(t, what) for t in tools))}
    if kind == "at_most":
        measure, limit = params.get("measure"), params.get("limit")
        if measure not in MEASURES:
            raise ConfigurationError(what, f"bounds one of {', '.join(MEASURES)}, got {measure!r}")
        whole = measure != "cost_usd"
        number = isinstance(limit, int) if whole else isinstance(limit, (int, float))
        if isinstance(limit, bool) or not number or limit < 0 or limit != limit:  # type: ignore[operator]
            kind_of = "a whole number" if whole else "a number of US dollars"
            raise ConfigurationError(
                what, f"{measure} needs a limit that is {kind_of}, 0 or more, got {limit!r}"
            )
        return kind, {"measure": measure, "limit": limit}
    raise ConfigurationError("Rule", f"kind must be one of {', '.join(RULE_KINDS)}, got {kind!r}")


class Constraint:
    """A constraint with a Python check: ``Constraint("Refunds above 2500 cents need manager
    approval", check=approved_first)``.

    ``text`` is recorded with the profile (it is part of its ``agent_id``), exactly as a plain
    string constraint; ``check`` stays in code. ``chronicle.evaluate`` calls ``check(calls)``
    with a trace's (or a replay's) calls in order, each a ``CallNode`` whose ``envelope`` holds
    what was recorded (``envelope["input"]["raw"]``, ``envelope["output"]``); ``True`` means the
    rule holds, ``False`` that it is broken, a list of calls names the calls that break it
    (empty: it holds), and an exception makes the verdict undetermined.

    The constructors make the common rules without code (their ``check`` is a ``Rule``, whose
    kind and parameters are recorded with the profile, so a trace is checked by them in any
    process); ``text`` replaces the words they write:

    - ``Constraint.before("lookup_policy", "issue_refund")``: every ``issue_refund`` call comes
      after a ``lookup_policy`` call (broken by each one that does not);
    - ``Constraint.never("delete_file")``: no such tool call (broken by each);
    - ``Constraint.only(["search", "lookup"])``: no other tool call (broken by each other one);
    - ``Constraint.at_most("tool_calls", 8)``, ``("tokens", 20_000)``, ``("cost_usd", 0.05)``:
      a request's tool calls, its model calls' tokens or their cost stay within the limit
      (broken by the call that went past it and every one after it; a cost the price table
      cannot tell is ``undetermined`` unless the known part is over already).

    A tool call is a ``@boundary(kind="tool")`` call that ran (the span's entry, the agent
    itself, is not one); a model's request for a tool is not, until the agent runs it.
    """

    __slots__ = ("check", "text")

    def __init__(self, text: str, check: CallCheck | None = None) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ConfigurationError("Constraint text", f"expects a non-empty string, got {text!r}")
        if check is not None and not callable(check):
            raise ConfigurationError(
                "Constraint check",
                f"expects a function of the trace's calls returning True or False, got {check!r}",
            )
        self.text = text.strip()
        self.check = check

    @classmethod
    def before(cls, first: str, then: str, *, text: str | None = None) -> Constraint:
        """Every ``then`` tool call comes after a ``first`` call (``then`` never called: it
        holds)."""
        return cls._of(Rule("before", {"first": first, "then": then}), text)

    @classmethod
    def never(cls, *tools: str, text: str | None = None) -> Constraint:
        """None of ``tools`` is called."""
        return cls._of(Rule("never", {"tools": list(tools)}), text)

    @classmethod
    def only(cls, tools: Sequence[str], *, text: str | None = None) -> Constraint:
        """No tool but ``tools`` is called."""
        if isinstance(tools, str):
            raise ConfigurationError(
                "Constraint.only", f"expects a list of tool names, got {tools!r}: use [{tools!r}]"
            )
        return cls._of(Rule("only", {"tools": list(tools)}), text)

    @classmethod
    def at_most(
        cls,
        measure: Literal["tool_calls", "tokens", "cost_usd"],
        limit: float,
        *,
        text: str | None = None,
    ) -> Constraint:
        """A request's ``tool_calls``, its model calls' ``tokens`` (all their usage buckets) or
        their ``cost_usd`` (by the ``genai-prices`` table) stay within ``limit``."""
        return cls._of(Rule("at_most", {"measure": measure, "limit": limit}), text)

    @classmethod
    def _of(cls, rule: Rule, text: str | None) -> Constraint:
        return cls(rule.describe() if text is None else text, check=rule)

    @property
    def rule(self) -> Rule | None:
        """The rule a constructor made (its check), ``None`` for text or a Python check."""
        return self.check if isinstance(self.check, Rule) else None

    def __repr__(self) -> str:
        if isinstance(self.check, Rule):
            return f"Constraint({self.text!r}, check={self.check!r})"
        return f"Constraint({self.text!r}, check={getattr(self.check, '__name__', self.check)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Constraint) and (self.text, self.check) == (
            other.text,
            other.check,
        )

    def __hash__(self) -> int:
        return hash(self.text)


def _constraints(value: object) -> tuple[Constraint, ...]:
    if isinstance(value, (str, Constraint)) or not isinstance(value, Sequence):
        raise ConfigurationError(
            "AgentProfile constraints",
            f"expects a list of strings or chronicle.Constraint, got {value!r}",
        )
    found: list[Constraint] = []
    for item in value:
        if isinstance(item, Constraint):
            found.append(item)
        elif isinstance(item, str) and item.strip():
            found.append(Constraint(item))
        else:
            raise ConfigurationError(
                "AgentProfile constraints",
                f"expects non-empty strings or chronicle.Constraint, got {item!r}",
            )
    return tuple(found)


class AgentProfile:
    """The agent a service runs, attached to every Span it records (``configure(agent=...)``).

    ``name`` (required) and ``goal`` are plain text; ``instructions`` is a list of rules;
    ``constraints`` a list of rules, each text or a ``Constraint`` with a Python check;
    ``tools`` is a list of ``{"name", "description", "parameters"}`` (a JSON Schema), or
    ``None`` for this process's ``@boundary(kind="tool")`` functions; ``model`` is a model name
    or a mapping (``{"name": "gpt-4o", "temperature": 0.1, "max_tokens": 2048}``); ``metadata``
    holds JSON values such as ``version``, ``team`` or ``environment``; ``tenant_id`` is the
    tenant namespace (also ``CHRONICLE_TENANT_ID``). A bad value raises ``ConfigurationError``
    here; deriving the tools never does.
    """

    __slots__ = (
        "_cache",
        "checks",
        "constraints",
        "goal",
        "instructions",
        "metadata",
        "model",
        "name",
        "tenant_id",
        "tools",
    )

    def __init__(
        self,
        name: str,
        goal: str = "",
        *,
        instructions: Sequence[str] = (),
        constraints: Sequence[str | Constraint] = (),
        tools: Sequence[Mapping[str, object]] | None = None,
        model: str | Mapping[str, object] | None = None,
        metadata: Mapping[str, object] | None = None,
        tenant_id: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(
                "AgentProfile name", f"is required: a non-empty string, got {name!r}"
            )
        if not isinstance(goal, str):
            raise ConfigurationError("AgentProfile goal", f"expects a string, got {goal!r}")
        if tenant_id is not None and (not isinstance(tenant_id, str) or not tenant_id.strip()):
            raise ConfigurationError(
                "AgentProfile tenant_id", f"expects a non-empty string, got {tenant_id!r}"
            )
        self.name = name.strip()
        self.goal = goal.strip()
        self.tenant_id = tenant_id.strip() if tenant_id is not None else None
        self.instructions = _strings(instructions, "instructions")
        self.checks: tuple[Constraint, ...] = _constraints(constraints)
        """The constraints as ``Constraint`` objects (``check`` is ``None`` for plain text)."""
        self.constraints = tuple(c.text for c in self.checks)
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

    @classmethod
    def from_json(cls, form: Mapping[str, Any]) -> AgentProfile:
        """The profile a Span recorded (``to_json()``'s form, ``metadata["chronicle.agent"]``),
        with its tools as recorded. Its constraints are text (a check lives in code, not in the
        recording), but for those a ``Constraint`` constructor made: their ``Rule`` is recorded
        and checks them again (one this version cannot read is left as text). Raises
        ``ConfigurationError`` for a form that is not a profile."""
        if not isinstance(form, Mapping):
            raise ConfigurationError(
                "AgentProfile", f"expects a recorded profile (a mapping), got {form!r}"
            )
        tools = form.get("tools")
        tenant = form.get("tenant_id")
        texts = form.get("constraints")
        rules = recorded_rules(form)
        constraints = [
            rules.get(text) or text
            for text in (texts if isinstance(texts, list) else [])
            if isinstance(text, str)
        ]
        return cls(
            form.get("name"),  # type: ignore[arg-type]  # checked by __init__
            form.get("goal") or "",
            instructions=form.get("instructions") or (),
            constraints=constraints,
            tools=tools if isinstance(tools, list) else [],
            model=form.get("model"),
            metadata=form.get("metadata"),
            tenant_id=tenant if isinstance(tenant, str) else None,
        )

    def __repr__(self) -> str:
        return f"AgentProfile(name={self.name!r}, agent_id={self.agent_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentProfile) and self._content() == other._content()

    def __hash__(self) -> int:
        return hash(self.agent_id)

    @property
    def agent_id(self) -> str:
        """``agt_`` and 20 hex digits of the SHA-256 of the profile's content: the same profile
        (tools included) gets the same id in every process and run."""
        return str(self.to_json()["agent_id"])

    def with_version(self, version: str) -> AgentProfile:
        """A copy with ``metadata["version"] = version``."""
        return self._copy(metadata={**self.metadata, "version": version})

    def with_tenant(self, tenant_id: str) -> AgentProfile:
        """A copy with ``tenant_id``."""
        return self._copy(tenant_id=tenant_id)

    def _copy(self, **changes: Any) -> AgentProfile:
        given: dict[str, Any] = {
            "instructions": self.instructions,
            "constraints": self.checks,
            "tools": self.tools,
            "model": self.model,
            "metadata": self.metadata,
            "tenant_id": self.tenant_id,
        }
        return AgentProfile(self.name, self.goal, **{**given, **changes})

    def to_json(self, *, strict: bool = True) -> dict[str, JsonValue]:
        """The form stored on each Span: ``agent_id``, ``name``, ``goal``, ``instructions``,
        ``constraints`` (their text), ``tools``, ``model`` and ``metadata``, ``tenant_id``
        when one is set, and ``rules`` (``[{"text", "kind", ...parameters}]``) when a
        ``Constraint`` constructor made one of the constraints.

        With ``tools=None`` the tools are those registered when this is called (cached until
        another is registered); building them never raises (see ``tool_schema``). ``strict`` is
        accepted and has no effect.
        """
        version = _tools_version
        cached = self._cache
        if cached is not None and cached[0] == version:
            return cached[1]
        content = self._content()
        digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
        form: dict[str, JsonValue] = {"agent_id": _ID_PREFIX + digest[:_ID_HEX], **content}
        self._cache = (version, form)
        return form

    def span_form(self) -> dict[str, JsonValue]:
        """``to_json()`` for a request span that is opening: never raises (a failure is logged
        and only the name is carried)."""
        try:
            return self.to_json()
        except Exception:
            logger.exception("the agent profile %r could not be built", self.name)
            return {"name": self.name}

    def _content(self) -> dict[str, JsonValue]:
        content: dict[str, JsonValue] = {
            "name": self.name,
            "goal": self.goal,
            "instructions": list(self.instructions),
            "constraints": list(self.constraints),
            "tools": list(self.tools) if self.tools is not None else _derived_tools(),
            "model": self.model,
            "metadata": self.metadata,
        }
        if self.tenant_id is not None:  # absent, not null: profiles without one keep their id
            content["tenant_id"] = self.tenant_id
        rules: list[JsonValue] = [
            {"text": c.text, **c.check.to_json()} for c in self.checks if isinstance(c.check, Rule)
        ]
        if rules:  # absent without one, as tenant_id: profiles of text and code keep their id
            content["rules"] = rules
        return content


def recorded_rules(form: Mapping[str, Any]) -> dict[str, Constraint]:
    """The constraints a recorded profile's ``rules`` make again, by their text; a rule this
    version cannot read is left out (its constraint stays text, for the judge). Never raises."""
    found: dict[str, Constraint] = {}
    rules = form.get("rules") if isinstance(form, Mapping) else None
    for item in rules if isinstance(rules, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("text"), str):
            continue
        try:
            found[item["text"].strip()] = Constraint(item["text"], check=Rule.from_json(item))
        except ConfigurationError:
            continue
    return found


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


def _derived_tools() -> list[JsonValue]:
    return [tool_schema(name, fn) for name, fn in registered_tools().items()]


def resolve_profile(
    agent: AgentProfile | None,
    name: str | None,
    version: str | None,
    tenant_id: str | None = None,
) -> AgentProfile | None:
    """The profile a configuration describes.

    ``agent`` (from code) wins; ``name`` alone makes a profile of that name; ``version`` goes in
    ``metadata["version"]`` and ``tenant_id`` in ``tenant_id`` unless the profile already has
    one. A version with no agent is an error; a tenant with no agent is ignored (a tenant set
    for every service of a deployment, some of which run no agent).
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
    if tenant_id is not None and profile.tenant_id is None:
        profile = profile.with_tenant(tenant_id)
    profile.to_json()
    return profile
