"""``--chronicle-jobs N``: a ``--chronicle-corpus`` replayed ahead in N processes, each pytest
item reporting its recording's result as it arrives.

pytest-xdist spreads items, and pays for each one (a report serialised, the controller's
bookkeeping: about a millisecond of CPU, more than a stubbed replay takes). Here pytest runs in
one process as usual, and only the replays move: when collection ends, the corpus items that
will run are handed, in their order, to ``chronicle.whatif.corpus.Replayers`` (the processes of
``chronicle replay -j N``, each importing the entry once), and each item, when pytest runs it,
takes its result from there instead of replaying it. Everything an item reports (its outcome,
failure text, ``user_properties``, so ``--chronicle-report``, ``--chronicle-markdown`` and JUnit
XML) is what it reports without ``--chronicle-jobs``; only the results' ``seconds`` differ. A
few chunks of results are held at a time, whatever the corpus's size.

What runs in the replaying processes is the entry's module and what it imports, not the
session's ``conftest.py`` files: a conftest that changes the code under test in this process
(a monkeypatch at import time) does not reach them; environment variables set before
collection ends do. Under pytest-xdist (``-n``) the option is ignored, with a warning: each
xdist worker replays its own items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import BrokenExecutor
from pathlib import Path

import pytest

from chronicle.whatif import corpus

__all__ = ["AHEAD", "CorpusJobs", "jobs_wanted", "replayed_ahead"]

AHEAD = pytest.StashKey["CorpusJobs"]()
"""The session's ``CorpusJobs``, when ``--chronicle-jobs`` replays the corpus ahead."""


def jobs_wanted(config: pytest.Config) -> int:
    """How many replaying processes the session starts: ``--chronicle-jobs`` when above 1, in a
    session that pytest-xdist does not distribute (warned when it does), else 0."""
    jobs = int(config.getoption("chronicle_jobs") or 0)
    if jobs <= 1:
        return 0
    distributed = hasattr(config, "workerinput") or getattr(config.option, "dist", "no") != "no"
    if distributed:
        if not hasattr(config, "workerinput"):  # said once, by the controller
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    "--chronicle-jobs is ignored under pytest-xdist (-n): each xdist worker "
                    "replays its own corpus items; use one or the other (-n 0 --chronicle-jobs "
                    "N is usually faster for a corpus)"
                ),
                stacklevel=2,
            )
        return 0
    return jobs


class CorpusJobs:
    """Starts the replaying processes when collection ends, with the corpus items that will run
    (``recording_of`` gives an item's file, ``None`` for other items) and the corpus's
    ``options``, and hands each item its
    result (``result_of``); stops them when the session ends."""

    def __init__(
        self,
        config: pytest.Config,
        jobs: int,
        options: corpus.Options,
        recording_of: Callable[[pytest.Item], Path | None],
    ) -> None:
        self.config = config
        self.jobs = jobs
        self.options = options
        self.recording_of = recording_of
        self.replayers: corpus.Replayers | None = None
        self.stream: Iterator[tuple[Path, corpus.CorpusResult | str]] = iter(())
        self.early: dict[Path, corpus.CorpusResult | str] = {}
        """Results that arrived before their item asked (an item pytest did not run)."""
        self.broken: str | None = None
        corpus.start_replayers(str(config.getoption("chronicle_entry")))  # while pytest collects

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Replay the corpus items about to run, in their order, ahead of them."""
        if self.config.option.collectonly:
            return
        files = [path for item in session.items if (path := self.recording_of(item)) is not None]
        if len(files) < 2:
            return
        self.replayers = corpus.Replayers(
            str(self.config.getoption("chronicle_entry")),
            self.options,
            self.jobs,
        )
        self.stream = self.replayers.results(files)
        self.config.stash[AHEAD] = self

    def result_of(self, path: Path) -> corpus.CorpusResult | str | None:
        """``path``'s result (or the line saying why the entry cannot be imported there, or why
        the replaying processes stopped); ``None`` when it was not replayed ahead."""
        if path in self.early:
            return self.early.pop(path)
        if self.broken is not None:
            return self.broken
        try:
            for found, result in self.stream:
                if found == path:
                    return result
                self.early[found] = result
        except BrokenExecutor as exc:
            self.broken = (
                f"a process replaying the corpus ended unexpectedly ({exc}); the entry or the "
                "code it calls may exit the process: run without --chronicle-jobs to see it"
            )
            return self.broken
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        """Stop the processes (a stopped session, ``-x``: the replays not started never run)."""
        if self.replayers is not None:
            self.replayers.close()
            self.replayers = None


def replayed_ahead(config: pytest.Config, path: Path) -> corpus.CorpusResult | str | None:
    """The result ``--chronicle-jobs`` replayed ahead for ``path`` (a ``str``: why there is
    none), or ``None`` when the item replays its recording itself."""
    jobs: CorpusJobs | None = config.stash.get(AHEAD, None)
    return None if jobs is None else jobs.result_of(path)
