"""``ReplayPlan``: which recorded calls are stubbed and which run live (the cut-points)."""

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

    def stub(self, name: str, n: int | None = None) -> ReplayPlan:
        """Return the recording for ``name`` (call ``n`` only, or every call)."""
        return self._add(name, n, "stub")

    def run(self, name: str, n: int | None = None) -> ReplayPlan:
        """Run ``name`` live (call ``n`` only, or every call), keeping its input and result."""
        return self._add(name, n, "run")

    def mode_for(self, name: str, n: int) -> Mode:
        """The mode of call ``n`` of ``name``."""
        rules = self._rules
        if not rules:
            return "stub"
        return rules.get((name, n)) or rules.get((name, None)) or "stub"

    def _add(self, name: str, n: int | None, mode: Mode) -> ReplayPlan:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a boundary name is a non-empty string, got {name!r}")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"invocations count from 1; got n={n!r} for {name!r}")
        self._rules[(name, n)] = mode
        return self

    def __repr__(self) -> str:
        rules = ", ".join(
            f"{mode}({name!r}{'' if n is None else f', {n}'})"
            for (name, n), mode in self._rules.items()
        )
        return f"ReplayPlan({rules})"
