"""The ``chronicle`` command (also ``python -m chronicle``): from a ticket to the exact call.

::

    chronicle traces [--session-id S] [--message-id M] [--user-id U] [--label k:v ...]
                     [--agent NAME] [--since 2h] [--until 2026-12-01T18:00] [--limit N] [--json]
    chronicle show TRACE_ID [--span S] [--envelope ID|name#n] [--json]
    chronicle save TRACE_ID [--span S | --all-spans] -o FILE
    chronicle serve [--port 8800] [--database PATH]

``traces``, ``show`` and ``save`` read the control plane named by ``--url`` or the usual
configuration (``CHRONICLE_CONTROL_PLANE_URL``, ``CHRONICLE_API_KEY``, the config file).
``serve`` runs the real control plane locally with a database that persists in the user's data
folder. Expected failures (no such trace, a control plane that is down or refuses the key) print
one line on stderr and exit 1; a usage or configuration error exits 2; Ctrl-C exits 130. Colour
only on a terminal, and not when ``NO_COLOR`` is set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import IO

from chronicle.errors import ChronicleError, ConfigurationError, ControlPlaneError
from chronicle.save.client import HttpControlPlane
from chronicle.save.incident import SpanChoice, read_incident
from chronicle.traces import _Connection, find_traces, parse_time, show
from chronicle.waterfall import can_draw, render_envelope, render_table, use_color

__all__ = ["data_dir", "main", "port_is_free", "stop_on_sigterm"]

DEFAULT_PORT = 8800
_SERVER_HINT = (
    "the control plane is the agentplane-control-plane package, not installed here; install "
    "it with: pip install 'agentplane-chronicle[server]' "
    "(or: pip install 'agentplane-control-plane>=1,<2')"
)


class _Usage(Exception):
    """A command-line mistake found after parsing (exit status 2)."""


def data_dir() -> Path:
    """Chronicle's folder in the user's data folder: ``$XDG_DATA_HOME/chronicle``, else
    ``~/Library/Application Support/chronicle`` (macOS), ``%LOCALAPPDATA%\\chronicle``
    (Windows) or ``~/.local/share/chronicle``."""
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "chronicle"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "chronicle"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "chronicle"
    return Path.home() / ".local" / "share" / "chronicle"


def stop_on_sigterm() -> None:
    """Make SIGTERM end a long-running command the way Ctrl-C does (a clean stop, no
    orphaned server). Main thread only; elsewhere a no-op."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def port_is_free(port: int) -> bool:
    """Whether ``127.0.0.1:port`` can be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---- the parser ------------------------------------------------------------------------------


def _prog() -> str:
    return "python -m chronicle" if Path(sys.argv[0]).name == "__main__.py" else "chronicle"


def _time(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition(":")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expects key:value, got {text!r}")
    return key, value


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expects a whole number from 1, got {text!r}")
    return number


def _parser() -> argparse.ArgumentParser:
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument(
        "--url",
        help="the control plane to read (default: CHRONICLE_CONTROL_PLANE_URL); "
        "the key is CHRONICLE_API_KEY",
    )
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Find recorded traces, show their call tree, save a span as a fixture.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    traces = commands.add_parser(
        "traces",
        parents=[connection],
        help="list the traces that match, newest first",
        description="The traces whose labels, agent and start time match, newest first.",
    )
    traces.add_argument("--session-id", metavar="S")
    traces.add_argument("--message-id", metavar="M")
    traces.add_argument("--user-id", metavar="U")
    traces.add_argument(
        "--label", type=_label, action="append", default=[], metavar="K:V", help="repeatable"
    )
    traces.add_argument("--agent", metavar="NAME", help="an agent profile's name or agent_id")
    traces.add_argument(
        "--since", type=_time, metavar="WHEN", help="started at or after: 2h, 30m, 1d, or a time"
    )
    traces.add_argument(
        "--until", type=_time, metavar="WHEN", help="started at or before (same forms)"
    )
    traces.add_argument("--limit", type=_positive, default=20, metavar="N", help="default 20")
    traces.add_argument("--json", action="store_true", help="a JSON array instead of a table")

    show_cmd = commands.add_parser(
        "show",
        parents=[connection],
        help="print a trace's call tree (the waterfall)",
        description="A trace's call tree: one line per span and envelope, on one time axis.",
    )
    show_cmd.add_argument("trace_id")
    show_cmd.add_argument("--span", metavar="S", help="only this span (an id from the header)")
    show_cmd.add_argument(
        "--envelope", metavar="ID", help="one envelope's input and output in full (id or name#n)"
    )
    show_cmd.add_argument("--json", action="store_true", help="the trace and envelopes as JSON")

    save = commands.add_parser(
        "save",
        parents=[connection],
        help="save a recorded request as an incident file (a regression test)",
        description="Write an incident file (a span's envelopes) for the pytest marker or "
        "chronicle.replay(FILE). A trace of one span needs no span id; of several, choose one "
        "with --span or keep them all with --all-spans.",
    )
    save.add_argument("trace_id")
    save.add_argument("span_id", nargs="?", help="the span to save (same as --span)")
    save.add_argument("--span", metavar="S", help="the span to save")
    save.add_argument(
        "--all-spans",
        action="store_true",
        help="save every span of the trace as one incident (a multi-service request)",
    )
    save.add_argument("-o", "--out", required=True, type=Path, help="the file to write")

    serve = commands.add_parser(
        "serve",
        help="run a local control plane (until Ctrl-C)",
        description="Run the AgentPlane control plane on 127.0.0.1 with a database that "
        "persists in your data folder.",
    )
    serve.add_argument("--port", type=_positive, default=DEFAULT_PORT, help="default 8800")
    serve.add_argument(
        "--database",
        type=Path,
        metavar="PATH",
        help=f"the SQLite file (default: {data_dir() / 'control-plane.db'})",
    )
    return parser


# ---- the commands ----------------------------------------------------------------------------


def _width(stream: IO[str]) -> int:
    if getattr(stream, "isatty", lambda: False)():
        return max(60, min(shutil.get_terminal_size((100, 24)).columns, 200))
    return 100


def _traces(args: argparse.Namespace, out: IO[str]) -> int:
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
    )
    if args.json:
        out.write(json.dumps([s.to_json() for s in found], indent=2, ensure_ascii=False) + "\n")
        return 0
    if not found:
        print("no traces match", file=sys.stderr)
        return 0
    text = render_table(
        found, width=_width(out), color=use_color(out), ascii_only=not can_draw(out)
    )
    out.write(text + "\n")
    return 0


def _show(args: argparse.Namespace, out: IO[str]) -> int:
    tree = show(args.trace_id, url=args.url)
    if args.span:
        tree = tree.only_span(args.span)
    if args.envelope:
        envelope = tree.envelope(args.envelope)
        if args.json:
            out.write(json.dumps(envelope, indent=2, ensure_ascii=False) + "\n")
            return 0
        node = next(n for n in tree.nodes if n.envelope is envelope)
        out.write(render_envelope(envelope, node, color=use_color(out)) + "\n")
        return 0
    if args.json:
        out.write(json.dumps(tree.to_json(), indent=2, ensure_ascii=False) + "\n")
        return 0
    text = tree.render(width=_width(out), color=use_color(out), ascii_only=not can_draw(out))
    out.write(text + "\n")
    return 0


def _save(args: argparse.Namespace, out: IO[str]) -> int:
    if args.span_id and args.span and args.span_id != args.span:
        raise _Usage(f"two span ids given: {args.span_id} and --span {args.span}")
    span_id = args.span or args.span_id
    if span_id and args.all_spans:
        raise _Usage("--all-spans saves every span; leave out the span id")
    connection = _Connection.resolve(args.url, None)
    with closing(connection.client()) as client:
        incident = read_incident(client, args.trace_id, span_id, all_spans=args.all_spans)
    if isinstance(incident, SpanChoice):  # several spans, none chosen: list them, ask for one
        print(incident.describe(), file=sys.stderr)
        return 2
    incident.write(args.out)
    kept = ", ".join(f"{s.service or '?'} {s.span_id}" for s in incident.spans)
    out.write(f"saved {len(incident.envelopes)} envelope(s) of span(s) {kept} to {args.out}\n")
    return 0


def _server_command() -> list[str] | None:
    """How to run the control plane's CLI here: its module, else a ``control-plane`` script."""
    if importlib.util.find_spec("control_plane") is not None:
        return [sys.executable, "-m", "control_plane"]
    found = shutil.which("control-plane")
    return [found] if found else None


def _healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until the control plane at ``url`` answers ``/health``; ``False`` if it exited."""
    deadline = time.monotonic() + timeout
    with closing(HttpControlPlane(url, None, 1.0)) as client:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.health().get("service") == "control-plane":
                    return True
            except ControlPlaneError:
                pass
            time.sleep(0.1)
    return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ask the server to stop as Ctrl-C does, then insist."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _serve(args: argparse.Namespace, out: IO[str]) -> int:
    command = _server_command()
    if command is None:
        raise _Usage(_SERVER_HINT)
    database: Path = (args.database or data_dir() / "control-plane.db").resolve()
    url = f"http://127.0.0.1:{args.port}"
    if not port_is_free(args.port):
        raise _Usage(
            f"port {args.port} is in use (is a control plane already running at {url}?); "
            "use that one, or pass --port N"
        )
    database.parent.mkdir(parents=True, exist_ok=True)
    argv = [*command, "serve", "--host", "127.0.0.1", "--port", str(args.port)]
    argv += ["--database-url", f"sqlite:///{database.as_posix()}"]
    stop_on_sigterm()
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)  # its log goes to the terminal
    try:
        if not _healthy(url, process, 60.0):
            raise ChronicleError(
                f"the control plane did not start on {url} (its output is above); "
                f"database {database}"
            )
        out.write(
            f"control plane running at {url} (Ctrl-C stops it)\n"
            f"  page      {url}/\n"
            f"  database  {database}\n"
            f"record to it with:\n"
            f"  export CHRONICLE_CONTROL_PLANE_URL={url}\n"
        )
        out.flush()
        code = process.wait()
        raise ChronicleError(f"the control plane exited on its own (code {code}; see above)")
    except KeyboardInterrupt:
        _stop(process)
        out.write("stopped the control plane\n")
        return 0
    finally:
        _stop(process)


_COMMANDS: dict[str, Callable[[argparse.Namespace, IO[str]], int]] = {
    "traces": _traces,
    "show": _show,
    "save": _save,
    "serve": _serve,
}


def _fail(message: object) -> None:
    text = " ".join(str(message).split("\n")[0].split()) if message else "failed"
    print(f"{_prog()}: {text}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0 done, 1 failed, 2 usage, 130 Ctrl-C)."""
    try:
        args = _parser().parse_args(argv)
        return _COMMANDS[args.command](args, sys.stdout)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `chronicle traces | head`: the reader left; that is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (ConfigurationError, _Usage) as exc:
        _fail(exc)
        return 2
    except (ChronicleError, LookupError, OSError) as exc:
        _fail(exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
