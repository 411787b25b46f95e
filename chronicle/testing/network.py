"""Blocking the network in tests: a connection to a host outside an allow-list fails at once.

``block_network(allowed)`` patches ``socket.socket.connect``/``connect_ex`` (every TCP and UDP
connection in the process, whatever library makes it: httpx, requests, the provider SDKs, asyncio)
and ``socket.getaddrinfo`` (so looking up a name that is not allowed sends no DNS query either).
A blocked attempt raises ``NetworkBlockedError`` before any packet leaves, and is kept in the
``Blocked`` log the context manager yields, so a test can fail on it even when the code under test
caught the error. ``socket.socket`` itself is not replaced: servers the test starts keep working.

An allow-list entry is an IP address (``127.0.0.1``), a network (``127.0.0.0/8``) or a host name
(``localhost``, matched without case). A name that is allowed may be looked up, and the addresses
it resolves to are allowed for the rest of the block. Unix sockets are always allowed.

The patch is process-wide while the block lasts: use it around one test, not in parallel threads
of one process.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chronicle.errors import NetworkBlockedError

LOOPBACK = ("127.0.0.0/8", "::1", "localhost")
"""The default allow-list: the loopback networks and the name ``localhost``."""

_IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AllowList:
    """The hosts a blocked network still reaches: addresses, networks and names."""

    networks: tuple[_IpNetwork, ...]
    names: frozenset[str]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Parse entries (addresses, networks, names); raises ``ValueError`` for an empty one."""
        networks: list[_IpNetwork] = []
        names: set[str] = set()
        for entry in entries:
            text = entry.strip() if isinstance(entry, str) else ""
            if not text:
                raise ValueError(
                    f"an allowed host is an address, a network or a name, got {entry!r}"
                )
            try:
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
            except ValueError:
                names.add(text.lower().rstrip("."))
        return cls(tuple(networks), frozenset(names))

    def allows(self, host: str) -> bool:
        """Whether ``host`` (an address or a name) is on the list."""
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])  # drop an IPv6 zone id
        except ValueError:
            return host.lower().rstrip(".") in self.names
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def __str__(self) -> str:
        return ", ".join([*(str(n) for n in self.networks), *sorted(self.names)])


@dataclass
class Blocked:
    """The attempts a ``block_network`` block refused, in order (``"host:port"`` strings)."""

    allowed: AllowList
    attempts: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line naming every refused host and the allow-list."""
        hosts = ", ".join(dict.fromkeys(self.attempts))
        return (
            f"chronicle blocked {len(self.attempts)} connection attempt(s) to {hosts} "
            f"(allowed hosts: {self.allowed})"
        )


_lock = threading.Lock()


@contextlib.contextmanager
def block_network(allowed: Iterable[str] = LOOPBACK) -> Iterator[Blocked]:
    """Refuse connections to hosts outside ``allowed`` until the block ends.

    Yields the ``Blocked`` log. Raises ``RuntimeError`` if another block is already active (the
    patch is process-wide), and ``ValueError`` for a bad allow-list entry.
    """
    allow = AllowList.parse(allowed)
    log = Blocked(allow)
    resolved: set[str] = set()
    if not _lock.acquire(blocking=False):
        raise RuntimeError("block_network is already active in this process; nest nothing")
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo

    def refuse(host: str, port: object) -> NetworkBlockedError:
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        log.attempts.append(target)
        return NetworkBlockedError(target, str(allow))

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return  # a Unix socket (or another local family) never leaves the machine
        host, port = str(address[0]), address[1]
        if not (allow.allows(host) or host in resolved):
            raise refuse(host, port)

    def guard(original: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(sock: socket.socket, address: Any) -> Any:
            check(sock, address)
            return original(sock, address)

        return guarded

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is None or _is_address(name) or allow.allows(name):
            found = original_getaddrinfo(host, port, *args, **kwargs)
            if name is not None and not _is_address(name):
                resolved.update(str(info[4][0]) for info in found)
            return found
        raise refuse(name, port)

    socket.socket.connect = guard(original_connect)  # type: ignore[method-assign]
    socket.socket.connect_ex = guard(original_connect_ex)  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo
    try:
        yield log
    finally:
        socket.socket.connect = original_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = original_connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = original_getaddrinfo
        _lock.release()


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True
