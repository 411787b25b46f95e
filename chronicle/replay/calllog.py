"""What a test reads about the calls a run made: ``LoggedCall`` and the ``CallLog`` that holds
them, with each call's arguments and what it returned.

One log serves a replay (``ReplayRun``: ``call_log()``, ``captured_input()``,
``captured_result()``) and the pytest plugin's recording run, which offers a test the same
reading methods while it records. Writes come from whichever thread or task made the call; each
write is one atomic step (a list append, a dict store), so concurrent writers never corrupt the
log, and an owner that must change the log together with state of its own (a replay matching a
call to its recording) holds its own lock around both.

A replay that let a call through to another service (``ReplayPlan().through``) also holds that
service's calls (``extend``), with the arguments and results its report carried (JSON form).
They are read by their own name (``charge``) or qualified by the service (``billing/charge``);
where a name is ambiguous (the replayed span recorded or made a call of that name too, or
another service did), the call log shows it qualified and only the qualified name reaches it:
the unqualified one is the replayed span's own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
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
    it returned, its result; keyed by ``(name, invocation_index)``.

    ``recorded``: the names the replayed span recorded (an unqualified name among them is the
    span's own, never another service's call).
    """

    __slots__ = (
        "_entries",
        "_inputs",
        "_recorded",
        "_remote",
        "_remote_inputs",
        "_remote_results",
        "_results",
        "_values_left_out",
    )

    def __init__(self, recorded: Collection[str] = ()) -> None:
        self._entries: list[LoggedCall] = []
        self._inputs: dict[tuple[str, int], dict[str, object]] = {}
        self._results: dict[tuple[str, int], object] = {}
        self._recorded = recorded
        # Another service's calls, by (service, name, n): made, and the values its report held.
        self._remote: set[tuple[str, str, int]] = set()
        self._remote_inputs: dict[tuple[str, str, int], dict[str, object]] = {}
        self._remote_results: dict[tuple[str, str, int], object] = {}
        self._values_left_out: set[str] = set()  # services whose report left values out

    # ---- written as calls happen

    def started(self, entry: LoggedCall, arguments: dict[str, object]) -> None:
        """A call started: logged, with its arguments."""
        self._inputs[(entry.name, entry.invocation_index)] = arguments
        self._entries.append(entry)

    def returned(self, name: str, n: int, result: object) -> None:
        """Call ``name#n`` returned ``result``."""
        self._results[(name, n)] = result

    def extend(
        self,
        entries: Iterable[LoggedCall],
        inputs: Mapping[tuple[str, int], dict[str, object]] | None = None,
        results: Mapping[tuple[str, int], object] | None = None,
        *,
        values_left_out: bool = False,
    ) -> None:
        """Calls made elsewhere (another service's, each entry naming it in ``service``),
        logged after the calls so far, with the ``inputs`` and ``results`` that service reported
        (JSON form, by ``(name, n)``). ``values_left_out``: its report left some out (its size
        bound), which a read of a missing one says."""
        added = list(entries)
        self._entries.extend(added)
        services = {entry.service for entry in added if entry.service is not None}
        for entry in added:
            if entry.service is not None:
                self._remote.add((entry.service, entry.name, entry.invocation_index))
        if len(services) == 1:
            (service,) = services
            for (name, n), arguments in (inputs or {}).items():
                self._remote_inputs[(service, name, n)] = arguments
            for (name, n), result in (results or {}).items():
                self._remote_results[(service, name, n)] = result
            if values_left_out:
                self._values_left_out.add(service)

    # ---- read by the test

    def entries(self) -> list[LoggedCall]:
        """Every call so far, in the order it started (a copy), as made: another service's
        calls under their own names (``shown()`` qualifies the ambiguous ones)."""
        return list(self._entries)

    def shown(self) -> list[LoggedCall]:
        """``entries()`` with another service's calls named ``service/name`` where the name is
        ambiguous (see ``qualified``): every name shown reaches its call (``arguments``)."""
        if not self._remote:
            return list(self._entries)
        return [
            entry
            if entry.service is None
            else entry._replace(name=self.qualified(entry.service, entry.name))
            for entry in self._entries
        ]

    def qualified(self, service: str, name: str) -> str:
        """How another service's call ``name`` is named here: ``service/name`` when the
        replayed span recorded or made a call of that name too, or another service made one;
        else ``name``."""
        if self._ambiguous(service, name):
            return f"{service}/{name}"
        return name

    def _ambiguous(self, service: str, name: str) -> bool:
        if name in self._recorded or any(
            entry.service is None and entry.name == name for entry in self._entries
        ):
            return True
        return any(s != service and made == name for s, made, _ in self._remote)

    def _remote_key(self, name: str, n: int) -> tuple[str, str, int] | None:
        """The other service's call ``name#n`` names (``billing/charge`` or an unambiguous
        ``charge``), or ``None``: the name is the replayed span's own (or no call)."""
        if not self._remote or (name, n) in self._inputs:
            return None
        service, slash, rest = name.partition("/")
        if slash and (service, rest, n) in self._remote:
            return service, rest, n
        found = [key for key in self._remote if key[1] == name and key[2] == n]
        if len(found) == 1 and not self._ambiguous(found[0][0], name):
            return found[0]
        return None

    def called(self, name: str, n: int) -> bool:
        """Whether call ``name#n`` started (its arguments are known)."""
        if (name, n) in self._inputs:
            return True
        key = self._remote_key(name, n)
        return key is not None and key in self._remote_inputs

    def arguments(self, name: str, n: int) -> dict[str, object]:
        """Call ``name#n``'s arguments; ``KeyError`` if it did not start (the owner says why)."""
        key = self._remote_key(name, n)
        if key is not None:
            return self._remote_inputs[key]
        return self._inputs[(name, n)]

    def has_result(self, name: str, n: int) -> bool:
        """Whether call ``name#n`` returned."""
        if (name, n) in self._results:
            return True
        key = self._remote_key(name, n)
        return key is not None and key in self._remote_results

    def result(self, name: str, n: int) -> object:
        """What call ``name#n`` returned; ``KeyError`` if it did not return (yet)."""
        key = self._remote_key(name, n)
        if key is not None:
            return self._remote_results[key]
        return self._results[(name, n)]

    def made_elsewhere(self, name: str, n: int) -> str | None:
        """Why call ``name#n``, made in another service, has no values here, or ``None`` when
        it is not another service's call: that service's report left them out (its size
        bound), or carried none (an older Chronicle there)."""
        key = self._remote_key(name, n)
        if key is None or key in self._remote_inputs:
            return None
        service = key[0]
        why = (
            "left its values out (the report's size bound)"
            if service in self._values_left_out
            else "carried no values for it (run the same Chronicle version in both services)"
        )
        return (
            f"call {n} of {name!r} was made in {service}, whose replay report {why}; read it "
            "in that service's log, or assert on what the call to that service returned"
        )

    def seen(self) -> list[str]:
        """The calls so far as ``name#n``, sorted (for an error message naming them)."""
        return sorted({f"{entry.name}#{entry.invocation_index}" for entry in self.shown()})
