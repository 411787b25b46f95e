"""Hooks: code that watches, patches or stops every boundary call (governance stands on this).

A hook has four events, each optional:

- ``enter(call)`` before the call runs. It may return a mapping of keyword-argument patches
  (merged in registration order; a later hook's ``call.arguments`` already holds the earlier
  hooks' patches), or raise ``AbortCall`` to stop the call. A hook's other events get the same
  ``CallInfo`` object its ``enter`` got.
- ``crossing(call, result)`` after the call returned, with the live result.
- ``record(call, envelope)`` with the ``agentplane_primitives.Envelope`` as it is sent.
- ``leave(call)`` after everything, always, once ``enter`` succeeded (whether the call returned,
  raised, or a later hook stopped it).

Hooks run in registration order: the session's registry inherits ``default_hooks`` (those first),
then its own. A hook that raises is logged and ignored, unless ``hooks_fail_call_on_error`` is on;
``AbortCall`` (and subclasses) and ``BaseException``s that are not ``Exception``s always
propagate. Hooks run when recording is off, and do not run for calls a replay stubs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import JsonValue
from typing_extensions import override

from chronicle.errors import AbortCall
from chronicle.recording.capture import json_form
from chronicle.redaction import redact_secrets

if TYPE_CHECKING:
    from agentplane_primitives.models import Envelope

logger = logging.getLogger("chronicle")

Kind = Literal["tool", "llm"]


@dataclass(frozen=True)
class CallInfo:
    """One boundary call, as hooks see it.

    ``arguments`` is the JSON form of the call's arguments by name, before redaction (hooks run
    in the agent's own process and may need the real values). ``invocation_index`` counts calls
    of this boundary name in the span from 1; ``attempt`` is 1 unless inside ``attempt(n)``.
    The ids are ``None`` only when no request span could be opened.
    """

    name: str
    kind: Kind
    arguments: Mapping[str, JsonValue]
    invocation_index: int
    attempt: int
    trace_id: str | None
    span_id: str | None
    envelope_id: str | None
    provider: str | None = None
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)

    def with_arguments(self, arguments: Mapping[str, JsonValue]) -> CallInfo:
        """A copy with ``arguments`` replaced (after a hook patched them)."""
        return replace(self, arguments=arguments)


class Hook:
    """Base class for hooks: override the events you need; the others do nothing."""

    def enter(self, call: CallInfo) -> Mapping[str, object] | None:
        """Before the call. Return keyword-argument patches, ``None``, or raise ``AbortCall``."""
        return None

    def crossing(self, call: CallInfo, result: object) -> None:
        """After the call returned ``result`` (the live value, not redacted)."""

    def record(self, call: CallInfo, envelope: Envelope) -> None:
        """With the envelope as it is sent to the control plane (redacted)."""

    def leave(self, call: CallInfo) -> None:
        """Last, always, once ``enter`` succeeded."""


class FunctionHook(Hook):
    """A hook made of plain functions, one per event you want."""

    def __init__(
        self,
        enter: Callable[[CallInfo], Mapping[str, object] | None] | None = None,
        *,
        crossing: Callable[[CallInfo, object], None] | None = None,
        record: Callable[[CallInfo, Envelope], None] | None = None,
        leave: Callable[[CallInfo], None] | None = None,
    ) -> None:
        self._enter, self._crossing, self._record, self._leave = enter, crossing, record, leave

    @override
    def enter(self, call: CallInfo) -> Mapping[str, object] | None:
        return self._enter(call) if self._enter is not None else None

    @override
    def crossing(self, call: CallInfo, result: object) -> None:
        if self._crossing is not None:
            self._crossing(call, result)

    @override
    def record(self, call: CallInfo, envelope: Envelope) -> None:
        if self._record is not None:
            self._record(call, envelope)

    @override
    def leave(self, call: CallInfo) -> None:
        if self._leave is not None:
            self._leave(call)

    def wants_record(self) -> bool:
        """Whether ``record`` was given (so the envelope must be built for it)."""
        return self._record is not None


class HookRegistry:
    """An ordered set of hooks; iterating yields the parent's hooks first, then this one's."""

    def __init__(self, parent: HookRegistry | None = None) -> None:
        self._parent = parent
        self._hooks: tuple[Hook, ...] = ()
        self._lock = threading.Lock()

    def register(self, hook: Hook) -> Hook:
        """Add ``hook`` at the end (a hook already registered is not added twice). Returns it."""
        if not isinstance(hook, Hook):
            raise TypeError(
                f"register() takes a chronicle.Hook, got {type(hook).__name__}; subclass Hook "
                "or wrap functions in chronicle.FunctionHook(enter=...)"
            )
        with self._lock:
            if hook not in self._hooks:
                self._hooks = (*self._hooks, hook)
        return hook

    def unregister(self, hook: Hook) -> None:
        """Remove ``hook``; removing one that is not registered does nothing."""
        with self._lock:
            self._hooks = tuple(h for h in self._hooks if h is not hook)

    def clear(self) -> None:
        """Remove every hook of this registry (not the parent's)."""
        with self._lock:
            self._hooks = ()

    def snapshot(self) -> tuple[Hook, ...]:
        """The hooks in the order they run, as one tuple (cheap; taken once per call)."""
        own = self._hooks
        if self._parent is None:
            return own
        inherited = self._parent.snapshot()
        return inherited + own if own else inherited

    def __iter__(self) -> Iterator[Hook]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        return len(self.snapshot())

    def __bool__(self) -> bool:
        return bool(self._hooks) or (self._parent is not None and bool(self._parent))

    def __contains__(self, hook: object) -> bool:
        return hook in self.snapshot()


default_hooks = HookRegistry()
"""Hooks every session inherits. Register governance here."""


def wants_record(hook: Hook) -> bool:
    """Whether ``hook`` implements ``record`` (so the envelope must be built for it)."""
    if isinstance(hook, FunctionHook):
        return hook.wants_record()
    return type(hook).record is not Hook.record


class Accepts(Protocol):
    """Whether a call takes a patch: ``(name)`` for the name alone, ``(name, value)`` for the
    value too (``ArgumentBinder.accepts``)."""

    def __call__(self, name: str, value: object = ..., /) -> bool:
        """``True`` if the patch of ``name`` (to ``value``, when given) can be applied."""
        ...


class HookRunner:
    """Runs one call's hooks with the error rules above. One per call, on the call's thread."""

    __slots__ = ("call", "entered", "fail_on_error", "hooks", "redact")

    def __init__(
        self,
        hooks: tuple[Hook, ...],
        call: CallInfo,
        fail_on_error: bool,
        redact: Callable[[str], str] = redact_secrets,
    ) -> None:
        self.hooks = hooks
        self.call = call
        self.fail_on_error = fail_on_error
        self.redact = redact
        """Masks secrets in a failing hook's exception text before it is logged."""
        self.entered: list[tuple[Hook, CallInfo]] = []
        """Each hook whose ``enter`` succeeded, with the ``CallInfo`` it was given: its other
        events get that same object (a hook may key its own state on it)."""

    def enter(self, accepts: Accepts | None = None) -> dict[str, object]:
        """Run every ``enter``; returns the merged patches. ``AbortCall`` propagates.

        ``accepts(name)`` says whether the function takes an argument of that name, and
        ``accepts(name, value)`` whether that value can be applied (``*args`` takes a list): a
        patch of any other name or value (or a key that is not a string, or a mapping that
        cannot be read) is reported and left out (raised as a ``TypeError`` with
        ``hooks_fail_call_on_error``).
        """
        patches: dict[str, object] = {}
        for hook in self.hooks:
            seen = self.call
            try:
                patch = hook.enter(seen)
            except AbortCall:
                raise
            except Exception as exc:
                self._failed(hook, "enter", exc)
                continue
            self.entered.append((hook, seen))
            if patch is None:
                continue
            valid = self._valid_patch(hook, patch, accepts)
            if valid:
                patches.update(valid)
                # Later hooks see the call as it will run: the patched arguments.
                patched = json_form(valid).value
                if isinstance(patched, dict):
                    self.call = self.call.with_arguments({**self.call.arguments, **patched})
        return patches

    def _valid_patch(self, hook: Hook, patch: object, accepts: Accepts | None) -> dict[str, object]:
        """The entries of ``patch`` that can be applied; the rest reported once for the hook."""
        try:
            if not isinstance(patch, Mapping):
                raise TypeError(f"enter returns a mapping or None, got {type(patch).__name__}")
            items = list(patch.items())
        except Exception as exc:  # a mapping whose keys() or items() raises
            self._failed(hook, "enter (its patch could not be read)", exc)
            return {}
        valid: dict[str, object] = {}
        rejected: list[str] = []
        for key, value in items:
            if not isinstance(key, str):
                rejected.append(f"{key!r} (not a string)")
            elif accepts is not None and not accepts(key):
                rejected.append(f"{key!r} (not an argument of {self.call.name!r})")
            elif accepts is not None and not accepts(key, value):
                rejected.append(f"{key!r} (*{key} takes a list, got {type(value).__name__})")
            else:
                valid[key] = value
        if rejected:
            self._failed(
                hook, "enter (its patch)", TypeError(f"invalid patch of {', '.join(rejected)}")
            )
        return valid

    def crossing(self, result: object) -> None:
        """Run every entered hook's ``crossing`` with the live result."""
        for hook, call in self.entered:
            try:
                hook.crossing(call, result)
            except AbortCall:
                raise
            except Exception as exc:
                self._failed(hook, "crossing", exc)

    def record(self, envelope: Envelope) -> None:
        """Run ``record`` of the entered hooks that implement it."""
        for hook, call in self.entered:
            if not wants_record(hook):
                continue
            try:
                # A copy each: a hook must not change (or break the encoding of) what is sent.
                hook.record(call, envelope.model_copy(deep=True))
            except AbortCall:
                raise
            except Exception as exc:
                self._failed(hook, "record", exc)

    def leave(self) -> None:
        """Run every entered hook's ``leave``; always, once ``enter`` succeeded."""
        for hook, call in self.entered:
            try:
                hook.leave(call)
            except AbortCall:
                raise
            except Exception as exc:
                self._failed(hook, "leave", exc)

    def wants_record(self) -> bool:
        """Whether an entered hook implements ``record``."""
        return any(wants_record(hook) for hook, _ in self.entered)

    def _failed(self, hook: Hook, event: str, exc: Exception) -> None:
        if self.fail_on_error:
            raise exc
        try:
            text = self.redact(str(exc))  # an exception's text may quote a secret
        except Exception:
            text = "<its message could not be read>"
        logger.warning(
            "hook %s failed in %s for %r and was ignored (%s: %s); fix the hook, or "
            "set hooks_fail_call_on_error=True to make such failures fail the call",
            type(hook).__name__,
            event,
            self.call.name,
            type(exc).__name__,
            text[:1000],
        )
