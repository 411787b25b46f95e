"""The pytest plugin's command-line options, and the names they need, in a module that imports
nothing but pytest: pytest reads them in every session (``pytest_addoption``, ``--help``), so
a session that replays no corpus loads no corpus or replay code for them. The code that reads
the options lives beside what it runs (``corpus_items``, ``corpus_source``, ``corpus_report``,
``corpus_jobs``), and the corpus's part of the plugin (``corpus_plugin``) is loaded only when a
corpus is asked for (``wants_corpus``), its replay's part (``replay_plugin``) only when a test
needs it; what every part hands the session's end (``PROPERTY``, ``WRITTEN``) is named here."""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = [
    "CORPUS_PLUGIN",
    "DEFAULT_LIMIT",
    "FROM_CONTROL_PLANE",
    "MARKER",
    "PROPERTY",
    "RECORD_MODES",
    "REPLAY_PLUGIN",
    "REPORT_OPTIONS",
    "STARTED",
    "WRITTEN",
    "add_options",
    "wants_corpus",
    "wants_report",
]

MARKER = "chronicle_replay"
RECORD_MODES = ("none", "once", "new_episodes", "rewrite", "all")
FROM_CONTROL_PLANE = "--chronicle-from-control-plane"
"""What the flag adds to the ``--chronicle-corpus`` list, in its place, until
``corpus_source.resolve`` replaces it with the selected traces' files (no folder can be given
this name: it is an option)."""
DEFAULT_LIMIT = 100
"""``--chronicle-limit``'s default: the most traces ``--chronicle-from-control-plane`` takes."""
REPORT_OPTIONS = ("chronicle_report", "chronicle_markdown", "chronicle_json")
"""The options that write a corpus session's results: with any of them, each corpus item hands
its result over (``corpus_report``)."""
CORPUS_PLUGIN = "chronicle.testing.corpus_plugin"
"""The corpus's part of the plugin, loaded by name when a session has a corpus."""
REPLAY_PLUGIN = "chronicle.testing.replay_plugin"
"""The replay's part of the plugin, loaded by name when a test is marked or asks for a replay."""
PROPERTY = "chronicle"
"""The key of the ``user_properties`` a test hands the session's last lines over in."""
WRITTEN = pytest.StashKey[dict[Path, str]]()
"""The incident files this process wrote, and the test that wrote each."""
STARTED = pytest.StashKey[float]()
"""When the session started: a file written since was written by this run."""


def wants_corpus(config: pytest.Config) -> bool:
    """Whether the session has a corpus (``--chronicle-corpus`` or
    ``--chronicle-from-control-plane``)."""
    return bool(config.getoption("chronicle_corpus"))


def wants_report(config: pytest.Config) -> bool:
    """Whether the session writes a report or the results (so each item hands its result
    over)."""
    return any(config.getoption(name) for name in REPORT_OPTIONS)


def add_options(parser: pytest.Parser) -> None:
    """Every option of the plugin, in the ``chronicle`` group ``pytest --help`` shows."""
    group = parser.getgroup("chronicle", "Chronicle replay (incidents as regression tests)")
    group.addoption(
        "--chronicle-record-mode",
        choices=RECORD_MODES,
        default=None,
        help="none (default): replay incident files, a missing one fails; once: record a "
        "missing file by running the test live, replay an existing one; new_episodes: replay, "
        "run the calls with no recording live and add them to the file (a missing file as "
        "once); rewrite/all: run every marked test live and write its file again; wins over a "
        "marker's record_mode=",
    )
    group.addoption(
        "--chronicle-block-network",
        action="store_true",
        default=False,
        help="during replay tests, refuse connections to hosts outside "
        "--chronicle-allowed-hosts (a call that escapes the stubs fails the test)",
    )
    group.addoption(
        "--chronicle-allowed-hosts",
        default=None,
        metavar="HOSTS",
        help="comma-separated addresses, networks (127.0.0.0/8) or names that a blocked "
        "network still reaches (default: loopback, 127.0.0.0/8,::1,localhost)",
    )
    group.addoption(
        "--chronicle-corpus",
        action="append",
        default=[],
        metavar="DIR",
        help="also collect one test per incident file under DIR (repeatable): each calls "
        "--chronicle-entry with its recorded input, everything else stubbed, strictly",
    )
    group.addoption(
        "--chronicle-entry",
        default=None,
        metavar="MODULE:FUNCTION",
        help="the entry --chronicle-corpus calls: a @chronicle.boundary function, or an ASGI "
        "app (module:app) whose recorded HTTP requests are sent to it again",
    )
    _source_options(group)
    _plan_options(group)
    _report_options(group)
    group.addoption(
        "--chronicle-log-calls",
        action="store_true",
        default=False,
        help="print the call log (name#n stub|run) of every replay test, passed ones too "
        "(also with -v)",
    )


def _source_options(group: pytest.OptionGroup) -> None:
    """``--chronicle-from-control-plane`` and its selectors, named as ``chronicle replay
    --from-control-plane``'s (``--label``, ``--agent``, ``--since``, ``--limit``, ``--url``) with
    the plugin's prefix, and ``--chronicle-cache`` (``corpus_source`` reads them)."""
    group.addoption(
        FROM_CONTROL_PLANE,
        action="append_const",
        const=FROM_CONTROL_PLANE,
        dest="chronicle_corpus",
        help="also collect the control plane's traces that match --chronicle-label, "
        "--chronicle-agent, --chronicle-since and --chronicle-limit, one test each (fetched "
        "once per session into --chronicle-cache; a trace the cache has is not read again)",
    )
    group.addoption(
        "--chronicle-label",
        action="append",
        default=[],
        metavar="K:V",
        help="with --chronicle-from-control-plane: the traces labelled K=V; repeatable, every "
        "one must match (none, by default)",
    )
    group.addoption(
        "--chronicle-agent",
        default=None,
        metavar="NAME",
        help="with --chronicle-from-control-plane: an agent profile's name or agent_id (any, "
        "by default)",
    )
    group.addoption(
        "--chronicle-since",
        default=None,
        metavar="WHEN",
        help="with --chronicle-from-control-plane: started at or after 2h, 7d ago, or a time "
        "(no bound, by default)",
    )
    group.addoption(
        "--chronicle-limit",
        default=str(DEFAULT_LIMIT),
        metavar="N",
        help=f"with --chronicle-from-control-plane: most traces, the most recent first "
        f"(default {DEFAULT_LIMIT})",
    )
    group.addoption(
        "--chronicle-url",
        default=None,
        metavar="URL",
        help="with --chronicle-from-control-plane: the control plane to read (default: the "
        "configured one, CHRONICLE_CONTROL_PLANE_URL)",
    )
    group.addoption(
        "--chronicle-cache",
        default=None,
        metavar="DIR",
        help="with --chronicle-from-control-plane: the folder the traces are kept in as "
        "incident files, one per trace id (default: pytest's cache, "
        ".pytest_cache/d/chronicle-corpus)",
    )


def _plan_options(group: pytest.OptionGroup) -> None:
    """The corpus's plan, as ``chronicle replay`` takes it: ``--chronicle-run``,
    ``--chronicle-expect-change``, ``--chronicle-ignore``, ``--chronicle-match``,
    ``--chronicle-not-strict`` (``corpus_items.corpus_options`` reads them)."""
    group.addoption(
        "--chronicle-run",
        action="append",
        default=[],
        metavar="NAME[#n]",
        help="--chronicle-corpus: run that call live (every call of NAME, or its n-th as "
        "chronicle show numbers it), the code you changed; a recording that never makes it "
        "passes. Repeatable: --chronicle-run get_weather --chronicle-run 'search#2'",
    )
    group.addoption(
        "--chronicle-expect-change",
        action="append",
        default=[],
        metavar="NAME[#n]",
        help="--chronicle-corpus: a call the change is expected to alter (its input differs, "
        "or it is no longer made): reported, not failed. Repeatable: "
        "--chronicle-expect-change openai.chat.completions.create",
    )
    group.addoption(
        "--chronicle-ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="--chronicle-corpus: an input path fresh on every run, not compared, as "
        "replay's ignore= (repeatable): --chronicle-ignore 'messages[*].id'",
    )
    group.addoption(
        "--chronicle-match",
        choices=("order", "input"),
        default="order",
        help="--chronicle-corpus: serve each call the recording of the same order (default), "
        "or of the same input (--chronicle-match input, for calls made in a changing order)",
    )
    group.addoption(
        "--chronicle-not-strict",
        action="store_true",
        default=False,
        help="--chronicle-corpus: report divergences without failing the items",
    )


def _report_options(group: pytest.OptionGroup) -> None:
    """What the corpus's session writes and which part of it runs where: ``--chronicle-report``,
    ``--chronicle-markdown``, ``--chronicle-json`` (``corpus_report``), ``--chronicle-shard``,
    ``--chronicle-jobs`` (``corpus_jobs``)."""
    group.addoption(
        "--chronicle-report",
        default=None,
        metavar="PATH.html",
        help="--chronicle-corpus: also write the results as one web page, as chronicle replay "
        "--report does (the counts, tokens and cost recorded beside replayed, a row per "
        "recording linking to its call tree and diff), from every xdist worker",
    )
    group.addoption(
        "--chronicle-markdown",
        default=None,
        metavar="PATH",
        help="--chronicle-corpus: also write a Markdown summary table, for a pull-request "
        "comment or $GITHUB_STEP_SUMMARY",
    )
    group.addoption(
        "--chronicle-json",
        default=None,
        metavar="PATH",
        help="--chronicle-corpus: also write the results as chronicle replay --json prints "
        "them, one JSON line per recording, from every xdist worker; chronicle report merges "
        "the files of --chronicle-shard runs into the report of the whole corpus",
    )
    group.addoption(
        "--chronicle-shard",
        default=None,
        metavar="K/N",
        help="--chronicle-corpus: collect only the K-th of N even parts of the corpus, as "
        "chronicle replay --shard cuts them (the same recording in the same part everywhere)",
    )
    group.addoption(
        "--chronicle-jobs",
        type=int,
        default=0,
        metavar="N",
        help="--chronicle-corpus: replay the recordings ahead in N processes (each imports "
        "--chronicle-entry once), pytest reporting each result as it arrives; faster than -n N "
        "for a corpus of quick replays (ignored under -n, where each worker replays its items)",
    )
