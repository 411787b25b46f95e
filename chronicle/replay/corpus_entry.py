"""Moved to ``chronicle.whatif.corpus_entry``; this path re-exports it for one release."""

from chronicle.whatif.corpus_entry import *  # noqa: F403
