"""``chronicle serve``: the control plane on this machine, and Chronicle's own pages beside it.

The control plane runs as its own process (``chronicle.save.server.ControlPlaneProcess``) with
a database that persists in the user's data folder, proven to be its own server before it says
so; on a port another program holds it says what holds it, and without ``--port`` runs on the
next free one. Beside it, a small HTTP server in a thread of this process (``PageServer``, the
standard library's, on 127.0.0.1 only) serves the trace page (``chronicle.read.page``) of every
trace at ``/trace/<id>``, read from the control plane on each request, and an index of the
most recent traces at ``/``; its address is printed beside the control plane's.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import importlib.util
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import httpx

from chronicle.cli.common import Usage, positive
from chronicle.cli.show import usage_line
from chronicle.errors import ChronicleError, ControlPlaneError, LocalControlPlaneError
from chronicle.read.page import index_page, trace_page
from chronicle.read.traces import find_traces, show
from chronicle.save.client import HttpControlPlane
from chronicle.save.server import ControlPlaneProcess, DatabaseInUseError, listening_program

__all__ = [
    "DEFAULT_PORT",
    "PageServer",
    "control_plane_at",
    "data_dir",
    "port_is_free",
    "serve_command",
    "serve_parser",
    "stop_on_sigterm",
]

DEFAULT_PORT = 8800
_SERVER_HINT = (
    "the control plane is the agentplane-control-plane package, not installed here; install "
    "it with: pip install 'agentplane-control-plane>=1,<2' (in a Chronicle checkout: "
    "pip install -e '.[server]')"
)


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


def _holder(port: int) -> tuple[str, bool]:
    """What holds ``127.0.0.1:port``, in words for a message, and whether it is a control
    plane (its ``/health`` says so). For another program: whether it answers HTTP there, and
    its name and pid when the system shows them."""
    url = f"http://127.0.0.1:{port}"
    try:
        answer = httpx.get(f"{url}/health", timeout=1.0)
    except httpx.HTTPError:
        what = "a program that does not answer HTTP, so not a control plane"
    else:
        found = control_plane_at(url)
        if found is not None:
            version = found.get("version", "?")
            return f"a control plane (version {version}) already runs at {url}", True
        what = f"a web server that is not a control plane (GET /health: {answer.status_code}"
        server = answer.headers.get("server")
        what += f", server {server})" if server else ")"
    program = listening_program(port)
    return what + (f": {program}" if program else ""), False


def _free_after(port: int) -> int:
    """The first free port after ``port`` (of the next 20), else one the system picks."""
    for candidate in range(port + 1, min(port + 21, 65536)):
        if port_is_free(candidate):
            return candidate
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        free: int = probe.getsockname()[1]
    return free


def _port_to_serve(asked: int | None, out: IO[str]) -> int:
    """The port ``chronicle serve`` runs on: ``asked`` (``--port``), else ``DEFAULT_PORT``.
    When it is held: by a control plane, a usage error saying to record to it or pass another
    port; by another program, a usage error naming it and a free port when the port was asked
    for, else the next free port, said on ``out``."""
    port = asked or DEFAULT_PORT
    if port_is_free(port):
        return port
    holder, control_plane = _holder(port)
    url = f"http://127.0.0.1:{port}"
    free = _free_after(port)
    if control_plane:
        raise Usage(
            f"port {port} is in use: {holder}; record to it (export "
            f"CHRONICLE_CONTROL_PLANE_URL={url}), or run another with --port {free} (free now)"
        )
    if asked is not None:
        raise Usage(f"port {port} is in use by {holder}; pass another port: --port {free} is free")
    out.write(f"port {port} is held by {holder}; running on port {free} instead\n")
    return free


# ---- the pages ---------------------------------------------------------------------------------

_TRACE_PATH = re.compile(r"/trace/([0-9a-f]{32})/?\Z")
_INDEX_SIZE = 50
"""Traces the index lists, newest first."""


class PageServer:
    """Chronicle's pages for the control plane at ``control_plane_url``, served from a thread:
    ``/`` lists the most recent traces, ``/trace/<id>`` is that trace's page (each link to
    another trace stays on this server). Listens on 127.0.0.1 only, on ``port`` (``0``: one the
    system picks), or on ``prefer_port`` when it can be bound, else on one the system picks
    (a port is taken by binding it, never checked first: another program may take it between
    a check and the bind); ``url`` is its address, known from the start. A page that cannot be
    read (no such trace, the control plane down) is an error page saying why, never a crash of
    the server. Raises ``OSError`` only when ``port`` (not a preferred one) cannot be bound.

    Use as a context manager, or ``start()`` then ``close()``."""

    def __init__(
        self, control_plane_url: str, port: int = 0, *, prefer_port: int | None = None
    ) -> None:
        if port and prefer_port is not None:
            raise ValueError("give port (that port or fail) or prefer_port (it, else a free one)")
        self.control_plane_url = control_plane_url.rstrip("/")
        self._server = _bound(self._handler(), port, prefer_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="chronicle-pages", daemon=True
        )

    @property
    def url(self) -> str:
        """The server's address, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def trace_url(self, trace_id: str) -> str:
        """The address of one trace's page."""
        return f"{self.url}/trace/{trace_id}"

    def start(self) -> PageServer:
        """Start serving in a daemon thread; returns ``self``."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    def __enter__(self) -> PageServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def page(self, path: str) -> tuple[int, str]:
        """The status and HTML of the page at ``path``."""
        if path in ("", "/"):
            try:
                found = find_traces(limit=_INDEX_SIZE, url=self.control_plane_url)
            except ChronicleError as exc:
                return 502, _error_page(f"the control plane did not answer: {exc}")
            return 200, index_page(found, control_plane=self.control_plane_url)
        match = _TRACE_PATH.match(path)
        if match is None:
            return 404, _error_page(
                f"no page at {path}; a trace's page is /trace/<its 32-hex id>, the index is /"
            )
        try:
            tree = show(match.group(1), url=self.control_plane_url)
        except ChronicleError as exc:
            return 404, _error_page(str(exc))
        return 200, trace_page(tree, link=lambda t: f"/trace/{t}", usage=usage_line(tree))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        pages = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "chronicle-pages"

            def do_GET(self) -> None:
                try:
                    status, text = pages.page(self.path.partition("?")[0])
                except Exception as exc:  # a bug of a page: said on the page, the server lives
                    status = 500
                    text = _error_page(f"chronicle could not draw this page: {exc!r}")
                body = text.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the pages are not the server's log."""

        return Handler


def _error_page(message: str) -> str:
    return (
        "<!DOCTYPE html><html lang=en><meta charset=utf-8><title>chronicle</title>"
        f"<p>{html.escape(message)}</p><p><a href='/'>the recent traces</a></p></html>"
    )


class _PagesHTTPServer(ThreadingHTTPServer):
    daemon_threads = True


def _bound(
    handler: type[BaseHTTPRequestHandler], port: int, prefer_port: int | None
) -> ThreadingHTTPServer:
    """A server for ``handler`` bound on 127.0.0.1: on ``prefer_port`` when that binds (a port
    outside 1-65535 is not tried), else on ``port``."""
    if prefer_port is not None and 0 < prefer_port < 65536:
        with contextlib.suppress(OSError):  # held by another program, or not ours to bind
            return _PagesHTTPServer(("127.0.0.1", prefer_port), handler)
    return _PagesHTTPServer(("127.0.0.1", port), handler)


# ---- the command -------------------------------------------------------------------------------


def serve_parser(commands: Any) -> None:
    """Add ``chronicle serve`` to the subcommands."""
    serve = commands.add_parser(
        "serve",
        help="run a local control plane (until Ctrl-C)",
        description="Run the AgentPlane control plane on 127.0.0.1 with a database that "
        "persists in your data folder. It says it runs only once the server on the port is its "
        "own. When the port is held it says by what: a control plane is one to record to; "
        "another program makes it run on the next free port, unless --port asked for this one.",
    )
    serve.add_argument(
        "--port",
        type=positive,
        metavar="N",
        help=f"the port (default: {DEFAULT_PORT}, or the next free one when a program that is "
        "not a control plane holds it)",
    )
    where = serve.add_mutually_exclusive_group()
    where.add_argument(
        "--database",
        type=Path,
        metavar="PATH",
        help=f"the SQLite file (default: {data_dir() / 'control-plane.db'})",
    )
    where.add_argument(
        "--database-url",
        metavar="URL",
        help="a database served elsewhere, as a SQLAlchemy URL: PostgreSQL is "
        "postgresql+psycopg://USER:PASSWORD@HOST:5432/DB (pip install 'psycopg[binary]'); "
        "off, by default",
    )
    serve.add_argument(
        "--verbose",
        action="store_true",
        help="also print the server's own log, each request (off, by default)",
    )


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


def serve_command(args: argparse.Namespace, out: IO[str]) -> int:
    """Run ``chronicle serve`` until Ctrl-C (0) or until the control plane exits on its own."""
    if _server_command() is None:
        raise Usage(_SERVER_HINT)
    port = _port_to_serve(args.port, out)
    url = f"http://127.0.0.1:{port}"
    if args.database_url:
        control_plane = ControlPlaneProcess(port=port, database_url=args.database_url)
        database: Path | str = control_plane.shown_database
    else:
        database = (args.database or data_dir() / "control-plane.db").resolve()
        control_plane = ControlPlaneProcess(port=port, database_path=database)
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
                if port_is_free(port):
                    raise
                holder, control_plane_there = _holder(port)
                then = "record to that one, or " if control_plane_there else ""
                raise ChronicleError(
                    f"port {port} was taken while the control plane started: {holder}; "
                    f"{then}run chronicle serve again with --port {_free_after(port)} (free now)"
                ) from None
            with PageServer(url, prefer_port=port + 1) as pages:
                out.write(
                    f"control plane running at {url} (Ctrl-C stops it)\n"
                    f"  page      {url}/\n"
                    f"  traces    {pages.url}/ (Chronicle's pages: each trace's call tree)\n"
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
