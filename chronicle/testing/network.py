"""Blocking the network in tests: a connection to a host outside an allow-list fails at once.

``block_network(allowed)`` watches, through the process's socket guard
(``chronicle.replay.network.GUARD``, which replays share), ``socket.socket.connect``/
``connect_ex`` (every TCP and UDP connection in the process, whatever library makes it: httpx,
requests, the provider SDKs, asyncio) and ``socket.getaddrinfo`` (so looking up a name that is
not allowed sends no DNS query either). A blocked attempt raises ``NetworkBlockedError`` before
any packet leaves, and is kept in the ``Blocked`` log the context manager yields, so a test can
fail on it even when the code under test caught the error. ``socket.socket`` itself is not
replaced: servers the test starts keep working.

An allow-list entry is an IP address (``127.0.0.1``), a network (``127.0.0.0/8``), a host name
(``localhost``, matched without case), or one of them with a port (``127.0.0.1:5432``). A name
that is allowed may be looked up, and the addresses it resolves to are allowed. Unix sockets are
always allowed.

The block is process-wide while it lasts, every thread included: use it around one test, not in
parallel threads of one process. (A replay's own watch, ``network=`` on ``chronicle.replay``,
follows the replay's context instead.)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from chronicle.errors import NetworkBlockedError
from chronicle.replay.network import GUARD, LOOPBACK, AllowList, target

__all__ = ["LOOPBACK", "AllowList", "Blocked", "block_network"]


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


class _Block:
    """``block_network``'s watcher: refuses what its allow-list does not name, in any thread."""

    def __init__(self, log: Blocked) -> None:
        self.log = log

    def connecting(self, host: str, port: int, tcp: bool) -> None:
        if not self.log.allowed.allows(host, port):
            raise self._refuse(host, port)

    def looking_up(self, name: str, port: int | None) -> None:
        if not self.log.allowed.allows_lookup(name):
            raise self._refuse(name, port)

    def _refuse(self, host: str, port: object) -> NetworkBlockedError:
        shown = target(host, port)
        self.log.attempts.append(shown)
        return NetworkBlockedError(shown, str(self.log.allowed))


_lock = threading.Lock()


@contextlib.contextmanager
def block_network(allowed: Iterable[str] = LOOPBACK) -> Iterator[Blocked]:
    """Refuse connections to hosts outside ``allowed`` until the block ends.

    Yields the ``Blocked`` log. Raises ``RuntimeError`` if another block is already active (the
    block is process-wide), and ``ValueError`` for a bad allow-list entry.
    """
    log = Blocked(AllowList.parse(allowed))
    if not _lock.acquire(blocking=False):
        raise RuntimeError("block_network is already active in this process; nest nothing")
    watcher = _Block(log)
    try:
        GUARD.add(watcher)
        try:
            yield log
        finally:
            GUARD.remove(watcher)
    finally:
        _lock.release()
