"""What reaches the network while a replay runs: the socket guard and the hosts it lets through.

A replay stubs boundaries; code that is not one (a tool calling an HTTP API with no decorator, a
hosted tool, a model client nobody wrapped, an MCP server) would still run live, and a strict
replay of unchanged code would pass while a refund is paid twice. So while any replay is active
the ``Guard`` watches every TCP connection the process makes (``socket.socket.connect`` and
``connect_ex``, whatever library calls them: httpx, requests, the provider SDKs, asyncio) and
every name lookup (``socket.getaddrinfo``), and asks the replay in the connecting code's
OpenTelemetry context whether its plan lets it through (``replay/run.py``,
``ReplayRun._connection``):

- a connection made inside a boundary the plan runs live (a cut-point ``run(...)``, a
  ``through(...)`` call, every call after ``live_after``'s anchor) is the plan's: let through;
- so is one to an allowed host (``NetworkPolicy``): the control plane's own address, the hosts
  of ``through(...)`` services, and the hosts named in ``allowed_hosts=``. Loopback is not
  allowed by default: a local database or queue written during a replay is a live side effect
  too;
- any other is a ``network`` divergence naming ``host:port`` and the innermost boundary it was
  made under (or "outside any boundary"). ``network="report"`` (the default) lets a non-strict
  replay's connection go ahead and lists it; a strict replay refuses it with
  ``ReplayDivergenceError`` before a packet leaves. ``network="block"`` refuses it with
  ``NetworkBlockedError`` (a ``ConnectionError``, so HTTP clients report a failed connection)
  and a strict replay still fails at its exit. ``network="allow"`` watches nothing.

What is not watched, and why: Unix sockets and UDP (DNS, metrics, syslog: the machine's
plumbing, not the agent's side effects); code running with OpenTelemetry instrumentation
suppressed (Chronicle's own control-plane client and the span exporters: the machinery, not the
code under test); and threads that carry no replay in their context (a thread started before the
replay, a pool the context did not reach, the exporters' and the delivery's workers, a server
the test runs): their connections cannot be told from the process's own background traffic, so
they are left alone. Threads and executors started inside the replay carry its context
(``chronicle/otel/threads.py``) and are watched.

The guard is one patch for the whole process, shared by every replay and by
``chronicle.testing.network.block_network`` (each a ``Watcher``): installed when the first
watcher comes, removed when the last goes (left in place, passing straight through, if another
library patched the same functions on top of it meanwhile). With no watcher a connection pays
one global read; a watched one pays a context lookup, never a network call.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast
from urllib.parse import urlsplit

from opentelemetry import context as otel_context

from chronicle import runtime
from chronicle.errors import ChronicleError
from chronicle.otel.context import REPLAY_KEY, REPLAY_PARENT_KEY, is_suppressed

NetworkMode = Literal["report", "block", "allow"]
NETWORK_MODES: tuple[NetworkMode, ...] = ("report", "block", "allow")
"""What a replay does about a connection its plan does not run (see the module docstring)."""

LOOPBACK = ("127.0.0.0/8", "::1", "localhost")
"""The loopback networks and the name ``localhost`` (``block_network``'s default allow-list)."""

logger = logging.getLogger("chronicle")

_IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_LOCALHOST = {"127.0.0.1": frozenset({"localhost"}), "::1": frozenset({"localhost"})}
"""What ``localhost`` names, lookup seen or not."""
_ENDPOINT = re.compile(r"\A(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d{1,5})\Z")


# ---- hosts: which ones are allowed ---------------------------------------------------------------


def target(host: str, port: object) -> str:
    """``host:port`` as a connection names it (``[::1]:8080`` for an IPv6 address)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=1024)  # a process connects to few hosts; parsing one costs ~10 us
def _parsed(host: str) -> tuple[str, _Address | None]:
    """A host as compared, and its address (``None`` for a name): an address in its canonical
    form (IPv4 for an IPv4-mapped IPv6 address, no zone id), a name in lower case without its
    final dot."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return host.lower().rstrip("."), None
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address), address


def _normal(host: str) -> str:
    return _parsed(host)[0]


@dataclass(frozen=True)
class AllowList:
    """Hosts the network still reaches: addresses and networks (``127.0.0.1``, ``10.0.0.0/8``,
    ``::1``), names (``localhost``, ``api.internal``: matched without case, and so are the
    addresses they were seen resolving to; ``localhost`` is ``127.0.0.1`` and ``::1``), and
    single ports (``127.0.0.1:5432``,
    ``[::1]:8080``, ``db.internal:5432``)."""

    networks: tuple[_IpNetwork, ...]
    names: frozenset[str]
    endpoints: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Parse entries; raises ``ValueError`` for an empty one or a bad port."""
        networks: list[_IpNetwork] = []
        names: set[str] = set()
        endpoints: set[tuple[str, int]] = set()
        for entry in entries:
            text = entry.strip() if isinstance(entry, str) else ""
            if not text:
                raise ValueError(
                    f"an allowed host is an address, a network or a name (with :port or not), "
                    f"got {entry!r}"
                )
            try:
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            found = _ENDPOINT.match(text)
            if found is None:
                names.add(_normal(text))
                continue
            port = int(found["port"])
            if not 0 < port < 65536:
                raise ValueError(f"an allowed host's port is 1 to 65535, got {entry!r}")
            endpoints.add((_normal(found["v6"] or found["host"]), port))
        return cls(tuple(networks), frozenset(names), frozenset(endpoints))

    def allows(self, host: str, port: int | None = None) -> bool:
        """Whether ``host`` (an address or a name; on ``port``, when given) is on the list. An
        address is also allowed when a name on the list was seen resolving to it."""
        normal, address = _parsed(host)
        if port is not None and (normal, port) in self.endpoints:
            return True
        if normal in self.names:
            return True
        if address is None:
            return False
        if any(address in network for network in self.networks):
            return True
        for name in RESOLVED.names_of(normal) | _LOCALHOST.get(normal, frozenset()):
            if name in self.names or (port is not None and (name, port) in self.endpoints):
                return True
        return False

    def allows_lookup(self, name: str) -> bool:
        """Whether looking ``name`` up is allowed: it is on the list, on any port."""
        normal = _normal(name)
        return normal in self.names or any(host == normal for host, _ in self.endpoints)

    def __str__(self) -> str:
        shown = [str(n) for n in self.networks]
        shown += sorted(self.names)
        shown += sorted(target(host, port) for host, port in self.endpoints)
        return ", ".join(shown) or "none"


class Resolved:
    """The names each address was seen resolving to (``socket.getaddrinfo`` while the guard is
    installed), so an allow-list entry naming a host allows the addresses it resolves to, and a
    report can name the host behind an address. Bounded: forgets everything past 4096
    addresses."""

    _LIMIT = 4096

    def __init__(self) -> None:
        self._names: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    def learn(self, name: str, infos: object) -> None:
        """Note what ``getaddrinfo(name, ...)`` answered (never raises)."""
        try:
            addresses = {_normal(str(info[4][0])) for info in infos}  # type: ignore[attr-defined]
        except Exception:
            return
        name = _normal(name)
        with self._lock:
            if len(self._names) > self._LIMIT:
                self._names.clear()
            for address in addresses:
                self._names[address] = self._names.get(address, frozenset()) | {name}

    def names_of(self, address: str) -> frozenset[str]:
        """The names ``address`` was seen resolving from (none known: empty)."""
        return self._names.get(_normal(address), frozenset())


RESOLVED = Resolved()
"""What the process's name lookups answered while the guard was installed."""


# ---- one replay's rule -----------------------------------------------------------------------


class NetworkPolicy:
    """How one replay treats a connection its plan does not run: ``mode`` (``report`` or
    ``block``; ``allow`` has no policy), ``strict`` (the replay's), and the hosts it lets through
    anyway: ``allowed_hosts`` (an ``AllowList``), the control plane Chronicle is configured with
    (read when a connection is made), and the endpoints added with ``allow_url`` (the control
    plane a replay was read from, the services its plan lets calls through to)."""

    def __init__(self, mode: NetworkMode, allowed_hosts: Iterable[str], strict: bool) -> None:
        if mode not in ("report", "block"):
            raise ValueError(f"network is 'report', 'block' or 'allow', got {mode!r}")
        self.mode: NetworkMode = mode
        self.strict = strict
        self.allowed = AllowList.parse(allowed_hosts)
        self._endpoints: frozenset[tuple[str, int]] = frozenset()
        self._lock = threading.Lock()

    def allow_url(self, url: str | None) -> None:
        """Let connections to ``url``'s host and port through (nothing for ``None`` or a URL
        with no host)."""
        endpoint = _endpoint(url)
        if endpoint is not None:
            with self._lock:
                self._endpoints = self._endpoints | {endpoint}

    def allows(self, host: str, port: int | None) -> bool:
        """Whether a connection to ``host`` on ``port`` (a lookup of ``host`` when ``port`` is
        ``None``: on any port) is let through whatever the plan says."""
        if self.allowed.allows(host, port):
            return True
        endpoints = self._endpoints
        configured = _endpoint(runtime.current().settings.control_plane_url)
        if configured is not None:
            endpoints = endpoints | {configured}
        if not endpoints:
            return False
        normal = _normal(host)
        names = {normal, *RESOLVED.names_of(normal)}
        if port is None:
            return any(name == allowed for name in names for allowed, _ in endpoints)
        names |= _LOCALHOST.get(normal, frozenset())
        return any((name, port) in endpoints for name in names)

    def describe(self) -> str:
        """The hosts let through, for an error message."""
        shown = [str(self.allowed)] if str(self.allowed) != "none" else []
        configured = _endpoint(runtime.current().settings.control_plane_url)
        endpoints = self._endpoints | ({configured} if configured is not None else set())
        shown += sorted(target(host, port) for host, port in endpoints)
        return ", ".join(shown) or "none"


def network_policy(
    mode: str, allowed_hosts: Iterable[str], strict: bool, *, what: str = "replay"
) -> NetworkPolicy | None:
    """The policy of a replay given ``network=mode`` and ``allowed_hosts`` (``None`` for
    ``allow``); raises ``ValueError`` naming ``what`` for a bad mode or host."""
    if mode not in NETWORK_MODES:
        raise ValueError(f"{what}: network is 'report', 'block' or 'allow', got {mode!r}")
    if isinstance(allowed_hosts, str):
        allowed_hosts = [part for part in allowed_hosts.split(",") if part.strip()]
    hosts = list(allowed_hosts)
    try:
        AllowList.parse(hosts)
    except ValueError as exc:
        raise ValueError(f"{what}: allowed_hosts: {exc}") from None
    return None if mode == "allow" else NetworkPolicy(mode, hosts, strict)


@functools.lru_cache(maxsize=64)  # the configured control plane's URL, read on each connection
def _endpoint(url: str | None) -> tuple[str, int] | None:
    if not url:
        return None
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    if port is None:
        port = 443 if parts.scheme in ("https", "wss") else 80
    return _normal(host), port


# ---- the socket guard ----------------------------------------------------------------------------


class Watcher(Protocol):
    """Something that looks at connections while it is in the guard. Either method may raise:
    a ``ConnectionError`` refuses the connection as a failed one; any other error reaches the
    code that connected as it is."""

    def connecting(self, host: str, port: int, tcp: bool) -> None:
        """A connection to ``host`` (an address, or a name when the code passed one to
        ``connect``) on ``port`` is about to be made; ``tcp``: a stream socket (else UDP)."""

    def looking_up(self, name: str, port: int | None) -> None:
        """``name`` (never an address) is about to be resolved for ``port`` (``None`` when the
        caller gave none, or a service name)."""


_Functions = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]


class Guard:
    """The process-wide patch of ``socket.socket.connect``/``connect_ex`` and
    ``socket.getaddrinfo`` that shows every Internet connection and name lookup to the watchers
    (Unix sockets are never shown: they do not leave the machine)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: tuple[Watcher, ...] = ()
        self._installed: _Functions | None = None
        self._originals: _Functions | None = None
        self._inside = threading.local()  # a guarded call in progress on this thread

    @property
    def installed(self) -> bool:
        """Whether the patch is in place (and on top)."""
        return self._installed is not None and socket.socket.connect is self._installed[0]

    def add(self, watcher: Watcher) -> None:
        """Show ``watcher`` every connection from now on (installing the patch if needed)."""
        with self._lock:
            self._watchers = (*self._watchers, watcher)
            if not self.installed:
                self._install()

    def remove(self, watcher: Watcher) -> None:
        """Stop showing ``watcher`` connections; the last one out removes the patch, unless
        another library patched the same functions over it meanwhile: then it stays under that
        patch, passing straight through. A watcher not added is ignored."""
        with self._lock:
            watchers = list(self._watchers)
            if watcher in watchers:
                watchers.remove(watcher)
            self._watchers = tuple(watchers)
            installed, originals = self._installed, self._originals
            if watchers or installed is None or originals is None:
                return
            current = (socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo)
            if all(now is ours for now, ours in zip(current, installed, strict=True)):
                socket.socket.connect = originals[0]  # type: ignore[method-assign]
                socket.socket.connect_ex = originals[1]  # type: ignore[method-assign]
                socket.getaddrinfo = originals[2]
            self._installed = self._originals = None

    def _install(self) -> None:
        """Patch over whatever is there now (under the lock). A layer of ours left under
        another library's patch stays; while this one runs it passes through (``busy``)."""
        originals: _Functions = (
            socket.socket.connect,
            socket.socket.connect_ex,
            socket.getaddrinfo,
        )
        inside = self._inside

        def guard(original: Callable[..., Any]) -> Callable[..., Any]:
            def guarded(sock: socket.socket, address: Any) -> Any:
                if not self._watchers or getattr(inside, "busy", False):
                    return original(sock, address)
                try:
                    self._connecting(sock, address)
                except OSError:
                    raise  # a refused connection: the caller closes its socket, as on any
                except BaseException:
                    sock.close()  # callers close on OSError only (socket.create_connection)
                    raise
                inside.busy = True
                try:
                    return original(sock, address)
                finally:
                    inside.busy = False

            return guarded

        original_getaddrinfo = originals[2]

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._watchers or getattr(inside, "busy", False):
                return original_getaddrinfo(host, port, *args, **kwargs)
            name = host.decode() if isinstance(host, bytes) else host
            named = isinstance(name, str) and not _is_address(name)
            if named:
                for watcher in self._watchers:
                    watcher.looking_up(name, port if isinstance(port, int) else None)
            inside.busy = True
            try:
                found = original_getaddrinfo(host, port, *args, **kwargs)
            finally:
                inside.busy = False
            if named:
                RESOLVED.learn(name, found)
            return found

        installed: _Functions = (guard(originals[0]), guard(originals[1]), getaddrinfo)
        socket.socket.connect = installed[0]  # type: ignore[method-assign]
        socket.socket.connect_ex = installed[1]  # type: ignore[method-assign]
        socket.getaddrinfo = installed[2]
        self._installed, self._originals = installed, originals

    def _connecting(self, sock: socket.socket, address: Any) -> None:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return  # a Unix socket (or another local family) never leaves the machine
        try:
            host, port = str(address[0]), int(address[1])
        except (TypeError, ValueError, IndexError):
            return  # not an address connect() takes: it raises its own error
        tcp = sock.type == socket.SOCK_STREAM
        for watcher in self._watchers:
            watcher.connecting(host, port, tcp)


def _is_address(host: str) -> bool:
    return _parsed(host)[1] is not None


GUARD = Guard()
"""The one socket guard of the process."""


# ---- the replays' watcher ------------------------------------------------------------------------


class ReplayNetwork(Protocol):
    """What a replay in the context (its dispatcher) answers for a connection made in it."""

    def network_connection(self, host: str, port: int | None, lookup: bool, scope: object) -> None:
        """Judge a connection to (``lookup``: a lookup of) ``host`` on ``port``, made with
        ``scope`` (the context's ``REPLAY_PARENT_KEY``: the live call it was made in, if any)
        current; raises to refuse it."""


class ReplayWatcher:
    """The guard's watcher while any replay is active: it hands each TCP connection (and name
    lookup) made in a replay's context to that replay. Refcounted: ``enter`` when a replay
    starts, ``leave`` when it ends; the guard watches only while the count is above zero."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def enter(self) -> None:
        """A replay starts."""
        with self._lock:
            self._count += 1
            if self._count == 1:
                GUARD.add(self)

    def leave(self) -> None:
        """A replay ends (one ``enter`` each)."""
        with self._lock:
            if self._count == 0:
                return
            self._count -= 1
            if self._count == 0:
                GUARD.remove(self)

    def connecting(self, host: str, port: int, tcp: bool) -> None:
        """``Watcher.connecting``: a TCP connection made in a replay's context goes to it."""
        if tcp:
            self._hand_on(host, port, False)

    def looking_up(self, name: str, port: int | None) -> None:
        """``Watcher.looking_up``: a lookup made in a replay's context goes to it."""
        self._hand_on(name, port, True)

    @staticmethod
    def _hand_on(host: str, port: int | None, lookup: bool) -> None:
        ctx = otel_context.get_current()
        replay = ctx.get(REPLAY_KEY)
        if replay is None:
            return  # no replay in this thread's context: not the replayed code's (see above)
        if getattr(replay, "network", None) is None or is_suppressed(ctx):
            return  # network="allow", or Chronicle's own client / an exporter at work
        judge = cast(ReplayNetwork, replay)
        try:
            judge.network_connection(host, port, lookup, ctx.get(REPLAY_PARENT_KEY))
        except ChronicleError:
            raise  # the verdict: refused (NetworkBlockedError, ReplayDivergenceError)
        except Exception:  # a bug of ours must not break the code's connection
            logger.exception("chronicle could not judge a connection to %s during a replay", host)


REPLAYS = ReplayWatcher()
"""The watcher every replay scope enters and leaves (``replay/entry.py``)."""
