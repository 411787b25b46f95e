"""``chronicle report``: the ``--json`` outputs of a sharded corpus replay merged into one report,
and the report files every corpus replay can write (``--report``, ``--markdown``,
``--junit-xml``; the values are ``chronicle.whatif.report``'s, the page ``read/page.py``'s)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, Any

from chronicle.cli.common import Usage, write_file, write_html
from chronicle.read.page import report_page
from chronicle.whatif.report import Report, ReportError, junit_xml, markdown


def report_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--report``, ``--markdown`` and ``--junit-xml`` to a command that makes a report."""
    parser.add_argument(
        "--report",
        metavar="PATH.html",
        help="also write the results as one web page: the counts, tokens and cost recorded "
        "beside replayed, a row per recording linking to its call tree and diff; "
        "self-contained, opens offline (none, by default)",
    )
    parser.add_argument(
        "--markdown",
        metavar="PATH",
        help="also write a summary table in Markdown, for a pull-request comment or "
        "$GITHUB_STEP_SUMMARY (none, by default)",
    )
    parser.add_argument(
        "--junit-xml",
        type=Path,
        metavar="FILE",
        help="also write the results as JUnit XML, for CI (none, by default)",
    )


def write_reports(report: Report, args: argparse.Namespace, said: IO[str]) -> None:
    """Write the files ``args`` asks for (``--report``, ``--markdown``, ``--junit-xml``), each
    whole or not at all, saying each on ``said``; a usage error when one cannot be written."""
    if args.report:
        written = write_html(report_page(report), args.report)
        print(f"wrote {written}", file=said)
    for text, path in ((markdown(report), args.markdown), (junit_xml(report), args.junit_xml)):
        if path:
            print(f"wrote {write_file(text, path)}", file=said)


def report_parser(commands: Any) -> None:
    """Add ``chronicle report`` to the subcommands."""
    merge = commands.add_parser(
        "report",
        help="merge the --json outputs of sharded replays into one report (exit 1 unless all "
        "passed)",
        description="Read the --json outputs of chronicle replay (one per shard: chronicle "
        "replay ... --shard K/N --json > shard-K.jsonl) and make the report of the whole "
        "corpus, with the totals an unsharded run gives. Prints the summary; exit 0 when every "
        "recording passed, 1 when one did not or a --run/--expect-change entry matched no call "
        "in any shard, 2 when a file cannot be read or merged.",
    )
    merge.add_argument("files", nargs="+", metavar="FILE.jsonl", help="the --json outputs to merge")
    report_options(merge)


def report_command(args: argparse.Namespace, out: IO[str]) -> int:
    """Run ``chronicle report``: 0 when every recording passed and every plan entry matched a
    call in some shard's recordings (``Report.unmatched``, from the results), else 1."""
    try:
        report = Report.read(args.files)
    except ReportError as exc:
        raise Usage(str(exc)) from None
    out.write(f"{report.headline()} ({report.seconds:.2f} s replaying)\n{report.totals.change()}\n")
    failing = [row for row in report.rows if row.outcome != "passed"]
    for row in failing:
        out.write(f"{row.outcome:<8}  {row.source}: {row.first_divergence}\n")
    for line in report.unmatched:  # no recording of any shard reached it: the plan's mistake
        out.write(line + "\n")
    write_reports(report, args, sys.stderr)
    return 0 if report.passed else 1
