"""The ``chronicle`` command (also ``python -m chronicle``): from a ticket to the exact call.

::

    chronicle traces [--session-id S] [--message-id M] [--user-id U] [--label k:v ...]
                     [--agent NAME] [--since 2h] [--until 2026-12-01T18:00] [--limit N] [--json]
    chronicle show TRACE_ID [--span S] [--envelope ID|name#n] [--json]
    chronicle save TRACE_ID [--span S | --all-spans] -o FILE
    chronicle replay PATH... --entry MODULE:FUNCTION [--from-control-plane --label k:v ...]
                     [--run NAME[#n]] [--ignore PATH] [--fail-on-output] [--json] [--junit-xml F]
                     [--override NAME#n=JSON] [--fail NAME#n=ERROR[: message]]
                     [--model NAME#n=MODEL] [--record]
    chronicle diff A B [--span S] [--span-b S] [--ignore PATH ...] [--json]
    chronicle agents [--limit N] [--offset M] [--since 7d] [--scan-limit N] [--json]
    chronicle agents show AGENT_ID
    chronicle evaluate TRACE_ID [--profile MODULE:NAME] [--judge PROVIDER:MODEL]
                       [--write-test DIR] [--json]
    chronicle serve [--port 8800] [--database PATH] [--verbose]
    chronicle --version

``traces``, ``show`` and ``save`` read the control plane named by ``--url`` or the usual
configuration (``CHRONICLE_CONTROL_PLANE_URL``, ``CHRONICLE_API_KEY``, the config file); when it
has not answered within a second, one line on stderr says that they wait and for how long.
``serve`` runs the real control plane locally with a database that persists in the user's data
folder, proven to be its own server before it says so, and prints only its own lines unless
``--verbose``. Expected failures (no such trace, a server that is not a control plane, a control
plane that is down or refuses the key) print one line on stderr and exit 1; a usage or
configuration error exits 2; Ctrl-C exits 130. A bare ``chronicle`` prints the help. Colour only
on a terminal, and not when ``NO_COLOR`` is set.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from chronicle import runtime
from chronicle._version import __version__
from chronicle.check.correction import evaluate_command
from chronicle.errors import (
    ChronicleError,
    ConfigurationError,
    ControlPlaneError,
    LocalControlPlaneError,
    ReplayError,
)
from chronicle.read.agents import agent_record, find_agents, render_agents
from chronicle.read.traces import _Connection, find_traces, parse_time, show
from chronicle.read.waterfall import can_draw, render_envelope, render_table, use_color
from chronicle.replay import corpus
from chronicle.replay.diff import diff
from chronicle.save.client import HttpControlPlane
from chronicle.save.incident import SpanChoice, read_incident
from chronicle.save.server import ControlPlaneProcess, DatabaseInUseError

__all__ = ["control_plane_at", "data_dir", "main", "port_is_free", "stop_on_sigterm"]

DEFAULT_PORT = 8800
_SERVER_HINT = (
    "the control plane is the agentplane-control-plane package, not installed here; install "
    "it with: pip install 'agentplane-control-plane>=1,<2' (in a Chronicle checkout: "
    "pip install -e '.[server]')"
)
_PATIENCE = 1.0
"""Seconds a read waits for the control plane before saying that it waits."""


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


def control_plane_at(url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The ``/health`` answer of the control plane at ``url``; ``None`` when nothing answers
    there or what answers is not a control plane. Never raises for either."""
    with closing(HttpControlPlane(url, None, timeout)) as client:
        try:
            answer = client.health()
        except ControlPlaneError:
            return None
    return answer if answer.get("service") == "control-plane" else None


def _holder(port: int) -> str:
    """What holds ``127.0.0.1:port``, in words, for a message."""
    url = f"http://127.0.0.1:{port}"
    found = control_plane_at(url)
    if found is None:
        return f"another program (not a control plane) holds port {port}"
    return f"a control plane (version {found.get('version', '?')}) already runs at {url}"


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
    parser.add_argument("--version", action="version", version=f"chronicle {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

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
        "--replays-of",
        metavar="TRACE",
        help="the recorded replays of this trace (chronicle replay --record, record=True)",
    )
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

    _diff_parser(commands, connection)

    _agents_parser(commands, connection)

    _evaluate_parser(commands, connection)

    _replay_parser(commands, connection)

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
    serve.add_argument(
        "--verbose", action="store_true", help="also print the server's own log (each request)"
    )
    return parser


# ---- chronicle replay (a corpus of recordings; the engine is chronicle.replay.corpus) ----------


def _replay_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    replay = commands.add_parser(
        "replay",
        parents=[connection],
        help="replay recorded requests against the current code (a regression suite)",
        description="Call --entry with the recorded input of every incident file under PATH "
        "(a 32-hex argument is a trace id on the control plane), everything stubbed but the "
        "cut-points; strict. Exit 0 only when every replay passed.",
    )
    replay.add_argument("paths", nargs="*", metavar="PATH", help="incident files, folders, ids")
    replay.add_argument(
        "--entry",
        required=True,
        metavar="MODULE:FUNCTION",
        help="the @chronicle.boundary function each recording's input is passed to, or an ASGI "
        "app (module:app) its recorded HTTP request is sent to (ChronicleMiddleware with "
        "record_request=True recorded it)",
    )
    replay.add_argument("--from-control-plane", action="store_true", help="traces that match:")
    replay.add_argument("--label", type=_label, action="append", default=[], metavar="K:V")
    replay.add_argument("--agent", metavar="NAME")
    replay.add_argument("--since", type=_time, metavar="WHEN")
    replay.add_argument("--limit", type=_positive, default=100, metavar="N", help="default 100")
    replay.add_argument("--run", action="append", default=[], metavar="NAME[#n]")
    replay.add_argument("--ignore", action="append", default=[], metavar="PATH")
    replay.add_argument("--match", choices=("order", "input"), default="order")
    replay.add_argument("--not-strict", action="store_true", help="divergences do not fail")
    replay.add_argument("--fail-on-output", action="store_true")
    replay.add_argument("--json", action="store_true", help="one JSON object per recording")
    replay.add_argument("--junit-xml", type=Path, metavar="FILE")
    replay.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="NAME#n=JSON",
        help="serve this JSON value for that call instead of its recording (a what-if)",
    )
    replay.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="NAME#n=ERROR",
        help="raise this exception (TimeoutError, module.Class; ': message' after it) there",
    )
    replay.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME#n=MODEL",
        help="send that llm call of a wrapped client to another model",
    )
    replay.add_argument(
        "--record",
        action="store_true",
        help="record each replay as a new trace and print its diff against the original",
    )


def _replay(args: argparse.Namespace, out: IO[str]) -> int:
    try:
        options = corpus.Options(
            run=corpus.plan_targets(args.run),
            strict=not args.not_strict,
            match=args.match,
            ignore=tuple(args.ignore),
            fail_on_output=args.fail_on_output,
            overrides=tuple(_fork(text, "--override", _json_value) for text in args.override),
            failures=tuple(_fork(text, "--fail", _exception) for text in args.fail),
            models=tuple(_fork(text, "--model", _model) for text in args.model),
            record=args.record,
        )
    except ValueError as exc:
        raise _Usage(str(exc)) from None
    hexes = [p for p in args.paths if len(p) == 32 and all(c in "0123456789abcdef" for c in p)]
    paths = [p for p in args.paths if p not in hexes]
    if not args.paths and not args.from_control_plane:
        raise _Usage("name incident files or folders, trace ids, or --from-control-plane")
    entry = corpus.load_entry(args.entry)
    if args.record:
        _record_to(args.url)
    client = None
    if hexes or args.from_control_plane:
        client = _Connection.resolve(args.url, None).client()
    if args.from_control_plane:
        found = find_traces(
            labels=dict(args.label),
            agent=args.agent,
            since=args.since,
            limit=args.limit,
            url=args.url,
        )
        hexes += [t.trace_id for t in found]
    began = time.perf_counter()

    def each(result: Any) -> None:
        text = json.dumps(result.to_json(), ensure_ascii=False) if args.json else result.describe()
        out.write(text + "\n")
        if result.new_trace_id is not None and not args.json:
            out.write(_what_changed(result, out) + "\n")
        out.flush()

    try:
        results = corpus.replay_corpus(
            paths, entry, trace_ids=hexes, client=client, options=options, each=each
        )
    finally:
        if client is not None:
            client.close()
    took = time.perf_counter() - began
    print(corpus.summary(results, took), file=sys.stderr if args.json else out)
    if args.junit_xml is not None:
        args.junit_xml.write_text(corpus.junit_xml(results, took), encoding="utf-8")
    return 0 if results and all(r.passed for r in results) else 1


def _fork(text: str, option: str, value_of: Callable[[str, str], Any]) -> tuple[str, int, Any]:
    """``NAME#n=VALUE`` as ``(name, n, value_of(VALUE, option))``; ``ValueError`` saying the
    form when it is not one."""
    target, sep, value = text.partition("=")
    name, hash_, number = target.rpartition("#")
    if not sep or not hash_ or not name or not number.isdigit() or int(number) < 1:
        raise ValueError(
            f"{option} takes NAME#n={_FORMS[option]} (n from 1, as chronicle show numbers "
            f"calls), got {text!r}"
        )
    return name, int(number), value_of(value, option)


_FORMS = {"--override": "JSON", "--fail": "ExceptionType[: message]", "--model": "MODEL"}


def _json_value(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{option}: the value {text!r} is not JSON ({exc.msg}); quote it for the shell, "
            """as in --override 'search#1={"hits": []}'"""
        ) from None


def _exception(text: str, option: str) -> BaseException:
    kind, _, message = text.partition(":")
    kind, message = kind.strip(), message.strip()
    module_name, dot, class_name = kind.rpartition(".")
    found: Any = None
    try:
        if dot:
            found = getattr(importlib.import_module(module_name), class_name, None)
        else:
            found = getattr(builtins, kind, None)
    except Exception:
        found = None
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise ValueError(
            f"{option}: {kind!r} is not an exception class; name a built-in one (TimeoutError, "
            "ConnectionError) or module.Class"
        )
    try:
        return found(message or f"injected by chronicle replay {option}")
    except Exception as exc:
        raise ValueError(f"{option}: {kind} cannot be built from a message ({exc})") from None


def _model(text: str, option: str) -> str:
    if not text:
        raise ValueError(f"{option} takes NAME#n=MODEL, with a model name after '='")
    return text


def _record_to(url: str | None) -> None:
    """Record to the control plane the command reads (``--url``, else the configuration)."""
    target = _Connection.resolve(url, None).url
    if runtime.current().settings.control_plane_url != target:
        runtime.configure(control_plane_url=target)


def _what_changed(result: Any, out: IO[str]) -> str:
    """The lines under a recorded replay: the new trace and its diff against the original."""
    runtime.flush(10)
    original, new = result.trace_id, result.new_trace_id
    lines = [f"    recorded as trace {new} (chronicle show {new})"]
    if original is None:
        return "\n".join(lines)
    try:
        found = diff(original, new)
    except ChronicleError as exc:
        lines.append(f"    no diff against {original}: {exc}")
        return "\n".join(lines)
    lines.append(f"    diff {original} -> {new}:")
    text = found.render(width=_width(out), color=use_color(out))
    lines += ["    " + line for line in text.splitlines()]
    return "\n".join(lines)


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
        replays_of=args.replays_of,
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


@contextlib.contextmanager
def _echo(log: Path, enabled: bool) -> Iterator[None]:
    """With ``enabled``, copy what the server writes to ``log`` onto stderr while in the block."""
    if not enabled:
        yield
        return
    done = threading.Event()

    def follow() -> None:
        position = 0
        while True:
            finished = done.is_set()
            with contextlib.suppress(OSError), open(log, "rb") as source:
                source.seek(position)
                chunk = source.read()
                position += len(chunk)
                if chunk:
                    sys.stderr.write(chunk.decode("utf-8", errors="replace"))
                    sys.stderr.flush()
            if finished:
                return
            done.wait(0.2)

    follower = threading.Thread(target=follow, name="chronicle-serve-log", daemon=True)
    follower.start()
    try:
        yield
    finally:
        done.set()
        follower.join(2)


def _serve(args: argparse.Namespace, out: IO[str]) -> int:
    if _server_command() is None:
        raise _Usage(_SERVER_HINT)
    database: Path = (args.database or data_dir() / "control-plane.db").resolve()
    url = f"http://127.0.0.1:{args.port}"
    if not port_is_free(args.port):
        raise _Usage(
            f"port {args.port} is in use: {_holder(args.port)}; use that one, or pass --port N"
        )
    control_plane = ControlPlaneProcess(port=args.port, database_path=database)
    stop_on_sigterm()
    out.write(f"starting the control plane on {url} (database {database})\n")
    out.flush()
    try:
        with _echo(control_plane.log_path, args.verbose):
            try:
                control_plane.start(timeout=60)
            except DatabaseInUseError:
                raise ChronicleError(
                    f"the database {database} is served by another chronicle serve (or demo); "
                    "use that one, stop it, or pass --database PATH"
                ) from None
            except LocalControlPlaneError:
                if port_is_free(args.port):
                    raise
                raise ChronicleError(
                    f"port {args.port} was taken while the control plane started: "
                    f"{_holder(args.port)}; use that one, or pass --port N"
                ) from None
            out.write(
                f"control plane running at {url} (Ctrl-C stops it)\n"
                f"  page      {url}/\n"
                f"  database  {database}\n"
                f"record to it with:\n"
                f"  export CHRONICLE_CONTROL_PLANE_URL={url}\n"
            )
            out.flush()
            while control_plane.running:
                time.sleep(0.25)
            tail = control_plane.log_tail(20)
        raise LocalControlPlaneError(
            f"the control plane exited on its own; its last lines:\n{tail}"
        )
    except KeyboardInterrupt:
        control_plane.close()
        out.write("stopped the control plane\n")
        return 0
    finally:
        control_plane.close()


# ---- diff: what changed between two runs ------------------------------------------------------


def _diff_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    diff_cmd = commands.add_parser(
        "diff",
        parents=[connection],
        help="what changed between two recordings of an agent (exit 1 when they differ)",
        description="Compare two recorded request spans call by call (the call trees aligned "
        "per parent): calls only in A or B, changed inputs, outputs and statuses, latency and "
        "token deltas. A and B are each a trace id (32 hex characters) or an incident file. "
        "Exit 0 when they are the same, 1 when they differ, 2 on a usage error or an input that "
        "cannot be read.",
    )
    diff_cmd.add_argument("a", metavar="A", help="a trace id or an incident file")
    diff_cmd.add_argument("b", metavar="B", help="a trace id or an incident file")
    diff_cmd.add_argument("--span", metavar="S", help="A's span, when its trace has several")
    diff_cmd.add_argument("--span-b", metavar="S", help="B's span, when its trace has several")
    diff_cmd.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="a volatile path not compared, as replay's ignore= (repeatable)",
    )
    diff_cmd.add_argument("--json", action="store_true", help="the diff as JSON (docs/design.md)")


def _diff(args: argparse.Namespace, out: IO[str]) -> int:
    needs_reader = any(
        _TRACE_ID.match(side) and not Path(side).exists() for side in (args.a, args.b)
    )
    try:
        if needs_reader:
            connection = _Connection.resolve(args.url, None)
            with closing(connection.client()) as client:
                found = diff(
                    args.a,
                    args.b,
                    span_a=args.span,
                    span_b=args.span_b,
                    ignore=args.ignore,
                    client=client,
                )
        else:
            found = diff(args.a, args.b, span_a=args.span, span_b=args.span_b, ignore=args.ignore)
    except (ReplayError, ValueError) as exc:  # a side that cannot be read, a bad --ignore
        raise _Usage(str(exc).removeprefix("diff: ")) from None
    if args.json:
        out.write(json.dumps(found.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(found.render(width=_width(out), color=use_color(out)) + "\n")
    return 0 if found.same else 1


_TRACE_ID = re.compile(r"[0-9a-f]{32}\Z")


def _agents_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    agents = commands.add_parser(
        "agents",
        parents=[connection],
        help="list the agents the recorded traces carry (chronicle agents show ID: one)",
        description="Every agent profile on the control plane's traces, most recently seen "
        "first: one row per agent_id (a new version is a row of its own). Reads each trace, "
        "so --since narrows what it reads.",
    )
    agents.add_argument("action", nargs="?", choices=["show"], help="show one agent's profile")
    agents.add_argument("agent", nargs="?", metavar="AGENT_ID", help="an agent_id (or a name)")
    agents.add_argument("--limit", type=_positive, default=25, metavar="N", help="default 25")
    agents.add_argument("--offset", type=int, default=0, metavar="M", help="default 0")
    agents.add_argument("--since", type=_time, metavar="WHEN", help="read traces active since")
    agents.add_argument(
        "--scan-limit", type=_positive, default=5000, metavar="N", help="most traces read"
    )
    agents.add_argument("--json", action="store_true", help="the page as JSON")


def _evaluate_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    evaluate = commands.add_parser(
        "evaluate",
        parents=[connection],
        help="check a trace against its agent's profile (exit 1 when a check fails)",
        description="Check a trace against its agent profile: the tools called, their "
        "arguments against the tools' JSON Schemas, the model settings, the constraint checks "
        "(--profile), and with --judge what only a model can read (instructions, goal).",
    )
    evaluate.add_argument("trace_id")
    evaluate.add_argument(
        "--profile", metavar="MODULE:NAME", help="the AgentProfile in code, with its checks"
    )
    evaluate.add_argument(
        "--judge", metavar="PROVIDER:MODEL", help="ask a model too (openai:gpt-4o-mini)"
    )
    evaluate.add_argument(
        "--write-test", type=Path, metavar="DIR", help="write the incident and a pytest test"
    )
    evaluate.add_argument("--json", action="store_true", help="the verdicts as JSON")


def _evaluate(args: argparse.Namespace, out: IO[str]) -> int:
    return evaluate_command(
        args.trace_id,
        url=args.url,
        profile_path=args.profile,
        judge=args.judge,
        write_to=args.write_test,
        as_json=args.json,
        out=out,
    )


def _agents(args: argparse.Namespace, out: IO[str]) -> int:
    if args.action == "show" or args.agent:
        if args.action != "show" or not args.agent:
            raise _Usage("to see one agent: chronicle agents show AGENT_ID")
        found = agent_record(args.agent, url=args.url, scan_limit=args.scan_limit)
        out.write(json.dumps(found.to_json(full=True), indent=2, ensure_ascii=False) + "\n")
        return 0
    if args.offset < 0 or args.limit > 1000:
        raise _Usage(
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
        out.write(json.dumps(page.to_json(), indent=2, ensure_ascii=False) + "\n")
    elif not page.agents:
        print("no agents: no recorded trace carries an agent profile", file=sys.stderr)
    else:
        out.write(render_agents(page, width=_width(out)) + "\n")
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace, IO[str]], int]] = {
    "traces": _traces,
    "show": _show,
    "save": _save,
    "serve": _serve,
    "diff": _diff,
    "replay": _replay,
    "agents": _agents,
    "evaluate": _evaluate,
}


def _fail(message: object, *, whole: bool = False) -> None:
    """One line on stderr (``whole``: the first line, then the rest as it is)."""
    first, _, rest = str(message).partition("\n")
    text = " ".join(first.split()) or "failed"
    print(f"{_prog()}: {text}", file=sys.stderr)
    if whole and rest.strip():
        print(rest.rstrip(), file=sys.stderr)


@contextlib.contextmanager
def _patience(args: argparse.Namespace) -> Iterator[None]:
    """For a command that reads the control plane: after ``_PATIENCE`` s without an answer,
    one line on stderr says that it waits, where, and how long at most."""
    if args.command not in ("traces", "show", "save", "agents", "evaluate"):
        yield
        return
    connection = _Connection.resolve(args.url, None)
    with closing(connection.client()) as client:
        where = client.shown_url  # the URL with its password masked

    def say() -> None:
        print(
            f"{_prog()}: waiting for the control plane at {where} (no answer yet; giving up "
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
    except (ConfigurationError, _Usage) as exc:
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
