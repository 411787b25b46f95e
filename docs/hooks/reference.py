"""mkdocs hook: the reference pages' generated parts, read from the code when the site is built.

A page line ``<!-- generated: NAME -->`` is replaced by what ``NAME`` renders:

- ``cli``: ``chronicle --help`` and every command's ``--help``, from the parser the command uses;
- ``pytest-options``: the pytest plugin's command-line options, read from its ``pytest_addoption``;
- ``pytest-marker``: the ``chronicle_replay`` marker as ``pytest --markers`` prints it;

So the reference cannot drift from the code: a renamed option is renamed on the page at the next
``make docs``. Nothing here reaches the network.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any

MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)
ROOT = Path(__file__).resolve().parents[2]
# The code documented is this checkout's, whatever else the environment has installed under the
# same name (an editable install of another copy, a wheel).
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))


def _cli() -> str:
    from chronicle.cli import _parser

    os.environ.setdefault("COLUMNS", "100")
    parser = _parser()
    parts = [f"## chronicle\n\n```text\n{_help(parser)}```"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                parts.append(f"## chronicle {name}\n\n```text\n{_help(command)}```")
                for sub in command._actions:
                    if isinstance(sub, argparse._SubParsersAction):
                        for subname, subcommand in sub.choices.items():
                            help_text = _help(subcommand)
                            parts.append(
                                f"### chronicle {name} {subname}\n\n```text\n{help_text}```"
                            )
    return "\n\n".join(parts)


def _help(parser: argparse.ArgumentParser) -> str:
    """``--help`` as a reader sees it: this machine's home folder written ``~``."""
    return parser.format_help().replace(str(Path.home()), "~")


class _Group:
    """Collects what ``pytest_addoption`` adds, in order."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def addoption(self, *names: str, **settings: Any) -> None:
        self.options.append((names, settings))


class _Parser:
    def __init__(self) -> None:
        self.group = _Group()

    def getgroup(self, *args: Any, **kwargs: Any) -> _Group:
        return self.group

    def addini(self, *args: Any, **kwargs: Any) -> None:
        """The plugin adds no ini setting today; one added later is left off this table."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _pytest_options() -> str:
    from chronicle.testing.pytest_plugin import pytest_addoption

    parser = _Parser()
    pytest_addoption(parser)  # type: ignore[arg-type]
    rows = ["| Option | Default | What it does |", "|---|---|---|"]
    for names, settings in parser.group.options:
        metavar = settings.get("metavar") or ("MODE" if settings.get("choices") else "")
        flag = " ".join(names) + (f" {metavar}" if settings.get("action") != "store_true" else "")
        default = settings.get("default")
        shown = "off" if default is False else ("none" if default in (None, []) else default)
        rows.append(
            f"| `{flag.strip()}` | {_cell(str(shown))} | {_cell(settings.get('help', ''))} |"
        )
    return "\n".join(rows)


class _Config:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def addinivalue_line(self, name: str, line: str) -> None:
        self.lines.append(line)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def _pytest_marker() -> str:
    from chronicle.testing.pytest_plugin import pytest_configure

    config = _Config()
    with contextlib.suppress(AttributeError):  # what it registers after the marker needs a session
        pytest_configure(config)  # type: ignore[arg-type]
    return "\n\n".join(f"```text\n@pytest.mark.{line}\n```" for line in config.lines)


RENDERERS = {
    "cli": _cli,
    "pytest-options": _pytest_options,
    "pytest-marker": _pytest_marker,
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each ``<!-- generated: NAME -->`` line by what ``RENDERERS[NAME]`` returns."""

    def render(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(
                f"<!-- generated: {name} -->: no such part; use one of {sorted(RENDERERS)}"
            )
        return RENDERERS[name]()

    return MARKER.sub(render, markdown)
