"""Moved to ``chronicle.whatif.diff``; this path re-exports it for one release."""

from chronicle.whatif.diff import *  # noqa: F403
