"""The reading commands' bodies: ``chronicle traces`` (the traces that match, by label, agent,
time or saved verdict), ``chronicle save`` (a recorded request as an incident file) and
``chronicle agents`` (the agents the traces carry, with their pass rates). The parsers are in
``chronicle/cli/__init__.py``; each body writes to ``out`` and returns the exit status."""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from typing import IO

from chronicle.cli.common import Usage, table_width, write_json
from chronicle.errors import plural
from chronicle.read.agents import agent_record, find_agents, render_agents
from chronicle.read.connection import Connection
from chronicle.read.traces import find_traces
from chronicle.read.waterfall import can_draw, render_table, use_color
from chronicle.save.incident import SpanChoice, read_incident

__all__ = ["agents_command", "save_command", "traces_command"]


def traces_command(args: argparse.Namespace, out: IO[str]) -> int:
    """``chronicle traces``: the table (``--json``: an array) of the traces that match."""
    found = find_traces(
        session_id=args.session_id,
        message_id=args.message_id,
        user_id=args.user_id,
        labels=dict(args.label),
        agent=args.agent,
        since=args.since,
        until=args.until,
        limit=args.limit,
        url=args.url,
        replays_of=args.replays_of,
        failing=args.failing,
        evaluated=args.evaluated,
    )
    if args.json:
        write_json(out, [s.to_json() for s in found])
        return 0
    if not found:
        print("no traces match", file=sys.stderr)
        return 0
    text = render_table(
        found, width=table_width(out), color=use_color(out), ascii_only=not can_draw(out)
    )
    out.write(text + "\n")
    return 0


def save_command(args: argparse.Namespace, out: IO[str]) -> int:
    """``chronicle save``: write the incident file; 2 when the trace has several spans and
    none was chosen (they are listed on stderr)."""
    if args.span_id and args.span and args.span_id != args.span:
        raise Usage(f"two span ids given: {args.span_id} and --span {args.span}")
    span_id = args.span or args.span_id
    if span_id and args.all_spans:
        raise Usage("--all-spans saves every span; leave out the span id")
    connection = Connection.resolve(args.url, None)
    with closing(connection.client()) as client:
        incident = read_incident(client, args.trace_id, span_id, all_spans=args.all_spans)
    if isinstance(incident, SpanChoice):  # several spans, none chosen: list them, ask for one
        print(incident.describe(), file=sys.stderr)
        return 2
    incident.write(args.out)
    kept = ", ".join(f"{s.service or '?'} {s.span_id}" for s in incident.spans)
    spans = "span" if len(incident.spans) == 1 else "spans"
    saved = plural(len(incident.envelopes), "envelope")
    out.write(f"saved {saved} of {spans} {kept} to {args.out}\n")
    return 0


def agents_command(args: argparse.Namespace, out: IO[str]) -> int:
    """``chronicle agents`` (the table, or ``--json``) and ``chronicle agents show ID``."""
    if args.action == "show":
        found = agent_record(args.agent, url=args.url, scan_limit=args.scan_limit)
        write_json(out, found.to_json(full=True))
        return 0
    if args.offset < 0 or args.limit > 1000:
        raise Usage(
            f"--limit goes from 1 to 1000 and --offset from 0, got {args.limit} and {args.offset}"
        )
    page = find_agents(
        limit=args.limit,
        offset=args.offset,
        since=args.since,
        scan_limit=args.scan_limit,
        url=args.url,
    )
    if args.json:
        write_json(out, page.to_json())
    elif not page.agents:
        print("no agents: no recorded trace carries an agent profile", file=sys.stderr)
    else:
        out.write(render_agents(page, width=table_width(out)) + "\n")
    return 0
