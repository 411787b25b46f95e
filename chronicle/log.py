"""Chronicle's log lines reach a person whether or not the application configured logging.

Chronicle logs to the ``chronicle`` logger (and its children) with plain messages, so an
application's own format names the source once (``%(name)s: %(message)s`` gives
``chronicle: flush: ...``, not ``chronicle: chronicle: ...``). An application that configured
no logging at all would see Python's last-resort output, the bare message with no source; for
that case only, ``UnconfiguredHandler`` writes warnings and errors to ``stderr`` as
``chronicle: <message>``, as Python would have written them with the source in front. As soon
as any handler exists on the way to the root (``logging.basicConfig``, pytest's ``caplog``, a
framework's setup), it writes nothing and the application's handlers decide.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "chronicle"


class UnconfiguredHandler(logging.Handler):
    """Writes ``<logger name>: <message>`` to ``stderr`` for warnings and errors, only while no
    other handler would take the record (the case Python's ``logging.lastResort`` covers)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record, unless another handler on the way to the root takes it."""
        if self._others_take(record):
            return
        try:
            stream = sys.stderr
            if stream is not None:
                stream.write(self.format(record) + "\n")
                stream.flush()
        except Exception:
            self.handleError(record)

    def _others_take(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(handler is not self for handler in logger.handlers):
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False


def install() -> None:
    """Give the ``chronicle`` logger its ``UnconfiguredHandler`` (once per process)."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(handler, UnconfiguredHandler) for handler in logger.handlers):
        logger.addHandler(UnconfiguredHandler())
