"""``ReplayPlan``: which recorded calls are stubbed, which run live (the cut-points), and which
changes the test expects.

A plan is a set of entries, each naming a boundary and optionally one invocation of it (``n``,
the span-wide number ``chronicle show`` prints: ``planner#2`` is the second ``planner`` the
recorded span started, whichever call made it; a call with no recording is numbered after the
recorded ones):

- ``stub(name, n)``: return the recording (the default for every call);
- ``run(name, n)``: run the real code, a cut-point;
- ``expect_change(name, n)``: this call is expected to diverge from its recording (its input
  changed because of the fix upstream, or it is no longer made), so a strict replay does not fail
  on it. It says nothing about the mode: the call is still stubbed unless a rule runs it.

One call has one spelling everywhere: ``"planner#2"`` is ``("planner", 2)`` in every method
here (``run("search#2")``, ``through("http POST 127.0.0.1#1")``, ``override("search#1",
output=...)``), as ``chronicle show``, the call log, diffs and failure reports print it. The rule
(``call_target``): when ``n`` is not given, a ``#`` followed by digits at the end of the name is
the invocation; anything else is the name as it is. A boundary whose own name contains ``#`` is
still reachable: ``run("a#b")`` names it (no digits after the ``#``), and giving ``n`` takes the
name as written (``run("step#2", 1)`` is call 1 of a boundary named ``step#2``).

A plan can also **fork** from one decision ("what if"):

- ``override(name, n, output=...)`` / ``override(name, n, error=Exc(...))``: serve this value
  (rebuilt as a recorded one is: the SDK type, the return annotation) or raise this error instead
  of the recording; logged with mode ``override``;
- ``run(name, n, model="...")``: run that ``llm`` call of a wrapped client live with its
  ``model`` argument replaced; logged with mode ``live``;
- ``live_after(name, n)``: that call and every call after it in the recording's order run live
  (mode ``live``); what comes before is served from the recording. The calls enclosing the
  anchor run (mode ``run``), as for any cut-point; a rule that stubs one of them is a plan error.

A plan can **let a call through** to the service it went to: ``through("http POST billing", 1)``
(or ``through("billing")``, every call the recording made to that service) sends the outbound
HTTP call for real, carrying the replay, and the service answers it by replaying its own recorded
span with its own code (``replay/remote.py``). Its other entries travel with it: an entry naming a
boundary the service recorded applies there (``run("charge", 1)``), and ``"billing/charge"``
applies only in the service named ``billing``.

What follows a fork is allowed to differ: every divergence of a call made after the first fork
call, and every unused recording that comes after it in the recording's order, is reported with
``expected=True``, so a strict replay does not fail on it. Divergences before the fork are
errors as usual.

A call can only be made by its parent, so a call whose recorded subtree holds a cut-point runs
live too (``run("web_search", 2)`` runs the ``researcher`` call that made ``web_search#2``),
unless a rule names that very call. An entry that matches no call and no recording is itself a
divergence (a misspelt name, say).

``record_new()`` keeps a fix's new calls (``new_episodes``, as VCR.py names it): a call with no
recording runs live instead of raising ``ReplayMismatchError``, and is recorded, in its place in
the call tree, into the run's new trace (``record=True``) or the incident file replayed
(``replay(path)``, the pytest plugin's ``--chronicle-record-mode=new_episodes``); recorded calls
the run no longer makes are dropped from that file, reported as expected ``unused``
divergences. Recorded calls are served as always: one whose input changed is still a divergence.
"""

from __future__ import annotations

import re
from typing import Literal

Mode = Literal["stub", "run", "override", "live"]
"""How a call was made: served from the recording, run live (a cut-point), served a value the
plan gives (a fork), or run live because of a fork (another model, or after ``live_after``)."""

_UNSET = object()
_INDEX = re.compile(r"#([0-9]+)\Z")


def call_target(name: str, n: int | None = None) -> tuple[str, int | None]:
    """The call ``name`` and ``n`` name, as ``(name, n)``: ``call_target("search#2")`` is
    ``("search", 2)``, the spelling ``chronicle show`` prints.

    Only without ``n`` is a ``#`` followed by digits at the end of ``name`` read as the
    invocation; with ``n`` given, ``name`` is taken as written (the way to name a boundary whose
    own name ends in ``#`` and digits). A name with any other ``#`` (``"a#b"``) is a name.
    Anything that is not a non-empty string is returned unchanged, for the caller to refuse.
    """
    if n is None and isinstance(name, str):
        found = _INDEX.search(name)
        if found is not None and found.start() > 0:
            return name[: found.start()], int(found.group(1))
    return name, n


class Override:
    """What ``override`` serves in place of a recording: an output, or an error to raise."""

    __slots__ = ("error", "output")

    def __init__(self, output: object, error: BaseException | None) -> None:
        self.output, self.error = output, error


class ReplayPlan:
    """Rules by boundary name and invocation: ``ReplayPlan().run("delete_file", 1)``.

    Every call is stubbed unless a rule says otherwise. A rule for one invocation (``n``) beats a
    rule for every invocation of that name; the later of two rules for the same target wins.
    Methods return the plan, so rules chain.
    """

    def __init__(self) -> None:
        self._rules: dict[tuple[str, int | None], Mode] = {}
        self._expected: set[tuple[str, int | None]] = set()
        self.overrides: dict[tuple[str, int], Override] = {}
        """``override`` entries by call."""
        self.models: dict[tuple[str, int | None], str] = {}
        """``run(name, n, model=...)`` entries: the model each call is sent to instead."""
        self.anchor: tuple[str, int] | None = None
        """``live_after``: the call from which everything runs live."""
        self.forks = False
        """Whether any entry forks (``override``, ``model=``, ``live_after``): a replay checks
        nothing more on its stub path unless it does."""
        self.through_calls: set[tuple[str, int | None]] = set()
        """``through`` entries: a boundary (and call), or a service name with ``n`` ``None``."""
        self._driven: set[tuple[str, int | None]] = set()
        self.records_new = False
        """``record_new``: calls with no recording run live and are recorded."""

    def record_new(self) -> ReplayPlan:
        """Run every call that has no recording live and record it (a fix's new calls,
        ``new_episodes``): into the run's new trace with ``record=True``, else into the incident
        file replayed (``chronicle.replay(path)`` rewrites it atomically when the block ends
        without an error; ``run.episodes()`` is what it writes, for any source). Recorded calls are
        still served; the ones the run no longer makes are dropped from the file (reported as
        expected ``unused`` divergences). A plan that forks (``override``, ``model=``,
        ``live_after``) cannot record: what it serves is not what the code does."""
        self.records_new = True
        return self

    def stub(self, name: str, n: int | None = None) -> ReplayPlan:
        """Return the recording for ``name`` (call ``n`` only, or every call; ``"name#n"``
        names one call too, as everywhere in a plan)."""
        return self._add(name, n, "stub")

    def run(self, name: str, n: int | None = None, *, model: str | None = None) -> ReplayPlan:
        """Run ``name`` live (call ``n`` only, or every call), keeping its input and result.

        ``model``: for an ``llm`` call of a wrapped client, send it to this model instead (its
        ``model`` argument replaced, the rest as the code makes it now); logged as ``live``.
        """
        if model is not None:
            if not isinstance(model, str) or not model:
                raise TypeError(f"model is a non-empty model name, got {model!r}")
            name, n = self._check(name, n)
            self.models[(name, n)] = model
            self.forks = True
        return self._add(name, n, "run")

    def drive(self, name: str, n: int | None = None) -> ReplayPlan:
        """Run ``name`` live as the replay's entry (call ``n`` only, or every call): its code
        runs, as with ``run``, to drive the calls it makes, but a connection its own body makes
        outside a boundary is not the plan's, and is reported as one made at the top level
        would be (see ``replay(network=...)``). ``chronicle replay`` and ``--chronicle-corpus``
        call their entry so."""
        name, n = self._check(name, n)
        self._add(name, n, "run")
        self._driven.add((name, n))
        return self

    def drives(self, name: str, n: int) -> bool:
        """Whether call ``n`` of ``name`` runs only as the replay's entry (``drive``)."""
        driven = self._driven
        return bool(driven) and ((name, n) in driven or (name, None) in driven)

    def override(
        self,
        name: str,
        n: int | None = None,
        *,
        output: object = _UNSET,
        error: BaseException | None = None,
    ) -> ReplayPlan:
        """Serve ``output``, or raise ``error``, for call ``n`` of ``name`` instead of its
        recording ("what if the refund API had timed out": ``error=TimeoutError(...)``).

        A JSON-like ``output`` (dicts, lists, text, numbers) is rebuilt as a recorded output is
        (a wrapped client's SDK type, the boundary's return annotation); any other object is
        served as it is. The call runs no code; it is logged with mode ``override``.
        ``override("name#n", output=...)`` names the call as well.
        """
        name, n = self._check(name, n)
        if n is None:
            raise TypeError(
                f"override names one call: give n, as in override({name!r}, 1, ...) or "
                f"override('{name}#1', ...)"
            )
        if (output is _UNSET) == (error is None):
            raise TypeError(f"override({name!r}, {n}) takes one of output= or error=")
        if error is not None and not isinstance(error, BaseException):
            raise TypeError(f"error= is an exception instance, got {error!r}")
        self.overrides[(name, n)] = Override(None if output is _UNSET else output, error)
        self.forks = True
        return self

    def live_after(self, name: str, n: int | None = None) -> ReplayPlan:
        """Serve every call before call ``n`` of ``name`` (in the recording's order) from the
        recording, and run that call and every call after it live: reproduce the exact prefix,
        then let the agent go on. ``live_after("name#n")`` names the call as well."""
        name, n = self._check(name, n)
        if n is None:
            raise TypeError(
                f"live_after names one call: give n, as in live_after({name!r}, 1) or "
                f"live_after('{name}#1')"
            )
        self.anchor = (name, n)
        self.forks = True
        return self

    def through(self, name: str, n: int | None = None) -> ReplayPlan:
        """Let call ``n`` of the outbound HTTP boundary ``name`` (every call, without ``n``)
        through to the service it went to, carrying this replay: the service runs its own code
        with its recorded span serving its boundaries (it must accept replays: see
        ``replay/remote.py``), and its call log and divergences join this run's.

        ``name`` may also be the service's name (``through("billing")``): every call the
        recording made to a span of that service. Like ``run``, the call is made live.
        ``through("http POST billing#1")`` names call 1 as well.
        """
        name, n = self._check(name, n)
        self._add(name, n, "run")
        self.through_calls.add((name, n))
        return self

    @property
    def lets_through(self) -> bool:
        """Whether any ``through`` entry lets a call through to another service."""
        return bool(self.through_calls)

    def expect_change(self, name: str, n: int | None = None) -> ReplayPlan:
        """Expect ``name`` (call ``n`` only, or every call) to diverge from its recording.

        Use it for a call downstream of a cut-point whose input the fix changes (the model call
        that reads the fixed tool's result), or a call the fix no longer makes. Its divergences
        are still reported by ``divergences()``, marked ``expected``; strict mode ignores them.
        """
        name, n = self._check(name, n)
        self._expected.add((name, n))
        return self

    def mode_for(self, name: str, n: int, *, encloses_cut_point: bool = False) -> Mode:
        """The mode of call ``n`` of ``name``.

        ``encloses_cut_point``: the call's recorded subtree holds a call this plan runs, so it
        runs unless a rule names this very call (``stub(name, n)``).
        """
        rules = self._rules
        if not rules:
            return "stub"
        exact = rules.get((name, n))
        if exact is not None:
            return exact
        if encloses_cut_point:
            return "run"
        return rules.get((name, None)) or "stub"

    @property
    def runs_any(self) -> bool:
        """Whether any rule runs a call live."""
        return "run" in self._rules.values()

    def expects_change(self, name: str, n: int | None) -> bool:
        """Whether a divergence of call ``n`` of ``name`` was declared with ``expect_change``."""
        expected = self._expected
        return bool(expected) and ((name, n) in expected or (name, None) in expected)

    def rule_for(self, name: str, n: int | None) -> Mode | None:
        """The mode a rule gives exactly ``name`` call ``n`` (``None``: no such rule)."""
        return self._rules.get((name, n))

    def entries(self) -> list[tuple[str, int | None, str]]:
        """Every entry as ``(name, n, what)``, ``what`` being ``stub``, ``run``, ``through``,
        ``expect``, ``override`` or ``live_after``."""
        through = self.through_calls
        listed: list[tuple[str, int | None, str]] = [
            (name, n, "through" if (name, n) in through and mode == "run" else mode)
            for (name, n), mode in self._rules.items()
        ]
        listed.extend((name, n, "expect") for name, n in sorted(self._expected, key=_order))
        listed.extend((name, n, "override") for name, n in self.overrides)
        if self.anchor is not None:
            listed.append((*self.anchor, "live_after"))
        return listed

    def _add(self, name: str, n: int | None, mode: Mode) -> ReplayPlan:
        name, n = self._check(name, n)
        self._rules[(name, n)] = mode
        self.through_calls.discard((name, n))  # the later rule wins (through adds it back)
        self._driven.discard((name, n))  # (and drive)
        return self

    @staticmethod
    def _check(name: str, n: int | None) -> tuple[str, int | None]:
        """The call ``name`` and ``n`` name (``call_target``), checked: ``TypeError`` or
        ``ValueError`` saying what a plan entry takes."""
        name, n = call_target(name, n)
        if not isinstance(name, str) or not name:
            raise TypeError(f"a boundary name is a non-empty string, got {name!r}")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"invocations count from 1; got n={n!r} for {name!r}")
        return name, n

    def __repr__(self) -> str:
        listed = [describe_entry(*entry) for entry in self.entries()]
        if self.records_new:
            listed.append("record_new()")
        return "ReplayPlan(" + ", ".join(listed) + ")"


def _order(target: tuple[str, int | None]) -> tuple[str, int]:
    return target[0], target[1] or 0


def describe_entry(name: str, n: int | None, what: str) -> str:
    """An entry as the call that made it: ``run('delete_file', 1)``."""
    method = "expect_change" if what == "expect" else what
    if what == "override":
        return f"override({name!r}, {n}, ...)"
    return f"{method}({name!r}{'' if n is None else f', {n}'})"
