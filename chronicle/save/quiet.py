"""Chronicle's own requests stay out of the application's logs.

httpx logs every request at INFO on the ``httpx`` logger (and httpcore its connection steps at
DEBUG), so an app that shows INFO would see a line for each of Chronicle's batches. The filter
below, added once to those loggers, drops only the records emitted while one of Chronicle's own
requests runs (``own_request()`` marks it in a context variable, on the thread or task making the
request). The application's requests log exactly as before, and its logging configuration
(levels, handlers, formatters) is left alone.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["own_request"]

_LOGGERS = (
    "httpx",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
)

_own = contextvars.ContextVar("chronicle_own_request", default=False)
_installed = False
_lock = threading.Lock()


class _NotChronicles(logging.Filter):
    """Passes every record except those logged during one of Chronicle's own requests."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _own.get()


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        quiet = _NotChronicles()
        for name in _LOGGERS:
            logging.getLogger(name).addFilter(quiet)
        _installed = True


@contextmanager
def own_request() -> Iterator[None]:
    """Mark what runs inside as Chronicle's own traffic: its HTTP library logs nothing."""
    if not _installed:
        _install()
    token = _own.set(True)
    try:
        yield
    finally:
        _own.reset(token)
