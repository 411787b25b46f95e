"""The model client a framework holds, handed to ``chronicle.wrap`` once.

An instrumentor calls ``wrap_once(client, holder)`` where the framework fetches its client for a
request; the first call wraps it in place (``chronicle.wrap``), later calls are one set lookup.
A client Chronicle cannot wrap (a custom class) is left as it is, with one warning naming the
fix, so the user's model call always runs.
"""

from __future__ import annotations

import contextlib
import logging
import weakref

from chronicle.integrations.clients import wrap

__all__ = ["wrap_once"]

logger = logging.getLogger("chronicle")

_seen: weakref.WeakSet[object] = weakref.WeakSet()
"""Clients already handed to ``wrap`` (wrapped, or warned about)."""


def wrap_once(client: object, holder: str) -> None:
    """Wrap ``client`` (held by ``holder``, named in the warning) once; never raises."""
    if client is None:
        return
    try:
        if client in _seen:
            return
        _seen.add(client)
    except TypeError:  # not weak-referenceable: wrap again next time (it is idempotent)
        pass
    try:
        wrap(client)
    except Exception as error:  # a client Chronicle does not know: its calls run unrecorded
        with contextlib.suppress(Exception):
            logger.warning(
                "chronicle: %s's model client %s is not recorded (%s); record the function "
                "that calls it with chronicle.wrap_llm",
                holder,
                type(client).__name__,
                error,
            )
