"""The ``chronicle`` command (also ``python -m chronicle``): from a ticket to the exact call.

::

    chronicle traces [--session-id S] [--message-id M] [--user-id U] [--label k:v ...]
                     [--agent NAME] [--since 2h] [--until 2026-12-01T18:00] [--limit N] [--json]
                     [--failing CHECK | --evaluated]
    chronicle show TRACE_ID [--span S] [--envelope ID|name#n] [--json]
    chronicle save TRACE_ID [--span S | --all-spans] -o FILE
    chronicle replay PATH... --entry MODULE:FUNCTION [--from-control-plane --label k:v ...]
                     [--run NAME[#n]] [--expect-change NAME[#n]] [--ignore PATH]
                     [--match input] [--not-strict] [--fail-on-output] [--json] [--junit-xml F]
                     [--override NAME#n=JSON] [--fail NAME#n=ERROR[: message]]
                     [--model NAME#n=MODEL] [--record]
                     [--report PATH.html] [--markdown PATH] [--shard K/N]
    chronicle report FILE.jsonl... [--report PATH.html] [--markdown PATH] [--junit-xml F]
    chronicle diff A B [--span S] [--span-b S] [--ignore PATH ...] [--json]
    chronicle agents [--limit N] [--offset M] [--since 7d] [--scan-limit N] [--json]
    chronicle agents show AGENT_ID
    chronicle evaluate TRACE_ID [--profile MODULE:NAME] [--judge PROVIDER:MODEL]
                       [--judge-runs N] [--reference TRACE|FILE] [--trajectory MODE]
                       [--trajectory-args] [--write-test DIR] [--save] [--json]
    chronicle evaluate --agent NAME [--label k:v ...] [--since 24h] [--kept] [--save] [--json]
    chronicle serve [--port 8800] [--database PATH | --database-url URL] [--verbose]
    chronicle --version
    chronicle COMMAND --help       (each option with its default, then examples)

``traces``, ``show`` and ``save`` read the control plane named by ``--url`` or the usual
configuration (``CHRONICLE_CONTROL_PLANE_URL``, ``CHRONICLE_API_KEY``, the config file); when it
has not answered within a second, one line on stderr says that they wait and for how long.
``serve`` runs the real control plane locally with a database that persists in the user's data
folder, proven to be its own server before it says so, and prints only its own lines unless
``--verbose``; on a port another program holds it says what holds it, and without ``--port``
runs on the next free one. Expected failures (no such trace, a server that is not a control
plane, a control plane that is down or refuses the key) print one line on stderr and exit 1; a
usage or configuration error (an ``--entry`` that cannot be imported too) exits 2; Ctrl-C exits
130. A bare ``chronicle`` prints the help. Colour only on a terminal, and not when ``NO_COLOR``
is set; a table fits a terminal and is written whole into a pipe.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import IO, Any

from chronicle._version import __version__
from chronicle.cli.common import (
    ChronicleParser,
    Usage,
    examples,
    label,
    positive,
    prog,
    when,
)
from chronicle.cli.evaluate import evaluate_command
from chronicle.cli.report import report_command, report_parser
from chronicle.cli.serve import (
    control_plane_at,
    data_dir,
    port_is_free,
    serve_command,
    serve_parser,
    stop_on_sigterm,
)
from chronicle.cli.show import show_command, show_parser
from chronicle.cli.traces import agents_command, save_command, traces_command
from chronicle.cli.whatif import diff_command, diff_parser, replay_command, replay_parser
from chronicle.errors import (
    ChronicleError,
    ConfigurationError,
    LocalControlPlaneError,
)
from chronicle.read.connection import Connection

__all__ = ["control_plane_at", "data_dir", "main", "port_is_free", "stop_on_sigterm"]

_PATIENCE = 1.0
"""Seconds a read waits for the control plane before saying that it waits."""


# ---- the parser ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    connection = ChronicleParser(add_help=False)
    connection.add_argument(
        "--url",
        help="the control plane to read (default: CHRONICLE_CONTROL_PLANE_URL, else the "
        "configuration file); its key is CHRONICLE_API_KEY",
    )
    parser = ChronicleParser(
        prog=prog(),
        description="Find recorded traces, show their call tree, save a request as an "
        "incident file, and replay it against the current code.",
        epilog=examples(*_EXAMPLES[""]),
    )
    parser.add_argument("--version", action="version", version=f"chronicle {__version__}")
    commands = parser.add_subparsers(
        dest="command",
        metavar="COMMAND",
        help=f"one of these ({prog()} COMMAND --help: its options and examples)",
        parser_class=ChronicleParser,
    )

    traces = commands.add_parser(
        "traces",
        parents=[connection],
        help="list the traces that match, newest first",
        description="The traces whose labels, agent and start time match, newest first: "
        "start time (local), duration, call count, status and name, then services, agent "
        "and labels. Times without a zone are local; 30m, 2h, 1d and 1w count back from now.",
    )
    traces.add_argument(
        "--session-id", metavar="S", help="the traces labelled session_id=S (any, by default)"
    )
    traces.add_argument(
        "--message-id", metavar="M", help="the traces labelled message_id=M (any, by default)"
    )
    traces.add_argument(
        "--user-id", metavar="U", help="the traces labelled user_id=U (any, by default)"
    )
    traces.add_argument(
        "--label",
        type=label,
        action="append",
        default=[],
        metavar="K:V",
        help="the traces labelled K=V; repeatable, every one must match (none, by default)",
    )
    traces.add_argument(
        "--agent", metavar="NAME", help="an agent profile's name or agent_id (any, by default)"
    )
    traces.add_argument(
        "--replays-of",
        metavar="TRACE",
        help="the recorded replays of this trace (chronicle replay --record, record=True)",
    )
    traces.add_argument(
        "--failing",
        metavar="CHECK",
        help="the traces whose latest saved evaluation (chronicle evaluate --save) failed this "
        "check: its name (tools, constraint) or words of its rule (approval); off, by default",
    )
    traces.add_argument(
        "--evaluated",
        action="store_true",
        help="the traces with a saved evaluation (off, by default)",
    )
    traces.add_argument(
        "--since",
        type=when,
        metavar="WHEN",
        help="started at or after: 2h, 30m, 1d, 1w ago, or a time (no bound, by default)",
    )
    traces.add_argument(
        "--until",
        type=when,
        metavar="WHEN",
        help="started at or before, in the same forms (no bound, by default)",
    )
    traces.add_argument(
        "--limit", type=positive, default=20, metavar="N", help="most traces listed"
    )
    traces.add_argument(
        "--json", action="store_true", help="a JSON array instead of the table (off, by default)"
    )

    show_parser(commands, connection)

    save = commands.add_parser(
        "save",
        parents=[connection],
        help="save a recorded request as an incident file (a regression test)",
        description="Write an incident file (a span's envelopes) for the pytest marker or "
        "chronicle.replay(FILE). A trace of one span needs no span id; of several, choose one "
        "with --span or keep them all with --all-spans.",
    )
    save.add_argument("trace_id", metavar="TRACE_ID", help="the trace (32 hex characters)")
    save.add_argument(
        "span_id",
        nargs="?",
        metavar="SPAN_ID",
        help="the span to save, same as --span (needed only when the trace has several)",
    )
    save.add_argument("--span", metavar="S", help="the span to save (same as SPAN_ID)")
    save.add_argument(
        "--all-spans",
        action="store_true",
        help="save every span of the trace as one incident, a multi-service request (off, "
        "by default)",
    )
    save.add_argument(
        "-o", "--out", required=True, type=Path, metavar="FILE", help="the file to write"
    )

    diff_parser(commands, connection)

    _agents_parser(commands, connection)

    _evaluate_parser(commands, connection)

    replay_parser(commands, connection)

    serve_parser(commands)

    report_parser(commands)

    for name, command in commands.choices.items():
        command.epilog = examples(*_EXAMPLES[name])
    return parser


_EXAMPLES: dict[str, tuple[str, ...]] = {
    # the README's own commands, two or three a command ("": the bare chronicle's help)
    "": (
        "chronicle serve",
        "chronicle traces --user-id ada --since 2h",
        "chronicle save TRACE_ID -o tests/incidents/delete-db.json",
    ),
    "traces": (
        "chronicle traces --user-id ada --since 2026-12-01T13:00 --until 2026-12-01T18:00",
        "chronicle traces --label release:2.4 --since 7d --json",
        "chronicle traces --failing approval --since 1d",
    ),
    "show": (
        "chronicle show 4bf92f3577b34da6a3ce929d0e0e4736",
        "chronicle show 4bf92f3577b34da6a3ce929d0e0e4736 --envelope web_search#2",
        "chronicle show 4bf92f3577b34da6a3ce929d0e0e4736 --html trace.html",
    ),
    "save": (
        "chronicle save TRACE_ID -o tests/incidents/delete-db.json",
        "chronicle save TRACE_ID --all-spans -o tests/incidents/checkout.json",
    ),
    "diff": (
        "chronicle diff refund_ok.json refund_timeout.json",
        "chronicle diff ORIGINAL_TRACE NEW_TRACE --json",
        "chronicle diff ORIGINAL_TRACE NEW_TRACE --html diff.html",
    ),
    "agents": (
        "chronicle agents",
        "chronicle agents --since 7d --json",
        "chronicle agents show agt_7b999fea5f174562f236",
    ),
    "evaluate": (
        "chronicle evaluate 2c6bc6a4e97982825747e1e09c3752b6 --profile app.agent:PROFILE",
        "chronicle evaluate TRACE_ID --profile app.agent:PROFILE --write-test tests/incidents",
        "chronicle evaluate --agent refund-agent --since 1d --save --json",
    ),
    "replay": (
        "chronicle replay tests/incidents --entry app.support:triage --report replay.html",
        "chronicle replay tests/incidents/corpus --entry app.support:triage --run get_weather",
        "chronicle replay TRACE_ID --entry support:support_agent --fail 'refund#1=TimeoutError' "
        "--record",
    ),
    "report": (
        "chronicle report shard-1.jsonl shard-2.jsonl --report replay.html --markdown summary.md",
        "chronicle report shard-1.jsonl shard-2.jsonl --junit-xml replay.xml",
    ),
    "serve": (
        "chronicle serve",
        "chronicle serve --port 8801 --database ./control-plane.db --verbose",
    ),
}
"""The examples each command's help ends with; tests/test_cli_help.py parses every one."""


# ---- the commands ----------------------------------------------------------------------------


def _agents_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    agents = commands.add_parser(
        "agents",
        parents=[connection],
        help="list the agents the recorded traces carry (chronicle agents show ID: one)",
        description="Every agent profile on the control plane's traces, most recently seen "
        "first: one row per agent_id (a new version is a row of its own). Reads each trace, "
        "so --since narrows what it reads. 'chronicle agents show AGENT_ID' prints one.",
        usage="%(prog)s [--limit N] [--offset M] [--since WHEN] [--scan-limit N] [--json]\n"
        "       %(prog)s show AGENT_ID",
    )
    agents.add_argument(
        "--limit", type=positive, default=25, metavar="N", help="most agents listed"
    )
    agents.add_argument(
        "--offset", type=int, default=0, metavar="M", help="skip the first M (the next page)"
    )
    agents.add_argument(
        "--since",
        type=when,
        metavar="WHEN",
        help="read the traces active since: 2h, 7d, or a time (all, by default)",
    )
    agents.add_argument(
        "--scan-limit", type=positive, default=5000, metavar="N", help="most traces read"
    )
    agents.add_argument("--json", action="store_true", help="the page as JSON (off, by default)")
    one = agents.add_subparsers(
        dest="action",
        title="one agent",
        metavar="show AGENT_ID",
        help="print that agent's profile as recorded (chronicle agents show --help)",
        parser_class=ChronicleParser,
    )
    show = one.add_parser(
        "show",
        prog=f"{prog()} agents show",  # not from the agents usage, which shows both forms
        help="print one agent's profile as recorded, as JSON",
        description="One agent's profile, as its most recent trace recorded it, as JSON.",
        epilog=examples(
            "chronicle agents show agt_7b999fea5f174562f236",
            "chronicle agents show 'Refund Agent'  # a name that has one version",
        ),
    )
    show.add_argument("agent", metavar="AGENT_ID", help="an agent_id, or a name")
    # given after 'show' too; SUPPRESS: not given there, the value given before it stays
    show.add_argument(
        "--url", default=argparse.SUPPRESS, help="the control plane to read (as before 'show')"
    )
    show.add_argument(
        "--scan-limit",
        type=positive,
        default=argparse.SUPPRESS,
        metavar="N",
        help="most traces read (default: 5000)",
    )


def _evaluate_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        parents=[connection],
        help="check a trace against its agent's profile (exit 1 when a check fails)",
        description="Check a trace against its agent profile: the tools called, their "
        "arguments against the tools' JSON Schemas, the model settings, the constraint checks "
        "(--profile), and with --judge what only a model can read (instructions, goal). With "
        "--agent or --label instead of a trace: every trace that matches, one line each, then "
        "a summary per check. --save keeps the verdicts on the control plane.",
    )
    evaluate.add_argument(
        "trace_id",
        nargs="?",
        metavar="TRACE_ID",
        help="the trace to check (or every trace --agent, --label, --since and --kept match)",
    )
    evaluate.add_argument(
        "--agent",
        metavar="NAME",
        help="check every trace of this agent (a profile's name or agent_id), most recent first",
    )
    evaluate.add_argument(
        "--label",
        type=label,
        action="append",
        default=[],
        metavar="K:V",
        help="check every trace labelled K=V; repeatable, every one must match",
    )
    evaluate.add_argument(
        "--since",
        type=when,
        metavar="WHEN",
        help="with --agent or --label: the traces started since 24h, 1d, or a time (all)",
    )
    evaluate.add_argument(
        "--kept",
        action="store_true",
        help="with --agent or --label: only the requests keep-on-incident kept",
    )
    evaluate.add_argument(
        "--most",
        type=positive,
        default=100_000,
        metavar="N",
        help="with --agent or --label: the most traces looked at (default 100000)",
    )
    evaluate.add_argument(
        "--save",
        action="store_true",
        help="keep the verdicts on the control plane, a trace linked to each trace checked "
        "(chronicle traces --failing CHECK finds them); off, by default",
    )
    evaluate.add_argument(
        "--profile", metavar="MODULE:NAME", help="the AgentProfile in code, with its checks"
    )
    evaluate.add_argument(
        "--judge", metavar="PROVIDER:MODEL", help="ask a model too (openai:gpt-4o-mini)"
    )
    evaluate.add_argument(
        "--judge-runs", type=positive, default=1, metavar="N", help="ask the judge N times each"
    )
    evaluate.add_argument(
        "--reference", metavar="TRACE|FILE", help="compare the tool calls with this trace's"
    )
    evaluate.add_argument(
        "--trajectory",
        choices=("strict", "unordered", "subset", "superset"),
        help="how the tool calls match the reference's (default strict)",
    )
    evaluate.add_argument(
        "--trajectory-args", action="store_true", help="the tool calls' arguments must match too"
    )
    evaluate.add_argument(
        "--write-test", type=Path, metavar="DIR", help="write the incident and a pytest test"
    )
    evaluate.add_argument(
        "--json",
        action="store_true",
        help="the verdicts as JSON (with --agent or --label: one object a line, then the summary)",
    )


_COMMANDS: dict[str, Callable[[argparse.Namespace, IO[str]], int]] = {
    "traces": traces_command,
    "show": show_command,
    "save": save_command,
    "serve": serve_command,
    "report": report_command,
    "diff": diff_command,
    "replay": replay_command,
    "agents": agents_command,
    "evaluate": evaluate_command,
}


def _fail(message: object, *, whole: bool = False) -> None:
    """One line on stderr (``whole``: the first line, then the rest as it is)."""
    first, _, rest = str(message).partition("\n")
    text = " ".join(first.split()) or "failed"
    print(f"{prog()}: {text}", file=sys.stderr)
    if whole and rest.strip():
        print(rest.rstrip(), file=sys.stderr)


@contextlib.contextmanager
def _patience(args: argparse.Namespace) -> Iterator[None]:
    """For a command that reads the control plane: after ``_PATIENCE`` s without an answer,
    one line on stderr says that it waits, where, and how long at most."""
    if args.command not in ("traces", "show", "save", "agents", "evaluate"):
        yield
        return
    connection = Connection.resolve(args.url, None)
    with closing(connection.client()) as client:
        where = client.shown_url  # the URL with its password masked

    def say() -> None:
        print(
            f"{prog()}: waiting for the control plane at {where} (no answer yet; giving up "
            f"after {connection.timeout:g} s without one)",
            file=sys.stderr,
            flush=True,
        )

    timer = threading.Timer(_PATIENCE, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0 done, 1 failed, 2 usage, 130 Ctrl-C).

    With no command, prints the help and returns 0.
    """
    try:
        parser = _parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        with _patience(args):
            return _COMMANDS[args.command](args, sys.stdout)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `chronicle traces | head`: the reader left; that is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (ConfigurationError, Usage) as exc:
        _fail(exc)
        return 2
    except LocalControlPlaneError as exc:  # the server's last lines say why
        _fail(exc, whole=True)
        return 1
    except (ChronicleError, LookupError, OSError) as exc:
        _fail(exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
