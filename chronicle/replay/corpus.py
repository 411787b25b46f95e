"""Moved to ``chronicle.whatif.corpus``; this path re-exports it for one release."""

from chronicle.whatif.corpus import *  # noqa: F403
