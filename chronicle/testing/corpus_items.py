"""``--chronicle-corpus``: one pytest item per recording, replayed by calling
``--chronicle-entry`` with its recorded input (``chronicle.whatif.corpus``).

The plan of every item comes from the command line, as ``chronicle replay`` takes it (the
options are defined in ``plugin_options``): ``--chronicle-run NAME[#n]`` runs a call live (the
code that changed), ``--chronicle-expect-change NAME[#n]`` declares a call the change alters,
``--chronicle-ignore PATH`` leaves a fresh input path out of the comparison, ``--chronicle-match
input`` matches calls by input, ``--chronicle-not-strict`` reports divergences without failing.
A plan entry one recording never reaches is no divergence there; one that no recording of the
session reaches fails the session (``UnmatchedEntries``), since it is most likely misspelt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import override

from chronicle.replay.divergence import Divergence
from chronicle.testing.corpus_jobs import replayed_ahead
from chronicle.testing.corpus_report import RESULT
from chronicle.testing.corpus_source import resolve
from chronicle.testing.failure_text import ON_THE_COMMAND_LINE
from chronicle.testing.plugin_options import wants_report
from chronicle.whatif import corpus

_ENTRY = pytest.StashKey["corpus.Entry | str"]()
"""The corpus's entry, imported once per process (or why it cannot be)."""
_OPTIONS = pytest.StashKey[corpus.Options]()
_FOLDERS = pytest.StashKey[tuple[str, ...]]()
"""The ``--chronicle-corpus`` folders, absolute, each ending in the path separator."""
"""The corpus's replay options, read from the command line once per process."""
UNMATCHED = "chronicle-corpus-unmatched"
"""The ``user_properties`` key under which an item hands over the plan entries its recording
never reached (JSON), so the session (pytest-xdist's controller too) can tell which entries no
recording reached."""


class CorpusFailed(Exception):
    """A corpus item whose replay did not pass; the message is ``CorpusResult.describe()``."""


def corpus_options(config: pytest.Config) -> corpus.Options:
    """The replay options of every corpus item, read from the command line once per process
    (first the control plane's traces put in the corpus, when asked for: ``corpus_source``).
    Raises ``pytest.UsageError`` saying which option is wrong and its form."""
    options = config.stash.get(_OPTIONS, None)
    if options is None:
        resolve(config)  # --chronicle-from-control-plane: before collection reads the corpus
        hosts = config.getoption("chronicle_allowed_hosts") or ""
        try:
            options = corpus.Options(
                run=corpus.plan_targets(config.getoption("chronicle_run"), "--chronicle-run"),
                expect_change=corpus.plan_targets(
                    config.getoption("chronicle_expect_change"), "--chronicle-expect-change"
                ),
                strict=not config.getoption("chronicle_not_strict"),
                match=config.getoption("chronicle_match"),
                ignore=tuple(config.getoption("chronicle_ignore")),
                allowed_hosts=tuple(host for host in hosts.split(",") if host.strip()),
                spelling="pytest",
            )
        except ValueError as exc:
            raise pytest.UsageError(f"--chronicle-corpus: {exc}") from None
        config.stash[_OPTIONS] = options
    return options


class Corpus(pytest.Collector):
    """The recordings of ``--chronicle-corpus`` as a collector pytest knows: collected through
    ``Session.genitems``, its items are reported as a file's tests are (``collected N items``
    counts them, ``--collect-only`` lists them, ``pytest_itemcollected`` sees each)."""

    def __init__(self, *, recordings: list[tuple[str, Path]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recordings = recordings
        """Each recording's item name (its path as a message shows it) and its file."""

    @override
    def collect(self) -> list[pytest.Item | pytest.Collector]:
        return [
            CorpusItem.from_parent(self, name=name, nodeid=name, recording=path)
            for name, path in self.recordings
        ]


class CorpusItem(pytest.Item):
    """One recording of ``--chronicle-corpus``, replayed by calling ``--chronicle-entry`` with
    its recorded input (``chronicle.whatif.corpus``) and the command line's plan; named after
    the file."""

    def __init__(self, *, recording: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recording = recording

    @override
    def runtest(self) -> None:
        result = replayed_ahead(self.config, self.recording)  # --chronicle-jobs
        options = corpus_options(self.config)
        if isinstance(result, str):  # the entry cannot be imported there, or they stopped
            self._hand_over(self._error(result))
            raise CorpusFailed(f"chronicle: {result}")
        if result is None:
            entry = corpus_entry(self.config)
            if isinstance(entry, str):
                self._hand_over(self._error(entry.removeprefix("chronicle: ")))
                raise CorpusFailed(entry)
            result = corpus.replay_file(self.recording, entry, options)
        if result.unmatched is not None and (options.run or options.expect_change):
            # only a plan with entries has any a recording may not reach
            self.user_properties.append((UNMATCHED, _unmatched_json(result.unmatched)))
        self._hand_over(result)
        if result.outcome == "error":  # the recording cannot be replayed: no plan option helps
            raise CorpusFailed(result.describe())
        if not result.passed:
            raise CorpusFailed(f"{result.describe()}\n{ON_THE_COMMAND_LINE}")

    def _hand_over(self, result: corpus.CorpusResult) -> None:
        """Hand the result to the session's report and ``--chronicle-json`` file, when asked
        for, as the line ``chronicle replay --json`` prints."""
        if wants_report(self.config):
            self.user_properties.append((RESULT, result.json_line()))

    def _error(self, why: str) -> corpus.CorpusResult:
        """The ``error`` result of a recording that was not replayed (the entry cannot be
        imported, the replaying processes stopped): counted as not passed wherever the
        results are merged."""
        return corpus.CorpusResult(
            corpus.shown_path(self.recording), "error", why, spelling="pytest"
        )

    @override
    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        if isinstance(excinfo.value, CorpusFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    @override
    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.recording, None, f"chronicle replay {self.name}"


def in_corpus_folder(path: Path, config: pytest.Config) -> bool:
    """Whether ``path`` is an incident file (``*.json``) inside a ``--chronicle-corpus`` folder:
    one of its recordings, which the corpus collects itself, so pytest's own collection need not
    look at it (its checks of each file cost a second of a 10,000-recording corpus)."""
    folders = config.stash.get(_FOLDERS, None)
    if folders is None:
        given = config.getoption("chronicle_corpus") or []
        folders = tuple(
            os.path.join(os.path.abspath(folder), "") for folder in given if os.path.isdir(folder)
        )
        config.stash[_FOLDERS] = folders
    if not folders or path.suffix != ".json":
        return False
    text = str(path)
    return any(text.startswith(folder) for folder in folders)


def corpus_entry(config: pytest.Config) -> corpus.Entry | str:
    """The corpus's entry, imported once per process, or the line saying why it cannot be."""
    entry = config.stash.get(_ENTRY, None)
    if entry is None:
        try:
            entry = corpus.load_entry(str(config.getoption("chronicle_entry")))
        except corpus.CorpusError as exc:
            entry = f"chronicle: {exc}"
        config.stash[_ENTRY] = entry
    return entry


# ---- plan entries that no recording reached ------------------------------------------------------


def _unmatched_json(found: tuple[Divergence, ...]) -> str:
    return json.dumps([[d.name, d.index, d.diff] for d in found])


class UnmatchedEntries:
    """Gathers, from each corpus item's report, the plan entries its recording never reached,
    and ends the session naming those no recording reached, failing it unless
    ``--chronicle-not-strict`` (registered by the plugin while a corpus is collected)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[corpus.CorpusResult] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the unmatched entries an item handed over (its call report)."""
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == UNMATCHED and isinstance(value, str):
                found = tuple(
                    Divergence(name, index, "plan", diff) for name, index, diff in json.loads(value)
                )
                self.results.append(
                    corpus.CorpusResult(report.nodeid, "passed", unmatched=found, spelling="pytest")
                )

    def lines(self) -> list[str]:
        """What the session ends with: a line per plan entry no recording reached (in a
        ``--chronicle-shard``, a note that another shard's recordings may reach it)."""
        lines = corpus.unmatched_entries(self.results)
        shard = self.config.getoption("chronicle_shard")
        if shard:
            return [
                f"shard {shard}: {line}, unless another shard's recordings reach it"
                for line in lines
            ]
        return lines

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Fail a session that passed when a plan entry reached no recording (strict); not a
        ``--chronicle-shard``, which cannot tell whether another shard's recordings reach it."""
        strict = not self.config.getoption("chronicle_not_strict")
        sharded = bool(self.config.getoption("chronicle_shard"))
        if strict and not sharded and exitstatus == pytest.ExitCode.OK and self.lines():
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Name each plan entry no recording reached."""
        lines = self.lines()
        if not lines:
            return
        terminalreporter.section("chronicle corpus")
        for line in lines:
            terminalreporter.write_line(line)
