"""What every framework instrumentor shares: patches undone by their twin, tools as boundaries.

``Instrumentation(package, pip_name)`` is one framework's set of patches. ``instrument()`` of a
framework module calls ``begin()`` (which imports the framework, or raises a one-line
``ImportError`` naming the package to install), then ``patch(owner, attribute, replacement)``
for each method it replaces; ``uninstrument()`` calls ``undo()``, which puts every original
back. Both are idempotent and process-wide, as OpenTelemetry's instrumentors are: ``begin()``
returns ``False`` when the framework is instrumented already.

``call_tool(name, arguments, run, ...)`` (and ``call_tool_async``) make one tool invocation a
``tool`` boundary named after the tool, recorded with ``arguments`` (a dict of the tool's own
arguments by name): ``run(arguments)`` is what the framework would have done, called with the
arguments the boundary hands on. The framework's context object (a ``RunContext``, a
``ToolContext``, LangChain's callbacks) stays in ``run``'s closure, so it is never recorded; the
instrumentor names what it left out (``left_out``), and the envelope's metadata says so
(``chronicle.left_out``). In a replay a stubbed tool returns its recorded result without calling
``run``; a cut-point (``ReplayPlan().run(name)``) calls it.

A boundary spec is built once per (tool name, sync or async, metadata) and kept, so a tool
called a thousand times reads its signature once.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any

from pydantic import JsonValue

from chronicle.recording.boundary import BoundarySpec

__all__ = [
    "LEFT_OUT",
    "Instrumentation",
    "call_tool",
    "call_tool_async",
    "is_boundary",
]

LEFT_OUT = "chronicle.left_out"
"""Envelope metadata: the names of a tool's parameters an instrumentor did not record (the
framework's context object), so a reader knows the input is not the whole call."""

FRAMEWORK = "chronicle.framework"
"""Envelope metadata: the framework whose instrumentor made the boundary (``openai-agents``)."""

_RUN: contextvars.ContextVar[Callable[[dict[str, Any]], Any]] = contextvars.ContextVar(
    "chronicle_tool_run"
)
_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "chronicle_tool_running", default=None
)
"""The tool whose body is running here: a same-named tool invocation inside it (the Agents SDK's
``FunctionTool`` of an MCP tool reaching ``ClientSession.call_tool``) is the same tool run, seen
by a second instrumentor, and is not recorded twice."""


class Instrumentation:
    """One framework's patches, applied by ``instrument_<name>()`` and undone by its twin."""

    def __init__(
        self, package: str, pip_name: str, *, label: str | None = None, name: str | None = None
    ) -> None:
        """``package`` is the module to import (``agents``), ``pip_name`` what to install
        (``openai-agents``), ``label`` the framework's name in messages (defaults to it),
        ``name`` the ``instrument_<name>()`` the messages name (defaults to the package's top).
        """
        self.package = package
        self.name = name or package.split(".")[0]
        self.pip_name = pip_name
        self.label = label or pip_name
        self._originals: list[tuple[object, str, object, bool]] = []
        self._lock = threading.RLock()
        self._active = False

    @property
    def active(self) -> bool:
        """Whether the instrumentation is in effect."""
        return self._active

    def require(self) -> ModuleType:
        """The framework's package, imported; a one-line ``ImportError`` naming it if absent."""
        try:
            return importlib.import_module(self.package)
        except ImportError:
            raise ImportError(
                f"chronicle.instrument_{self.name}() needs {self.label}: "
                f"pip install {self.pip_name}"
            ) from None

    def begin(self) -> bool:
        """Check the framework is installed; ``False`` when it is instrumented already.

        The caller holds ``lock`` from here until its patches are applied.
        """
        self.require()
        if self._active:
            return False
        self._active = True
        return True

    @property
    def lock(self) -> threading.RLock:
        """Held around ``begin`` and the patches that follow, and around ``undo``."""
        return self._lock

    def patch(
        self, owner: object, attribute: str, make: Callable[[Any], Any], *, optional: bool = False
    ) -> bool:
        """Replace ``owner.attribute`` (a class or module attribute) by ``make(original)``.

        With ``optional=True`` a missing attribute (an older or newer framework) is skipped and
        ``False`` returned; otherwise it raises ``AttributeError`` naming it.
        """
        sentinel = object()
        own = vars(owner).get(attribute, sentinel) if hasattr(owner, "__dict__") else sentinel
        original = getattr(owner, attribute, sentinel)
        if original is sentinel:
            if optional:
                return False
            raise AttributeError(
                f"{self.label}: {getattr(owner, '__name__', owner)!s} has no {attribute!r}; "
                f"this version of {self.pip_name} is not supported, please report it"
            )
        # Patch through the raw class attribute (a staticmethod, classmethod, property) when the
        # owner defines it, so the replacement wraps what the class really holds.
        raw = own if own is not sentinel else original
        setattr(owner, attribute, make(raw))
        self._originals.append((owner, attribute, own, own is not sentinel))
        return True

    def undo(self) -> bool:
        """Put every original back, newest first; ``False`` when nothing was instrumented."""
        with self._lock:
            if not self._active:
                return False
            for owner, attribute, original, owned in reversed(self._originals):
                if owned:
                    setattr(owner, attribute, original)
                else:  # it was inherited: remove ours so the base class's shows again
                    with contextlib.suppress(AttributeError):
                        delattr(owner, attribute)
            self._originals.clear()
            self._active = False
            return True


def _run_sync(**arguments: Any) -> Any:
    return _RUN.get()(arguments)


async def _run_async(**arguments: Any) -> Any:
    return await _RUN.get()(arguments)


def _running(name: str, run: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    def running(arguments: dict[str, Any]) -> Any:
        token = _RUNNING.set(name)
        try:
            return run(arguments)
        finally:
            _RUNNING.reset(token)

    return running


def _running_async(
    name: str, run: Callable[[dict[str, Any]], Awaitable[Any]]
) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    async def running(arguments: dict[str, Any]) -> Any:
        token = _RUNNING.set(name)
        try:
            return await run(arguments)
        finally:
            _RUNNING.reset(token)

    return running


_specs: dict[tuple[str, bool, tuple[tuple[str, str], ...]], Callable[..., Any]] = {}
_specs_lock = threading.Lock()


def _wrapper(
    name: str, is_async: bool, metadata: Mapping[str, JsonValue] | None
) -> Callable[..., Any]:
    key = (
        name,
        is_async,
        tuple(sorted((k, repr(v)) for k, v in (metadata or {}).items())),
    )
    wrapper = _specs.get(key)
    if wrapper is None:
        with _specs_lock:
            wrapper = _specs.get(key)
            if wrapper is None:
                spec = BoundarySpec(
                    _run_async if is_async else _run_sync,
                    name,
                    "tool",
                    metadata=metadata,
                    is_async=is_async,
                )
                spec.entry = None  # the framework's tool, not this module's function
                wrapper = _specs[key] = spec.wrapper()
    return wrapper


def _metadata(
    framework: str, left_out: tuple[str, ...], extra: Mapping[str, JsonValue] | None
) -> dict[str, JsonValue]:
    metadata: dict[str, JsonValue] = {FRAMEWORK: framework}
    if left_out:
        metadata[LEFT_OUT] = list(left_out)
    if extra:
        metadata.update(extra)
    return metadata


def call_tool(
    name: str,
    arguments: Mapping[str, Any],
    run: Callable[[dict[str, Any]], Any],
    *,
    framework: str,
    left_out: tuple[str, ...] = (),
    metadata: Mapping[str, JsonValue] | None = None,
) -> Any:
    """Run one sync tool invocation as the ``tool`` boundary ``name`` (see the module docstring).

    Inside the body of a tool of the same name (another instrumentor's boundary of this same
    run), ``run`` is called as it is: one tool run, one boundary.
    """
    if _RUNNING.get() == name:
        return run(dict(arguments))
    wrapper = _wrapper(name, False, _metadata(framework, left_out, metadata))
    token = _RUN.set(_running(name, run))
    try:
        return wrapper(**arguments)
    finally:
        _RUN.reset(token)


async def call_tool_async(
    name: str,
    arguments: Mapping[str, Any],
    run: Callable[[dict[str, Any]], Awaitable[Any]],
    *,
    framework: str,
    left_out: tuple[str, ...] = (),
    metadata: Mapping[str, JsonValue] | None = None,
) -> Any:
    """``call_tool`` for a tool the framework awaits."""
    if _RUNNING.get() == name:
        return await run(dict(arguments))
    wrapper = _wrapper(name, True, _metadata(framework, left_out, metadata))
    token = _RUN.set(_running_async(name, run))
    try:
        return await wrapper(**arguments)
    finally:
        _RUN.reset(token)


def is_boundary(fn: object) -> bool:
    """Whether ``fn`` is already a Chronicle boundary (``@chronicle.boundary`` under the
    framework's decorator): then the instrumentor leaves its calls to it, recording each once."""
    seen = 0
    while fn is not None and seen < 16:
        if getattr(fn, "__chronicle_boundary__", None) is not None:
            return True
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
        seen += 1
    return False
