"""The ``chronicle`` command's help teaches: every option of every command and subcommand says
what it does (and its default when it has one), every help ends with examples that parse, the
help wraps to the terminal, and a usage error exits 2 (issue 44, item 2).

The walk reads the real parser (``chronicle.cli._parser``), so a new option without help fails
here; ``undocumented`` is checked against a parser made to miss one, so the walk can fail.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator

import pytest

from chronicle import cli
from chronicle.cli.common import ChronicleParser, examples

SKIPPED = (argparse._HelpAction, argparse._VersionAction)


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser under ``parser`` (itself first), with the words that reach it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """The arguments of ``parser`` with no help text, and the options whose default (a value,
    not None, False or an empty list) the rendered help does not show."""
    missing = []
    rendered = " ".join(parser.format_help().split())
    for action in parser._actions:
        if isinstance(action, SKIPPED):
            continue
        name = "/".join(action.option_strings) or str(action.metavar or action.dest)
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            missing.append(f"{name}: no help")
            continue
        default = action.default
        valued = action.option_strings and default not in (None, False, [], argparse.SUPPRESS)
        if valued and str(default) not in rendered:
            missing.append(f"{name}: its default {default!r} is not shown")
    return missing


def example_lines(parser: argparse.ArgumentParser) -> list[str]:
    epilog = parser.epilog or ""
    assert epilog.startswith("examples:\n"), f"{parser.prog}: no examples"
    return [line.strip() for line in epilog.splitlines()[1:]]


ALL = list(commands(cli._parser()))
NAMES = [" ".join(path) or "chronicle" for path, _ in ALL]


def test_the_walk_reaches_every_command_and_agents_show():
    top = {path[0] for path, _ in ALL if path}
    assert top == {
        "traces",
        "show",
        "save",
        "diff",
        "agents",
        "evaluate",
        "replay",
        "report",
        "serve",
    }
    assert ("agents", "show") in [path for path, _ in ALL]


@pytest.mark.parametrize(("path", "parser"), ALL, ids=NAMES)
def test_every_option_has_help_and_shows_its_default(path, parser):
    assert undocumented(parser) == []


def test_the_walk_fails_an_option_without_help_or_a_hidden_default():
    parser = ChronicleParser(prog="chronicle demo")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--limit", type=int, default=20, help="most listed (see the default)")
    parser.add_argument("--shown", type=int, default=7, help="the number")  # (default: 7) added
    assert undocumented(parser) == ["--quiet: no help", "--limit: its default 20 is not shown"]


@pytest.mark.parametrize(("path", "parser"), ALL, ids=NAMES)
def test_every_help_ends_with_two_or_three_examples_that_parse(path, parser):
    lines = example_lines(parser)
    assert 2 <= len(lines) <= 3, lines
    for line in lines:
        command = line.split("  #")[0]
        words = shlex.split(command)
        assert words[: 1 + len(path)] == ["chronicle", *path], line
        assert cli._parser().parse_args(words[1:]) is not None  # SystemExit(2) if it does not
        assert parser.format_help().rstrip().endswith(lines[-1])


@pytest.mark.parametrize("path", [path for path, _ in ALL], ids=NAMES)
def test_help_runs_for_every_command(path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([*path, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and "examples:\n" in out


def help_text(columns: int, *args: str) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run(
        [sys.executable, "-m", "chronicle", *args, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == ""
    return result.stdout


def test_help_wraps_to_the_terminal_and_keeps_the_examples_whole():
    narrow = help_text(60, "replay")
    _, _, rest = narrow.partition("\n\n")  # argparse never splits a token of the usage
    prose, _, shown = rest.partition("examples:\n")
    assert max(len(line) for line in prose.splitlines()) <= 60
    assert "--fail 'refund#1=TimeoutError' --record" in shown  # an example is one line, uncut
    wide = help_text(120, "replay")
    assert max(len(line) for line in wide.splitlines()) <= 120
    assert len(wide.splitlines()) < len(narrow.splitlines())  # wider: fewer lines


def test_every_help_fits_100_columns_examples_included(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    for path, parser in commands(cli._parser()):
        long = [line for line in parser.format_help().splitlines() if len(line) > 100]
        assert long == [], path


def test_agents_help_shows_show_as_a_subcommand_not_a_choice():
    text = help_text(100, "agents")
    assert "{show}" not in text
    assert "agents show AGENT_ID" in text.splitlines()[1]  # the second usage line
    one = help_text(100, "agents", "show")
    assert one.startswith("usage: python -m chronicle agents show [-h]")
    assert "AGENT_ID" in one


def test_agents_show_takes_its_options_before_or_after_show():
    parser = cli._parser()
    before = parser.parse_args(["agents", "--url", "http://a", "show", "agt_1"])
    after = parser.parse_args(["agents", "show", "agt_1", "--url", "http://b"])
    listing = parser.parse_args(["agents", "--limit", "3"])
    assert (before.action, before.agent, before.url) == ("show", "agt_1", "http://a")
    assert (after.url, after.scan_limit) == ("http://b", 5000)
    assert (listing.action, listing.limit) == (None, 3)


# ---- exit statuses ---------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}
    return subprocess.run(
        [sys.executable, "-m", "chronicle", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("replay", "tests/incidents", "--entry", "no_such_module:handle"),
        ("replay", "tests/incidents", "--entry", "handle_without_a_module"),
        ("replay", "tests/incidents"),  # --entry missing
        ("traces", "--since", "yesterday-ish"),
        ("traces", "--limit", "0"),
        ("agents", "shw"),
        ("agents", "show"),
        ("show",),
        ("no-such-command",),
    ],
    ids=lambda args: " ".join(args),
)
def test_a_usage_error_exits_2_and_says_where_the_help_is(args):
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "--help" in last or "entry" in last  # argparse's errors, or the entry to fix


def test_an_entry_that_cannot_be_imported_is_one_line_saying_what_to_fix():
    result = run("replay", "tests/incidents", "--entry", "no_such_module:handle")
    (line,) = result.stderr.strip().splitlines()
    assert "the entry no_such_module:handle cannot be imported" in line
    assert "run from the folder the module is imported from" in line


def test_other_failures_exit_1():
    down = run("traces", "--url", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert down.returncode == 1 and "Traceback" not in down.stderr


def test_examples_keeps_each_command_on_its_line():
    assert examples("chronicle a", "chronicle b  # why") == (
        "examples:\n  chronicle a\n  chronicle b  # why"
    )
