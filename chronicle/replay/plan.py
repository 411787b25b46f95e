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

A call can only be made by its parent, so a call whose recorded subtree holds a cut-point runs
live too (``run("web_search", 2)`` runs the ``researcher`` call that made ``web_search#2``),
unless a rule names that very call. An entry that matches no call and no recording is itself a
divergence (a misspelt name, say).
"""

from __future__ import annotations

from typing import Literal

Mode = Literal["stub", "run"]


class ReplayPlan:
    """Rules by boundary name and invocation: ``ReplayPlan().run("delete_file", 1)``.

    Every call is stubbed unless a rule says otherwise. A rule for one invocation (``n``) beats a
    rule for every invocation of that name; the later of two rules for the same target wins.
    Methods return the plan, so rules chain.
    """

    def __init__(self) -> None:
        self._rules: dict[tuple[str, int | None], Mode] = {}
        self._expected: set[tuple[str, int | None]] = set()

    def stub(self, name: str, n: int | None = None) -> ReplayPlan:
        """Return the recording for ``name`` (call ``n`` only, or every call)."""
        return self._add(name, n, "stub")

    def run(self, name: str, n: int | None = None) -> ReplayPlan:
        """Run ``name`` live (call ``n`` only, or every call), keeping its input and result."""
        return self._add(name, n, "run")

    def expect_change(self, name: str, n: int | None = None) -> ReplayPlan:
        """Expect ``name`` (call ``n`` only, or every call) to diverge from its recording.

        Use it for a call downstream of a cut-point whose input the fix changes (the model call
        that reads the fixed tool's result), or a call the fix no longer makes. Its divergences
        are still reported by ``divergences()``, marked ``expected``; strict mode ignores them.
        """
        self._check(name, n)
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

    def entries(self) -> list[tuple[str, int | None, str]]:
        """Every entry as ``(name, n, what)``, ``what`` being ``stub``, ``run`` or ``expect``."""
        listed: list[tuple[str, int | None, str]] = [
            (name, n, mode) for (name, n), mode in self._rules.items()
        ]
        listed.extend((name, n, "expect") for name, n in sorted(self._expected, key=_order))
        return listed

    def _add(self, name: str, n: int | None, mode: Mode) -> ReplayPlan:
        self._check(name, n)
        self._rules[(name, n)] = mode
        return self

    @staticmethod
    def _check(name: str, n: int | None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a boundary name is a non-empty string, got {name!r}")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"invocations count from 1; got n={n!r} for {name!r}")

    def __repr__(self) -> str:
        return "ReplayPlan(" + ", ".join(describe_entry(*entry) for entry in self.entries()) + ")"


def _order(target: tuple[str, int | None]) -> tuple[str, int]:
    return target[0], target[1] or 0


def describe_entry(name: str, n: int | None, what: str) -> str:
    """An entry as the call that made it: ``run('delete_file', 1)``."""
    method = "expect_change" if what == "expect" else what
    return f"{method}({name!r}{'' if n is None else f', {n}'})"
