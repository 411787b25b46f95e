"""The real control plane in a subprocess on ``127.0.0.1``: started, proven its own, stopped.

``ControlPlaneProcess`` runs the AgentPlane control plane (the ``agentplane-control-plane``
package: the ``server``, ``demo`` and ``dev`` extras install it) with its own SQLite database, or
on a database served elsewhere (PostgreSQL) named by a SQLAlchemy URL.
``chronicle serve`` runs one; ``chronicle.testing.LocalControlPlane`` adds the reading helpers
tests use. Nothing here touches the network beyond ``127.0.0.1`` and nothing is registered
globally: no ``atexit`` hook, no signal handler, no environment change in this process.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Self

from chronicle.errors import ControlPlaneError, DatabaseInUseError, LocalControlPlaneError
from chronicle.redaction import safe_url
from chronicle.save.client import HttpControlPlane

__all__ = ["ControlPlaneProcess", "DatabaseInUseError", "listening_program"]

_HOST = "127.0.0.1"
_INSTALL_HINT = (
    "the control plane is the agentplane-control-plane package; install it with: "
    "pip install 'agentplane-control-plane>=1,<2' (in a Chronicle checkout: "
    "pip install -e '.[server]', or pip install -e '.[dev]' for the test suite)"
)
_LISTENING = re.compile(r"running on https?://\S+:(\d+)\b", re.IGNORECASE)
"""The line the server (uvicorn) writes once it has bound its port: its own word on the port."""
_BIND_FAILURES = (
    "address already in use",
    "attempting to bind",
    "only one usage of each socket address",
)
_PORT_ATTEMPTS = 5
_POLL_INTERVAL = 0.05
_HEALTH_TIMEOUT = 1.0


def _free_port() -> int:
    """A port that was free a moment ago (bind ``127.0.0.1:0``, read it, close the socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def _reported_ports(output: str) -> set[int]:
    """The ports the server says it listens on, from its own output."""
    return {int(found) for found in _LISTENING.findall(output)}


def _listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a listening TCP socket on ``port`` (``False`` when that
    cannot be seen: psutil, a dependency of the control plane, is not importable here)."""
    try:
        psutil: Any = importlib.import_module("psutil")
    except ImportError:
        return False
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return False
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections
    )


def listening_program(port: int) -> str | None:
    """The program listening on TCP ``port``, as ``name (pid N)`` (its command line, cut to 60
    characters), for a message saying what holds a port. ``None`` when it cannot be seen:
    psutil (a dependency of the control plane) is not importable, the system does not let this
    user list sockets (macOS without root) or the program is another user's, or none listens."""
    try:
        psutil: Any = importlib.import_module("psutil")
    except ImportError:
        return None
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for connection in connections:
        if not (
            connection.status == psutil.CONN_LISTEN
            and connection.laddr
            and connection.laddr.port == port
            and connection.pid
        ):
            continue
        try:
            process = psutil.Process(connection.pid)
            name = " ".join(" ".join(process.cmdline()).split()) or process.name()
        except (psutil.Error, OSError):
            continue
        shown = name if len(name) <= 60 else name[:59] + "…"
        return f"{shown} (pid {connection.pid})"
    return None


class _Claim:
    """An exclusive claim on a database file while one server uses it.

    A lock on ``<database>.lock`` (``flock`` on POSIX, ``msvcrt.locking`` on Windows), never
    waited for, and released by the OS when the holding process ends, so a crash leaves none
    behind. The lock file itself stays (removing it would let two claims meet on two inodes).
    A forked child closes its copy at once: it would otherwise keep the lock held after this
    process released it (``flock`` belongs to the open file, which a fork shares).
    """

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._file: IO[bytes] | None = None

    def take(self) -> bool:
        """Claim it; ``False`` when someone else holds it. Idempotent."""
        if self._file is not None:
            return True
        handle = open(self.path, "a+b")  # noqa: SIM115 (held open as the lock)
        try:
            if sys.platform == "win32":
                import msvcrt  # Windows only: the module does not exist elsewhere

                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            else:
                import fcntl  # POSIX only: the module does not exist on Windows

                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._file = handle
        _HELD.add(self)
        return True

    def release(self) -> None:
        """Give it up (closing the file drops the lock). Idempotent."""
        handle, self._file = self._file, None
        _HELD.discard(self)
        if handle is not None:
            handle.close()


_HELD: weakref.WeakSet[_Claim] = weakref.WeakSet()
"""The claims this process holds, for a forked child to let go of."""


def _let_go_in_child() -> None:
    for claim in list(_HELD):
        claim.release()  # the child's copy of the file only: the parent keeps its lock


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_let_go_in_child)


def _with_driver(url: str) -> str:
    """``url`` naming the PostgreSQL driver that is installed: SQLAlchemy reads a plain
    ``postgresql://`` as psycopg2's, so it names ``psycopg`` (3) when only that one is here;
    ``postgres://`` (which SQLAlchemy refuses) reads as ``postgresql://``. Others stay as given."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgres", "postgresql"):
        return url
    if importlib.util.find_spec("psycopg2") is None and importlib.util.find_spec("psycopg"):
        return f"postgresql+psycopg://{rest}"
    return f"postgresql://{rest}"


def _first_key(api_keys: str | None) -> str | None:
    """The key of the first ``key:tenant:scopes`` entry of ``api_keys``, if any."""
    for part in (api_keys or "").split(","):
        key = part.strip().split(":", 1)[0]
        if key:
            return key
    return None


def _server_command() -> list[str]:
    """The argv prefix that runs the control plane CLI, or raise saying how to install it."""
    if (
        importlib.util.find_spec("control_plane") is not None
        and importlib.util.find_spec("control_plane.__main__") is not None
    ):
        return [sys.executable, "-m", "control_plane"]
    name = "control-plane.exe" if sys.platform == "win32" else "control-plane"
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("control-plane")
    if found:
        return [found]
    raise LocalControlPlaneError(
        f"cannot start a local control plane: neither 'python -m control_plane' nor a "
        f"'control-plane' script is available to {sys.executable}; {_INSTALL_HINT}"
    )


class ControlPlaneProcess:
    """The real control plane in a subprocess on ``127.0.0.1``, proven to be its own server.

    Contract:

    - ``start()`` picks a free port unless ``port`` was given, and a SQLite file in a temporary
      directory unless ``database_path`` or ``database_url`` was given, launches
      ``control-plane serve`` and returns once the server is proven to be this one: its process
      is alive and has reported (or is seen) listening on ``port``, and ``GET /health`` there
      answers as a control plane. Another server answering on the same port is never taken for
      it. ``prefer_port`` tries that port
      first and takes a free one when it is (or becomes, during start) taken; ``moved_from``
      then names it. ``stop()`` ends the process (``kill()``: at once, as a crash would);
      ``start()`` again restarts it on the **same** port and database, so stored data
      survives a stop. ``close()`` stops it and removes the temporary directory (the log, and
      the database if it lives there); a
      ``database_path`` you gave is never removed. After ``close()`` the instance cannot be
      started again. Used as a context manager it is started on entry and closed on exit.
    - The server's output goes to ``log_path`` (in the temporary directory), never to this
      process's stdout; a failed start raises ``LocalControlPlaneError`` quoting its last lines.
    - A database is served by one server at a time (a lock beside it, held while running):
      starting a second one on it raises ``DatabaseInUseError``.
    - ``database_url`` is a SQLAlchemy URL of a database served elsewhere, such as
      ``postgresql+psycopg://user:password@host:5432/db`` (its driver installed beside the
      control plane: ``pip install 'psycopg[binary]'``); a plain ``postgresql://`` (or
      ``postgres://``) URL names that driver when ``psycopg2`` is not installed and ``psycopg``
      is. It reaches the server in its
      environment (``CONTROL_PLANE_DATABASE_URL``), never on its command line, and is shown with
      its password masked; its server arbitrates between writers, so no lock is taken. It
      excludes ``database_path``.
    - ``api_keys`` is ``CONTROL_PLANE_API_KEYS`` (``"key:tenant:scope+scope,..."``); ``api_key``
      is its first key. ``CONTROL_PLANE_*`` variables of this process are not passed on; ``env``
      adds to (and overrides) the child's environment.
    - ``start``/``stop``/``close`` are not meant to be called concurrently.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        prefer_port: int | None = None,
        database_path: Path | None = None,
        database_url: str | None = None,
        api_keys: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if port is not None and prefer_port is not None:
            raise ValueError("give port (that port or fail) or prefer_port (it, else a free one)")
        if database_path is not None and database_url is not None:
            raise ValueError(
                "give database_path (a SQLite file) or database_url (any database), not both"
            )
        self._given_url = None if database_url is None else _with_driver(database_url)
        self._port = port if port is not None else prefer_port
        self._port_fixed = port is not None
        self._prefer_port = prefer_port
        self._moved_from: int | None = None
        self._database_path = Path(database_path) if database_path is not None else None
        self._claim: _Claim | None = None
        self._api_keys = api_keys
        self._env = dict(env or {})
        self._tmpdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False

    def __repr__(self) -> str:
        where = f"http://{_HOST}:{self._port}" if self._port is not None else "no port yet"
        state = "running" if self.running else ("closed" if self._closed else "stopped")
        return f"<{type(self).__name__} {where} {state}>"

    # ---- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()  # no __exit__ follows a failed __enter__: do not leak the temp dir
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self, timeout: float = 30.0) -> Self:
        """Start the server (a no-op if it runs) and wait up to ``timeout`` s for ``/health``.

        Returns ``self`` once the server is proven to be this one (see the class). Raises
        ``LocalControlPlaneError`` if the package is missing, the process exits, or it is not
        proven in time; the process is then not left running. ``DatabaseInUseError`` when
        another ``LocalControlPlane`` serves the database. When the port was picked here (or
        only preferred) and another process took it first, a free port is tried (a few times)
        before giving up; a ``port`` given by you, or the port of a restart, is never changed.
        """
        if self._closed:
            raise LocalControlPlaneError(f"this {type(self).__name__} was closed; create a new one")
        if self.running:
            return self
        command = _server_command()
        tmpdir = self._ensure_tmpdir()
        if self._given_url is not None:
            return self._start_on(command, timeout)
        if self._database_path is None:
            self._database_path = tmpdir / "control_plane.db"
        self._database_path.parent.mkdir(parents=True, exist_ok=True)
        self._claim = self._claim or _Claim(self._database_path)
        if not self._claim.take():
            raise DatabaseInUseError(
                f"the database {self._database_path} is served by another local control plane "
                f"(it holds {self._claim.path}); stop that one, use it, or give this one "
                "another database_path"
            )
        try:
            return self._start_on(command, timeout)
        except BaseException:
            self._claim.release()
            raise

    def _start_on(self, command: list[str], timeout: float) -> Self:
        """Launch the server on a port (picking another while a picked one proves taken) and
        wait until it is proven this one; raise ``LocalControlPlaneError`` when it is not."""
        attempts = 1 if self._port_fixed else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            if self._port is None or (not self._port_fixed and attempt > 1):
                self._port = _free_port()
            offset = self._spawn(command)
            failure = self._wait_own(offset, timeout)
            if failure is None:
                self._port_fixed = True  # a restart must come back on the same port
                return self
            self._kill()
            output = self._log_since(offset)
            if attempt < attempts and any(m in output.lower() for m in _BIND_FAILURES):
                if attempt == 1 and self._port == self._prefer_port:
                    self._moved_from = self._prefer_port
                continue
            raise LocalControlPlaneError(self._describe_failure(failure, output))
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and wait for it to exit (SIGTERM, then SIGKILL after ``timeout``).

        Keeps the port and the database, so ``start()`` brings the same data back. A no-op if
        it is not running.
        """
        self._kill(timeout)
        if self._claim is not None:
            self._claim.release()

    def kill(self) -> None:
        """End the server at once with SIGKILL, as a crash would: no shutdown, nothing it holds
        in memory written out, its connections cut. Keeps the port and the database, so
        ``start()`` brings it back. A no-op if it is not running. (On Windows: ``kill()``.)"""
        process = self._process
        if process is not None and process.poll() is None:
            self._signal(process, terminate=False)
        self.stop()  # reaps it (and lets go of what a subclass holds for it)

    def close(self) -> None:
        """Stop the server and remove the temporary directory this instance created."""
        self.stop()
        self._closed = True
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    # ---- properties --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """The server process is alive (it may still be starting)."""
        return self._process is not None and self._process.poll() is None

    @property
    def port(self) -> int:
        """The TCP port on ``127.0.0.1``. Known once started (or when given)."""
        if self._port is None:
            raise LocalControlPlaneError(
                f"{type(self).__name__} has no port yet: call start() or use it as a context "
                "manager"
            )
        return self._port

    @property
    def moved_from(self) -> int | None:
        """``prefer_port`` when it was taken and the server runs on another port, else ``None``."""
        return self._moved_from

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321`` (the value for ``control_plane_url``)."""
        return f"http://{_HOST}:{self.port}"

    @property
    def api_key(self) -> str | None:
        """The first configured API key (what the reading helpers send), or ``None``."""
        keys = self._api_keys
        if keys is None:
            keys = self._env.get("CONTROL_PLANE_API_KEYS")
        return _first_key(keys)

    @property
    def database_path(self) -> Path:
        """The SQLite file. Known once started (or when given); none with ``database_url``."""
        if self._given_url is not None:
            raise LocalControlPlaneError(
                f"{type(self).__name__} serves {self.shown_database}, not a SQLite file"
            )
        if self._database_path is None:
            raise LocalControlPlaneError(f"{type(self).__name__} has no database yet: call start()")
        return self._database_path

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL of the database: ``database_url`` as given (its password in it),
        else ``sqlite:///`` and the SQLite file."""
        if self._given_url is not None:
            return self._given_url
        return f"sqlite:///{self.database_path.resolve().as_posix()}"

    @property
    def shown_database(self) -> str:
        """``database_url`` as a log line or a message may show it (no password)."""
        return safe_url(self.database_url)

    @property
    def log_path(self) -> Path:
        """The file the server's stdout and stderr go to (appended to on every start)."""
        return self._ensure_tmpdir() / "control_plane.log"

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log ("" if there is none, or after close)."""
        if self._tmpdir is None:
            return ""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ---- internals ---------------------------------------------------------------------

    def _ensure_tmpdir(self) -> Path:
        if self._closed:
            raise LocalControlPlaneError(f"this {type(self).__name__} was closed; create a new one")
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="chronicle-control-plane-"))
        return self._tmpdir

    def _child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONTROL_PLANE_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self._env)
        if self._api_keys is not None:
            env["CONTROL_PLANE_API_KEYS"] = self._api_keys
        if self._given_url is not None:
            env["CONTROL_PLANE_DATABASE_URL"] = self._given_url
        return env

    def _spawn(self, command: list[str]) -> int:
        """Launch the server; return the log offset where this run's output begins."""
        argv = [
            *command,
            "serve",
            "--host",
            _HOST,
            "--port",
            str(self.port),
        ]
        if self._given_url is None:  # a URL of one's own may hold a password: the environment
            argv += ["--database-url", self.database_url]
        popen_kwargs: dict[str, Any] = {}
        if sys.platform == "win32":
            popen_kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
        else:
            popen_kwargs["start_new_session"] = True  # its own process group, killed as one
        with open(self.log_path, "ab") as log:
            offset = log.tell()
            shown = "" if self._given_url is None else f" (database {self.shown_database})"
            log.write(f"--- {' '.join(argv)}{shown}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._child_env(),
                **popen_kwargs,
            )
        return offset

    def _wait_own(self, offset: int, timeout: float) -> str | None:
        """``None`` once the server on our port is proven to be our process, else why not.

        Proof: our process is alive and holds the port (it wrote that it listens there, or the
        OS shows its listening socket), and ``/health`` there answers as a control plane. A
        ``/health`` answer alone proves nothing: while our process still imports, another
        server may hold the port, and ours then fails to bind it.
        """
        process = self._process
        assert process is not None
        deadline = time.monotonic() + timeout
        probe = HttpControlPlane(self.url, None, _HEALTH_TIMEOUT)
        bound = False
        try:
            while time.monotonic() < deadline:
                code = process.poll()
                if code is not None:
                    return f"the server exited with code {code}"
                bound = bound or (
                    self.port in _reported_ports(self._log_since(offset))
                    or _listens_on(process.pid, self.port)
                )
                if bound:
                    with contextlib.suppress(ControlPlaneError):
                        answer = probe.health()
                        if answer.get("service") == "control-plane" and process.poll() is None:
                            return None
                time.sleep(_POLL_INTERVAL)
        finally:
            probe.close()
        if bound:
            return (
                f"it listens on port {self.port} but GET /health did not answer within "
                f"{timeout:.0f}s"
            )
        return f"it did not start listening on port {self.port} within {timeout:.0f}s"

    def _kill(self, timeout: float = 10.0) -> None:
        process = self._process
        if process is None:
            return
        self._process = None
        if process.poll() is None:
            self._signal(process, terminate=True)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(process, terminate=False)
                process.wait()
        else:
            process.wait()

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], *, terminate: bool) -> None:
        if sys.platform == "win32":
            if terminate:
                process.terminate()
            else:
                process.kill()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM if terminate else signal.SIGKILL)

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _describe_failure(self, failure: str, output: str) -> str:
        tail = "\n".join(output.splitlines()[-30:]) or "(no output)"
        hint = ""
        if "No module named" in output or "ModuleNotFoundError" in output:
            hint = f"\n{_INSTALL_HINT}"
        elif any(m in output.lower() for m in _BIND_FAILURES):
            hint = f"\nport {self._port} is taken by another process; pass another port or none"
        return (
            f"the local control plane did not start on {self.url} ({failure}); "
            f"database {self.shown_database}; log {self.log_path}:\n{tail}{hint}"
        )
