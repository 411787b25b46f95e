"""What every ``chronicle`` command shares: the usage error (exit status 2), the program's
name as the user typed it, the argument types (times, labels, counts) and the output width."""

from __future__ import annotations

import argparse
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import IO

from chronicle.read.connection import parse_time


class Usage(Exception):
    """A command-line mistake found after parsing (exit status 2)."""


def prog() -> str:
    """The program as the user ran it (``chronicle`` or ``python -m chronicle``), for messages."""
    return "python -m chronicle" if Path(sys.argv[0]).name == "__main__.py" else "chronicle"


def when(text: str) -> datetime:
    """An argument that is a time: ``2h``, ``30m``, ``1d`` ago, or an ISO date and time."""
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def label(text: str) -> tuple[str, str]:
    """An argument ``key:value`` as the pair."""
    key, sep, value = text.partition(":")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expects key:value, got {text!r}")
    return key, value


def positive(text: str) -> int:
    """An argument that is a whole number from 1."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expects a whole number from 1, got {text!r}")
    return number


def width(stream: IO[str]) -> int:
    """The width to draw at: a terminal's (60 to 200 columns), else 100."""
    if getattr(stream, "isatty", lambda: False)():
        return max(60, min(shutil.get_terminal_size((100, 24)).columns, 200))
    return 100
