"""What an in-process command or pytest run leaves unclosed, collected before the test goes on.

A child process's exit drops what it left unclosed (a client's socket) unseen; run in the test's
own process (``tests/support/cli.py``, ``inline.py``), that garbage is collected whenever the
collector next runs, perhaps in another test, whose ``filterwarnings = error`` then fails on
the ``ResourceWarning``. ``collected_after()`` collects it at once, and examines only the
objects the block made: everything older is frozen (``gc.freeze``) for that collection. A full
collection of a test worker's heap took about a second each time (6 commands: 7.9 s of a 12.4 s
test), this one milliseconds.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def collected_after() -> Iterator[None]:
    """Run the block, then collect the garbage it made, its ``ResourceWarning``s ignored (a
    child's exit would not show them either). Objects older than the block are left to the
    collector's own runs."""
    gc.freeze()
    try:
        yield
    finally:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                gc.collect()
        finally:
            gc.unfreeze()
