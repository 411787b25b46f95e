"""Test doubles and local servers for testing code that uses Chronicle.

``LocalControlPlane`` runs the real AgentPlane control plane (the ``agentplane-control-plane``
package, installed by the ``dev`` extra) as a subprocess on a free localhost port with its own
SQLite database, and reads back what Chronicle stored there over its HTTP API::

    from chronicle.testing import LocalControlPlane

    with LocalControlPlane() as control_plane:
        chronicle.configure(control_plane_url=control_plane.url)
        ...  # run the code under test, then flush
        envelopes = control_plane.wait_for_envelopes(trace_id, count=2)

``capture()`` is the in-memory double: Chronicle configured to "deliver" to an
``InMemoryControlPlane`` that validates and keeps every entity the way the control plane would
(labels written once, an open envelope replaced by its close, a closed one immutable), so a unit
test can assert on exactly what would have been sent, and replay it, with no server::

    from chronicle.testing import capture

    with capture() as sent:
        run_agent("hello")
    assert [e.name for e in sent.envelopes] == ["planner", "search"]

Nothing here touches the network beyond ``127.0.0.1`` and nothing is registered globally: no
``atexit`` hook, no signal handler, no environment change in this process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from agentplane_primitives.models import Envelope, Span, Trace

from chronicle.errors import ControlPlaneError
from chronicle.save.client import INTERNAL_EXTENSION, untraced

__all__ = ["InMemoryControlPlane", "LocalControlPlane", "LocalControlPlaneError", "capture"]

_INTERNAL: dict[str, Any] = {INTERNAL_EXTENSION: True}
_HOST = "127.0.0.1"
_INSTALL_HINT = (
    "the control plane is the agentplane-control-plane package; install the dev extra: "
    "pip install -e '.[dev]' (or: pip install 'agentplane-control-plane>=1,<2')"
)
_BIND_FAILURES = (
    "address already in use",
    "attempting to bind",
    "only one usage of each socket address",
)
_PORT_ATTEMPTS = 5
_SEARCH_PAGE = 500
"""The largest ``limit`` the control plane accepts on ``GET /v1/traces``."""
_POLL_INTERVAL = 0.05

_Query = list[tuple[str, str | int | float | bool | None]]
"""Query parameters in order; a key may repeat (``label=...``)."""


class LocalControlPlaneError(RuntimeError):
    """The local control plane could not be started (the message says why and what to do)."""


def _free_port() -> int:
    """A port that was free a moment ago (bind ``127.0.0.1:0``, read it, close the socket)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
    return port


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


class LocalControlPlane:
    """The real control plane in a subprocess on ``127.0.0.1``, for tests.

    Contract:

    - ``start()`` picks a free port unless ``port`` was given, and a SQLite file in a temporary
      directory unless ``database_path`` was given, launches ``control-plane serve`` and returns
      once ``GET /health`` answers. ``stop()`` ends the process; ``start()`` again restarts it on
      the **same** port and database, so stored data survives a stop. ``close()`` stops it and
      removes the temporary directory (the log, and the database if it lives there); a
      ``database_path`` you gave is never removed. After ``close()`` the instance cannot be
      started again. Used as a context manager it is started on entry and closed on exit.
    - The server's output goes to ``log_path`` (in the temporary directory), never to this
      process's stdout; a failed start raises ``LocalControlPlaneError`` quoting its last lines.
    - ``api_keys`` is ``CONTROL_PLANE_API_KEYS`` (``"key:tenant:scope+scope,..."``). Without it
      the server is open (anonymous, tenant ``local``). With it, ``api_key`` is the first key and
      every reading helper sends it as ``Authorization: Bearer``. ``CONTROL_PLANE_*`` variables of
      this process are not passed on; ``env`` adds to (and overrides) the child's environment.
    - The reading helpers use plain httpx, mark each request with the ``chronicle.internal``
      extension and suppress OpenTelemetry instrumentation, so Chronicle does not record them.
      They raise ``ControlPlaneError`` for an unexpected status. They are thread-safe;
      ``start``/``stop``/``close`` are not meant to be called concurrently.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        database_path: Path | None = None,
        api_keys: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._port = port
        self._port_fixed = port is not None
        self._database_path = Path(database_path) if database_path is not None else None
        self._api_keys = api_keys
        self._env = dict(env or {})
        self._tmpdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._http: httpx.Client | None = None
        self._http_lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        where = f"http://{_HOST}:{self._port}" if self._port is not None else "no port yet"
        state = "running" if self.running else ("closed" if self._closed else "stopped")
        return f"<LocalControlPlane {where} {state}>"

    # ---- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> LocalControlPlane:
        try:
            return self.start()
        except BaseException:
            self.close()  # no __exit__ follows a failed __enter__: do not leak the temp dir
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout: float = 30.0) -> LocalControlPlane:
        """Start the server (a no-op if it runs) and wait up to ``timeout`` s for ``/health``.

        Returns ``self``. Raises ``LocalControlPlaneError`` if the package is missing, the
        process exits, or ``/health`` does not answer in time; the process is then not left
        running. When the port was picked here and another process took it first, a new port
        is tried (a few times) before giving up; a port given by you, or the port of a
        restart, is never changed.
        """
        if self._closed:
            raise LocalControlPlaneError("this LocalControlPlane was closed; create a new one")
        if self.running:
            return self
        command = _server_command()
        tmpdir = self._ensure_tmpdir()
        if self._database_path is None:
            self._database_path = tmpdir / "control_plane.db"
        self._database_path.parent.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self._port_fixed else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            if self._port is None or (not self._port_fixed and attempt > 1):
                self._port = _free_port()
            offset = self._spawn(command)
            failure = self._wait_healthy(timeout)
            if failure is None:
                self._port_fixed = True  # a restart must come back on the same port
                return self
            self._kill()
            output = self._log_since(offset)
            if attempt < attempts and any(m in output.lower() for m in _BIND_FAILURES):
                continue
            raise LocalControlPlaneError(self._describe_failure(failure, output))
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and wait for it to exit (SIGTERM, then SIGKILL after ``timeout``).

        Keeps the port and the database, so ``start()`` brings the same data back. A no-op if
        it is not running.
        """
        self._close_http()
        self._kill(timeout)

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
                "LocalControlPlane has no port yet: call start() or use it as a context manager"
            )
        return self._port

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
        """The SQLite file. Known once started (or when given)."""
        if self._database_path is None:
            raise LocalControlPlaneError("LocalControlPlane has no database yet: call start()")
        return self._database_path

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL passed to ``--database-url``."""
        return f"sqlite:///{self.database_path.resolve().as_posix()}"

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

    # ---- reading back ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /health``: ``status``, ``version``, ``max_batch``, ``max_body_bytes``."""
        found = self._get("/health")
        return found if isinstance(found, dict) else {}

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """``GET /v1/traces/{trace_id}``: labels, derived state and spans; ``None`` if unknown."""
        found = self._get(f"/v1/traces/{trace_id}", allow_404=True)
        return found if isinstance(found, dict) else None

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        """The envelopes of one span, in call order (what replay reads)."""
        found = self._get(f"/v1/traces/{trace_id}/spans/{span_id}/envelopes")
        return _items(found, "envelopes")

    def trace_envelopes(self, trace_id: str) -> list[dict[str, Any]]:
        """Every envelope of a trace in start order; ``[]`` if the trace is unknown."""
        found = self._get(f"/v1/traces/{trace_id}/envelopes", allow_404=True)
        return _items(found, "envelopes")

    def search(
        self, *, q: str | None = None, limit: int = _SEARCH_PAGE, **labels: str
    ) -> list[dict[str, Any]]:
        """``GET /v1/traces``: trace summaries whose labels all match, most recent first.

        ``session_id``, ``message_id`` and ``user_id`` are sent as their own query parameters,
        any other keyword as a repeated ``label=key:value``. ``q`` is the server's free-text
        match (id, name or a label value); ``limit`` is at most 500.
        """
        params: _Query = [("limit", limit)]
        if q is not None:
            params.append(("q", q))
        for key, value in labels.items():
            if key in ("session_id", "message_id", "user_id"):
                params.append((key, value))
            else:
                params.append(("label", f"{key}:{value}"))
        return _items(self._get("/v1/traces", params=params), "traces")

    def wait_for_envelopes(
        self, trace_id: str, count: int, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Poll until the trace holds at least ``count`` envelopes and return them all.

        Raises ``TimeoutError`` (saying how many arrived) after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            envelopes = self.trace_envelopes(trace_id)
            if len(envelopes) >= count:
                return envelopes
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"trace {trace_id} holds {len(envelopes)} envelope(s) after {timeout}s, "
                    f"expected at least {count}; was the recording flushed to {self.url}?"
                )
            time.sleep(_POLL_INTERVAL)

    def snapshot(self) -> dict[str, Any]:
        """Everything the tenant's traces hold, in a form that compares with ``==``.

        ``{"traces": {trace_id: {"trace": <GET /v1/traces/{id}>, "envelopes": [...]}}}`` with
        each trace's envelopes sorted by ``envelope_id``. Take one before and one after to
        assert that nothing was written.
        """
        summaries: list[dict[str, Any]] = []
        offset = 0
        while True:
            found = self._get("/v1/traces", params=[("limit", _SEARCH_PAGE), ("offset", offset)])
            page = _items(found, "traces")
            summaries.extend(page)
            if len(page) < _SEARCH_PAGE:
                break
            offset += _SEARCH_PAGE
        traces: dict[str, Any] = {}
        for summary in summaries:
            trace_id = str(summary.get("trace_id"))
            envelopes = sorted(
                self.trace_envelopes(trace_id), key=lambda e: str(e.get("envelope_id"))
            )
            traces[trace_id] = {"trace": self.trace(trace_id), "envelopes": envelopes}
        return {"traces": traces}

    # ---- internals ---------------------------------------------------------------------

    def _ensure_tmpdir(self) -> Path:
        if self._closed:
            raise LocalControlPlaneError("this LocalControlPlane was closed; create a new one")
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="chronicle-control-plane-"))
        return self._tmpdir

    def _child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONTROL_PLANE_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self._env)
        if self._api_keys is not None:
            env["CONTROL_PLANE_API_KEYS"] = self._api_keys
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
            "--database-url",
            self.database_url,
        ]
        popen_kwargs: dict[str, Any] = {}
        if sys.platform == "win32":
            popen_kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
        else:
            popen_kwargs["start_new_session"] = True  # its own process group, killed as one
        with open(self.log_path, "ab") as log:
            offset = log.tell()
            log.write(f"--- {' '.join(argv)}\n".encode())
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

    def _wait_healthy(self, timeout: float) -> str | None:
        """``None`` once ``/health`` answers from our process, else why it did not."""
        process = self._process
        assert process is not None
        deadline = time.monotonic() + timeout
        url = f"{self.url}/health"
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                code = process.poll()
                if code is not None:
                    return f"the server exited with code {code}"
                try:
                    with untraced():
                        response = client.get(url, extensions=_INTERNAL)
                    # ours, and still alive (not some other server answering on the port)
                    if (
                        response.status_code == 200
                        and _is_control_plane(response)
                        and process.poll() is None
                    ):
                        return None
                except httpx.HTTPError:
                    pass
                time.sleep(_POLL_INTERVAL)
        return f"GET /health did not answer within {timeout:.0f}s"

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
            f"database {self.database_url}; log {self.log_path}:\n{tail}{hint}"
        )

    def _client(self) -> httpx.Client:
        with self._http_lock:
            if self._http is None:
                headers = {"user-agent": "chronicle-testing"}
                key = self.api_key
                if key:
                    headers["authorization"] = f"Bearer {key}"
                self._http = httpx.Client(base_url=self.url, headers=headers, timeout=10.0)
            return self._http

    def _close_http(self) -> None:
        with self._http_lock:
            if self._http is not None:
                self._http.close()
                self._http = None

    def _get(
        self,
        path: str,
        *,
        params: _Query | None = None,
        allow_404: bool = False,
    ) -> Any:
        try:
            with untraced():
                response = self._client().get(path, params=params, extensions=_INTERNAL)
        except httpx.HTTPError as exc:
            raise ControlPlaneError(
                f"local control plane at {self.url} did not answer GET {path}: "
                f"{type(exc).__name__}: {exc} (running: {self.running})"
            ) from None
        if allow_404 and response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise ControlPlaneError(
                f"local control plane answered {response.status_code} to GET {path}: "
                f"{response.text[:500]}",
                status_code=response.status_code,
            )
        return response.json()


def _is_control_plane(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("service") == "control-plane"


def _items(found: Any, key: str) -> list[dict[str, Any]]:
    items = found.get(key) if isinstance(found, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


# ---- the in-memory double ---------------------------------------------------------------------


class InMemoryControlPlane:
    """A ``ControlPlaneClient`` that keeps what it is sent, validated with the primitives models.

    ``traces``, ``spans`` (by ``(trace_id, span_id)``) and ``envelopes`` (every stored envelope,
    in call order within its span) are the models as the control plane would hold them.
    """

    def __init__(self, *, max_batch: int = 100, max_body_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_batch = max_batch
        self.max_body_bytes = max_body_bytes
        self.traces: dict[str, Trace] = {}
        self.spans: dict[tuple[str, str], Span] = {}
        self._envelopes: dict[tuple[str, str], Envelope] = {}
        self._lock = threading.Lock()

    @property
    def envelopes(self) -> list[Envelope]:
        """Every stored envelope, ordered by span and ``chronicle.sequence``."""
        with self._lock:
            stored = list(self._envelopes.values())
        return sorted(stored, key=lambda e: (e.trace_id, e.span_id, _sequence(e)))

    def span_envelopes(self, trace_id: str, span_id: str) -> list[dict[str, Any]]:
        return [
            e.model_dump(mode="json", exclude_none=True)
            for e in self.envelopes
            if (e.trace_id, e.span_id) == (trace_id, span_id)
        ]

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "max_batch": self.max_batch, "max_body_bytes": self.max_body_bytes}

    def register_trace(self, trace: Trace) -> None:
        model = Trace.model_validate(trace.model_dump())  # a copy, validated again
        with self._lock:
            known = self.traces.get(model.trace_id)
            if known is None or (not known.metadata and model.metadata):
                self.traces[model.trace_id] = model  # labels are written once

    def put_span(self, span: Span) -> None:
        model = Span.model_validate(span.model_dump())
        key = (model.trace_id, model.span_id)
        with self._lock:
            known = self.spans.get(key)
            if known is None or known.state.value != "closed":
                self.spans[key] = model
            self.traces.setdefault(
                model.trace_id, Trace(trace_id=model.trace_id, state=model.state)
            )

    def post_envelopes(self, body: bytes, count: int) -> None:
        import json

        if len(body) > self.max_body_bytes:
            raise ControlPlaneError("payload too large", status_code=413)
        items = json.loads(body)["envelopes"]
        if len(items) > self.max_batch:
            raise ControlPlaneError(f"batch max {self.max_batch}", status_code=400)
        try:
            batch = [Envelope.model_validate(item) for item in items]
        except ValueError as exc:
            raise ControlPlaneError(f"invalid envelope: {exc}", status_code=400) from None
        with self._lock:
            for model in batch:
                key = (model.trace_id, model.envelope_id)
                known = self._envelopes.get(key)
                if known is None or known.envelope_status.state.value != "closed":
                    self._envelopes[key] = model

    def get_trace(self, trace_id: str) -> dict[str, Any] | None:
        with self._lock:
            trace = self.traces.get(trace_id)
            spans = [s for (t, _), s in self.spans.items() if t == trace_id]
        if trace is None:
            return None
        body = trace.model_dump(mode="json", exclude_none=True)
        body["spans"] = [s.model_dump(mode="json", exclude_none=True) for s in spans]
        return body

    def close(self) -> None:
        """Nothing to release."""


def _sequence(envelope: Envelope) -> int:
    value = envelope.metadata.get("chronicle.sequence")
    return value if isinstance(value, int) else 1 << 62


@contextlib.contextmanager
def capture(**settings: object) -> Iterator[InMemoryControlPlane]:
    """Configure Chronicle to deliver to a fresh ``InMemoryControlPlane`` for the block.

    ``settings`` are ``configure()`` settings. On exit everything queued is flushed into the
    double (so it is complete when the block ends) and Chronicle is reset.
    """
    from chronicle import runtime

    double = InMemoryControlPlane()
    runtime.install(double, **{"flush_interval": 0.01, **settings})
    try:
        yield double
    finally:
        runtime.flush(10)
        runtime.reset()
