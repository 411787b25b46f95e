"""What every ``chronicle`` command shares: the usage error (exit status 2), the program's
name as the user typed it, the argument types (times, labels, counts), the output width, how
``--json`` prints, how a file asked for (``--html``, ``--report``, ...) is written, and the
help's formatter and its examples."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NoReturn

from chronicle.read.connection import parse_time
from chronicle.read.page import write_page


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


def table_width(stream: IO[str]) -> int | None:
    """The width a table fits: a terminal's (``width``); ``None`` for a pipe or a file, which
    gets every column whole (a reader there is a program or a pager, not a window)."""
    if getattr(stream, "isatty", lambda: False)():
        return width(stream)
    return None


def write_json(out: IO[str], value: Any) -> None:
    """Print ``value`` as a command's ``--json`` document: indented two spaces, non-ASCII text
    as it is (not ``\\u`` escapes), a newline after."""
    out.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def write_json_line(out: IO[str], value: Any) -> None:
    """Print ``value`` as one line of a command's ``--json`` stream (JSON Lines: an object a
    line, as each result comes), non-ASCII text as it is."""
    out.write(json.dumps(value, ensure_ascii=False) + "\n")


def write_file(text: str, path: str | Path, *, what: str | None = None) -> Path:
    """Write a file a command was asked for (``--report``, ``--markdown``, ``--junit-xml``)
    whole; a usage error saying what to do when it cannot (``what``, as ``the page``, names the
    file in it)."""
    try:
        return write_page(text, path)
    except OSError as exc:
        target = f"{what} to {path}" if what else f"{path}"
        raise Usage(
            f"cannot write {target}: {exc.strerror or exc}; give a path in a folder that exists "
            "and that you can write to"
        ) from None


def write_html(html: str, path: str) -> Path:
    """Write a page (``--html PATH``) whole, as ``write_file`` does."""
    return write_file(html, path, what="the page")


# ---- help that teaches -----------------------------------------------------------------------


class HelpFormatter(argparse.HelpFormatter):
    """The help of every ``chronicle`` command: wrapped to the terminal's width (argparse's own
    rule: ``COLUMNS`` or the terminal, less 2; 80 when neither says), an option column wide
    enough for the metavars, each option's default after its help when it has one (a value, not
    ``None``, ``False`` or an empty list) and the help does not already say it, and a paragraph
    whose lines are all indented (the examples) kept line for line."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 32,
        width: int | None = None,
    ) -> None:
        super().__init__(prog, indent_increment, max_help_position, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.strip("\n").split("\n\n"):
            lines = block.splitlines()
            if any(line.startswith(" ") for line in lines):  # a heading and its lines, as written
                blocks.append("\n".join(indent + line for line in lines))
            else:
                blocks.append(super()._fill_text(block, width, indent))
        return "\n\n".join(blocks)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        shown = default not in (None, False, [], argparse.SUPPRESS) and action.option_strings
        if shown and "default" not in text:
            text += " (default: %(default)s)"
        return text


def examples(*commands: str) -> str:
    """An ``epilog`` of examples: ``examples:`` then each command on its own line, as the
    README writes it (a ``  # note`` after a command is kept)."""
    return "examples:\n" + "\n".join(f"  {command}" for command in commands)


class ChronicleParser(argparse.ArgumentParser):
    """The parser of ``chronicle`` and of each of its commands: ``HelpFormatter`` by default,
    and a usage error (exit status 2) that ends by naming the help to read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print the usage and the mistake, then where the help is; exit status 2."""
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n(see {self.prog} --help)\n")
