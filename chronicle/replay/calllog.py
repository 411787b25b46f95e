"""What a test reads about the calls a run made: ``LoggedCall`` and the ``CallLog`` that holds
them, with each call's arguments and what it returned.

One log serves a replay (``ReplayRun``: ``call_log()``, ``captured_input()``,
``captured_result()``) and the pytest plugin's recording run, which offers a test the same
reading methods while it records. Writes come from whichever thread or task made the call; each
write is one atomic step (a list append, a dict store), so concurrent writers never corrupt the
log, and an owner that must change the log together with state of its own (a replay matching a
call to its recording) holds its own lock around both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from chronicle.replay.plan import Mode

__all__ = ["CallLog", "LoggedCall"]


class LoggedCall(NamedTuple):
    """One crossing during a replay, in the order it happened (a named tuple: cheap to build).

    ``invocation_index`` is the span-wide number of the recorded call this call stands for
    (``planner#2`` as ``chronicle show`` prints it, whichever call of this replay it was; a call
    with no recording is numbered after the recorded ones): what plan entries and
    ``captured_input`` count. ``recording`` is the same number when a recording served or was
    replaced by the call, ``None`` when there was none (a new call the plan runs). ``service``
    is the service whose span the call was made in: a call made by another service that a call
    was let through to (``ReplayPlan().through``) names it; a call of the replayed span names
    its service when the replay knows it (it read the trace), else ``None``.
    """

    name: str
    invocation_index: int
    mode: Mode
    recording: int | None = None
    service: str | None = None


class CallLog:
    """The calls of one run in the order they started, each call's arguments (by name) and, once
    it returned, its result; keyed by ``(name, invocation_index)``."""

    __slots__ = ("_entries", "_inputs", "_results")

    def __init__(self) -> None:
        self._entries: list[LoggedCall] = []
        self._inputs: dict[tuple[str, int], dict[str, object]] = {}
        self._results: dict[tuple[str, int], object] = {}

    # ---- written as calls happen

    def started(self, entry: LoggedCall, arguments: dict[str, object]) -> None:
        """A call started: logged, with its arguments."""
        self._inputs[(entry.name, entry.invocation_index)] = arguments
        self._entries.append(entry)

    def returned(self, name: str, n: int, result: object) -> None:
        """Call ``name#n`` returned ``result``."""
        self._results[(name, n)] = result

    def extend(self, entries: Iterable[LoggedCall]) -> None:
        """Calls made elsewhere (another service's), logged after the calls so far, without
        arguments or results."""
        self._entries.extend(entries)

    # ---- read by the test

    def entries(self) -> list[LoggedCall]:
        """Every call so far, in the order it started (a copy)."""
        return list(self._entries)

    def called(self, name: str, n: int) -> bool:
        """Whether call ``name#n`` started (its arguments are known)."""
        return (name, n) in self._inputs

    def arguments(self, name: str, n: int) -> dict[str, object]:
        """Call ``name#n``'s arguments; ``KeyError`` if it did not start (the owner says why)."""
        return self._inputs[(name, n)]

    def has_result(self, name: str, n: int) -> bool:
        """Whether call ``name#n`` returned."""
        return (name, n) in self._results

    def result(self, name: str, n: int) -> object:
        """What call ``name#n`` returned; ``KeyError`` if it did not return (yet)."""
        return self._results[(name, n)]

    def seen(self) -> list[str]:
        """The calls so far as ``name#n``, sorted (for an error message naming them)."""
        return sorted({f"{entry.name}#{entry.invocation_index}" for entry in self._entries})
