"""``--chronicle-report PATH.html`` and ``--chronicle-markdown PATH``: the report of a
``--chronicle-corpus`` session, the same one ``chronicle replay --report`` writes
(``chronicle.whatif.report``), merged across pytest-xdist workers.

Each corpus item hands its result over in its call report's ``user_properties`` (``RESULT``,
the ``--json`` form), which pytest-xdist carries from the workers to the controller; the
controller (or the one process without xdist) gathers them (``CorpusReport``) and writes the
files when the session ends, saying where in the terminal summary. A file that cannot be
written fails no test: the summary says why and what to do. ``--chronicle-shard K/N`` collects
one part of the corpus, cut as ``chronicle replay --shard`` cuts it, for CI machines that each
run one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from chronicle.read.page import report_page, write_page
from chronicle.whatif.report import Report, markdown

__all__ = [
    "RESULT",
    "CorpusReport",
    "add_report_options",
    "add_shard_option",
    "wants_report",
]

RESULT = "chronicle-corpus-result"
"""The ``user_properties`` key under which a corpus item hands over its result (JSON)."""


def add_report_options(group: pytest.OptionGroup) -> None:
    """``--chronicle-report`` and ``--chronicle-markdown``."""
    group.addoption(
        "--chronicle-report",
        default=None,
        metavar="PATH.html",
        help="--chronicle-corpus: also write the results as one web page, as chronicle replay "
        "--report does (the counts, tokens and cost recorded beside replayed, a row per "
        "recording linking to its call tree and diff), from every xdist worker",
    )
    group.addoption(
        "--chronicle-markdown",
        default=None,
        metavar="PATH",
        help="--chronicle-corpus: also write a Markdown summary table, for a pull-request "
        "comment or $GITHUB_STEP_SUMMARY",
    )


def add_shard_option(group: pytest.OptionGroup) -> None:
    """``--chronicle-shard K/N``."""
    group.addoption(
        "--chronicle-shard",
        default=None,
        metavar="K/N",
        help="--chronicle-corpus: collect only the K-th of N even parts of the corpus, as "
        "chronicle replay --shard cuts them (the same recording in the same part everywhere)",
    )


def wants_report(config: pytest.Config) -> bool:
    """Whether the session writes a report (so each item hands its result over)."""
    return bool(config.getoption("chronicle_report") or config.getoption("chronicle_markdown"))


class CorpusReport:
    """Gathers the corpus items' results from their reports (every worker's) and writes the
    report files when the session ends (registered by the plugin where reports arrive)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[dict[str, Any]] = []
        self.began = time.perf_counter()
        self.said: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the result an item handed over (its call report)."""
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == RESULT and isinstance(value, str):
                self.results.append(json.loads(value))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the files asked for."""
        # A shard sees only its part of the corpus: a plan entry none of its recordings reached
        # may be reached in another part, so its report does not fail over it (the session
        # notes it; `chronicle report` over every shard's results decides).
        shard = bool(self.config.getoption("chronicle_shard"))
        report = Report.of(
            self.results, time.perf_counter() - self.began, unmatched=[] if shard else None
        )
        self.said.append(f"{report.headline()}; {report.totals.change()}")
        html, summary = (
            self.config.getoption("chronicle_report"),
            self.config.getoption("chronicle_markdown"),
        )
        for path, render in ((html, report_page), (summary, markdown)):
            if not path:
                continue
            try:
                written = write_page(render(report), path)
            except OSError as exc:
                self.said.append(
                    f"cannot write {path}: {exc.strerror or exc}; give a path in a folder that "
                    "exists and that you can write to"
                )
            else:
                self.said.append(f"wrote {Path(written)}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Say the counts, the usage change and the files written."""
        if not self.said:
            return
        terminalreporter.section("chronicle corpus report")
        for line in self.said:
            terminalreporter.write_line(line)
