"""Starting over in a forked child, written once.

An object that holds a thread, a lock or open connections must not carry them into a child
process made by ``os.fork()`` (the thread is gone there, the lock may be held forever, a
connection would be shared with the parent). Each registers the method that resets it with
``after_fork_in_child``; the method is held weakly, so a fork after the object is gone runs
nothing and the registration never keeps the object alive.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable

__all__ = ["after_fork_in_child"]


def after_fork_in_child(method: Callable[[], None]) -> None:
    """Run the bound ``method`` in every child this process forks from now on, while its object
    lives. Nothing where ``os.register_at_fork`` does not exist (Windows)."""
    if not hasattr(os, "register_at_fork"):
        return
    weak = weakref.WeakMethod(method)

    def in_child() -> None:
        found = weak()
        if found is not None:
            found()

    os.register_at_fork(after_in_child=in_child)
