"""``chronicle show``: a trace's call tree in the terminal, one call in full, the trace as JSON, or
the trace as one web page (``--html``); each with the trace's tokens and cost, priced the way the
replay reports price them (``chronicle.whatif.usage``)."""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

from chronicle.cli.common import Usage, width, write_html, write_json
from chronicle.errors import plural
from chronicle.read.page import trace_page
from chronicle.read.traces import TraceTree, show
from chronicle.read.waterfall import can_draw, render_envelope, use_color
from chronicle.whatif.usage import recorded_usage


def show_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    """Add ``chronicle show`` to the subcommands."""
    show_cmd = commands.add_parser(
        "show",
        parents=[connection],
        help="print a trace's call tree (the waterfall)",
        description="A trace's call tree: one line per span and call, nested as called, on one "
        "time axis; a failed call is marked with its error.",
    )
    show_cmd.add_argument("trace_id", metavar="TRACE_ID", help="the trace (32 hex characters)")
    show_cmd.add_argument(
        "--span", metavar="S", help="only this span, an id from the header (all, by default)"
    )
    show_cmd.add_argument(
        "--envelope",
        metavar="ID",
        help="one call's input and output in full, by envelope id or name#n (web_search#2)",
    )
    show_cmd.add_argument(
        "--json", action="store_true", help="the trace and its envelopes as JSON (off, by default)"
    )
    show_cmd.add_argument(
        "--html",
        metavar="PATH",
        help="write the trace as one web page to PATH instead of printing the tree: the calls "
        "nested and on a time axis, each opening to its input and output; self-contained, "
        "opens offline (none, by default)",
    )


def usage_line(tree: TraceTree) -> str | None:
    """``2 model calls: 1,234 tokens (1,000 in, 234 out), $0.0012`` for a trace whose model
    calls recorded usage (``cost unknown`` when the price table does not know a model); ``None``
    when none did."""
    used = recorded_usage(tree.envelopes)
    return f"{plural(used.calls, 'model call')}: {used.describe()}" if used.calls else None


def show_command(args: argparse.Namespace, out: IO[str]) -> int:
    """Run ``chronicle show``: 0 once it printed or wrote the trace."""
    if args.html and args.envelope:
        raise Usage("--html writes the whole trace, each call opening on the page; drop --envelope")
    tree = show(args.trace_id, url=args.url)
    if args.span:
        tree = tree.only_span(args.span)
    if args.html:
        written = write_html(trace_page(tree, usage=usage_line(tree)), args.html)
        calls = plural(sum(1 for n in tree.nodes if n.envelope is not None), "call")
        print(
            f"wrote {written}: trace {tree.trace_id}, {calls}",
            file=sys.stderr if args.json else out,
        )
        if not args.json:
            return 0
    if args.envelope:
        envelope = tree.envelope(args.envelope)
        if args.json:
            write_json(out, envelope)
            return 0
        node = next(n for n in tree.nodes if n.envelope is envelope)
        out.write(render_envelope(envelope, node, color=use_color(out)) + "\n")
        return 0
    if args.json:
        write_json(out, tree.to_json())
        return 0
    text = tree.render(width=width(out), color=use_color(out), ascii_only=not can_draw(out))
    used = usage_line(tree)
    out.write(text + "\n" + (f"{used}\n" if used else ""))
    return 0
