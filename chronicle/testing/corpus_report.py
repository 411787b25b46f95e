"""``--chronicle-report PATH.html``, ``--chronicle-markdown PATH`` and ``--chronicle-json PATH``:
the report of a ``--chronicle-corpus`` session, the same one ``chronicle replay --report``
writes (``chronicle.whatif.report``), and its results as the JSON lines ``chronicle replay
--json`` prints, merged across pytest-xdist workers.

Each corpus item hands its result over in its call report's ``user_properties`` (``RESULT``,
its ``--json`` line: ``CorpusResult.json_line``), which pytest-xdist carries from the workers to
the controller; the controller (or the one process without xdist) gathers them
(``CorpusReport``) and writes the files when the session ends, saying where in the terminal
summary. A file that cannot be written fails no test: the summary says why and what to do.
``--chronicle-shard K/N`` collects one part of the corpus, cut as ``chronicle replay --shard``
cuts it, for CI machines that each run one; ``chronicle report`` merges the shards'
``--chronicle-json`` files as it merges ``chronicle replay --json`` outputs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chronicle.read.page import report_page, write_page
from chronicle.whatif.report import Report, markdown

__all__ = [
    "RESULT",
    "CorpusReport",
]

RESULT = "chronicle-corpus-result"
"""The ``user_properties`` key under which a corpus item hands over its result (its ``--json``
line)."""


class CorpusReport:
    """Gathers the corpus items' results from their reports (every worker's) and writes the
    report files when the session ends (registered by the plugin where reports arrive)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[tuple[dict[str, Any], str]] = []
        """Each item's result: its ``--json`` form, and the line it handed over."""
        self.began = time.perf_counter()
        self.said: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the result an item handed over (its call report)."""
        if report.when != "call":
            return
        for key, value in report.user_properties:
            if key == RESULT and isinstance(value, str):
                self.results.append((json.loads(value), value))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the files asked for."""
        # A shard sees only its part of the corpus: a plan entry none of its recordings reached
        # may be reached in another part, so its report does not fail over it (the session
        # notes it; `chronicle report` over every shard's results decides).
        shard = bool(self.config.getoption("chronicle_shard"))
        report = Report.of(
            [result for result, _ in self.results],
            time.perf_counter() - self.began,
            unmatched=[] if shard else None,
        )
        self.said.append(f"{report.headline()}; {report.totals.change()}")
        # --chronicle-json: the lines as chronicle replay --json prints them, in the report's
        # order (by source), whichever worker replayed each
        lines = sorted(self.results, key=lambda result: str(result[0].get("source")))
        texts: dict[str, Callable[[], str]] = {
            "chronicle_report": lambda: report_page(report),
            "chronicle_markdown": lambda: markdown(report),
            "chronicle_json": lambda: "".join(line + "\n" for _, line in lines),
        }
        for option, text in texts.items():
            path = self.config.getoption(option)
            if not path:
                continue
            try:
                written = write_page(text(), path)
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
