"""How long a bounded wait may take on a machine as loaded as it is now.

A test of a bound (a timeout, ``exit_timeout``, ``registration_timeout``) asserts that a wait
ended near the bound, not at a longer one. The bound is a fixed number of seconds; the work
around it (starting a thread, encoding, a request to a local server, a process's imports) is
slower when the machine is busy. So no test asserts a fixed number of seconds of its own: each
allows the bound plus a slack measured in the same test, ``Pace.slack``, a multiple of how long a
fixed piece of work takes now (10 to 20 ms on an idle machine: a slack of 1 to 2 s; on a
machine four times as busy, four times that). A wait that is a longer bound (the 30 s
default where 1 s was asked, a second attempt) still fails on an idle machine.

A child process is its own baseline: how long its exit takes (past a bound) is compared with how
long it took to start and reach its ready line (an interpreter's start, imports, the work), which a
busy machine slows as it slows the exit; the CPU work ``Pace`` times understates that.
"""

from __future__ import annotations

import time

_UNITS = 100
"""The slack, in units of the reference work (10 to 20 ms each when the machine is idle)."""


def _reference_work() -> float:
    """Seconds a fixed piece of CPU work takes now."""
    started = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i * i
    return time.perf_counter() - started


class Pace:
    """The machine's pace, measured on entering and on leaving (the slower of the two counts).

    ``with Pace() as pace: ...`` then ``assert took < bound + pace.slack``.
    """

    def __init__(self, units: int = _UNITS) -> None:
        self.units = units
        self._seconds = 0.0

    def __enter__(self) -> Pace:
        self._seconds = _reference_work()
        return self

    def __exit__(self, *exc: object) -> None:
        self._seconds = max(self._seconds, _reference_work())

    @property
    def slack(self) -> float:
        """Seconds a wait may take past its bound at the pace measured."""
        return self.units * self._seconds
