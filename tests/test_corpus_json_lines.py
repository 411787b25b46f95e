"""``pytest --chronicle-corpus ... --chronicle-json PATH`` writes the lines ``chronicle replay
--json`` prints, so the files of pytest shards (``--chronicle-shard K/N``, in-process; pytest-xdist
workers merged by the controller) merge with ``chronicle report`` into the report of one
unsharded ``chronicle replay``; a session with no corpus loads none of the corpus's code; and
``Replayers`` leave the caller's ``sys.path`` as it was.

The corpus is ``examples/triage_agent.py``'s requests, recorded in this process and written as
incident files by the real code (``tests/test_corpus.py``'s ``record_corpus``), one of them
edited so that its replay diverges.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from chronicle.cli import main
from chronicle.replay.network import LOOPBACK
from chronicle.whatif.corpus import Options, Replayers
from chronicle.whatif.report import Report
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer
from tests.test_corpus import ENTRY, agent, record_corpus
from tests.test_corpus_reports import divert

pytest_plugins = ["pytester"]

__all__ = ["agent"]  # the fixture: the triage agent's client pointed at the local model server

ROOT = Path(__file__).resolve().parent.parent
CORPUS_MODULES = (
    "chronicle.testing.corpus_plugin",
    "chronicle.testing.corpus_items",
    "chronicle.testing.corpus_jobs",
    "chronicle.testing.corpus_report",
    "chronicle.testing.corpus_source",
    "chronicle.whatif.corpus",
    "chronicle.read.page",
)
"""What only a session with a corpus loads: the corpus's part of the plugin and what it runs."""
NOT_COMPARED = ("seconds", "details", "spelling")
"""What a line says differently in pytest and ``chronicle replay`` for the same replay: how long
it took (the live calls' ``live_ms`` too), and its advice, spelt as each takes its options
(``--chronicle-run`` or ``--run``)."""


def cli(*argv: str) -> tuple[int, str]:
    """``chronicle ARGV`` in this process: its exit status and its stdout (a nested pytest run
    leaves ``capsys`` aside)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(argv))
    return status, out.getvalue()


def replay_json(folder: Path) -> str:
    """``chronicle replay FOLDER --entry ENTRY --json``'s stdout."""
    return cli("replay", str(folder), "--entry", ENTRY, "--json")[1]


def pytest_corpus(*options: str) -> list[str]:
    """The arguments of a pytest run of the ``incidents`` corpus, and only it."""
    return ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY, *options, "incidents"]


def by_source(text: str) -> dict[str, dict[str, Any]]:
    """JSON lines as their results by source, without what pytest says otherwise."""
    results = [json.loads(line) for line in text.splitlines() if line.strip()]
    for result in results:
        for cut in result["cut_points"]:
            del cut["live_ms"]
    return {r["source"]: {k: v for k, v in r.items() if k not in NOT_COMPARED} for r in results}


def report_out(*files: Path) -> tuple[int, list[str]]:
    """``chronicle report FILES``: its exit status and its stdout's lines, but the time it
    says the replays took."""
    status, out = cli("report", *map(str, files))
    lines = out.splitlines()
    return status, [lines[0].split(" (")[0], *lines[1:]]


def test_pytest_shards_merge_into_the_report_of_one_unsharded_replay(
    agent: LlmServer,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(pytester.path)  # sources are shown relative to it, in both
    paths = record_corpus(agent, pytester.path / "incidents", 5)
    divert(paths[3])
    whole = pytester.path / "whole.jsonl"
    whole.write_text(replay_json(Path("incidents")), encoding="utf-8")

    shards = []
    for k, outcomes in ((1, {"passed": 3}), (2, {"passed": 1, "failed": 1})):
        shards.append(pytester.path / f"shard-{k}.jsonl")
        options = ("--chronicle-shard", f"{k}/2", "--chronicle-json", str(shards[-1]))
        result = run_inline(pytester, *pytest_corpus(*options))
        result.assert_outcomes(**outcomes)
        result.stdout.fnmatch_lines(["*chronicle corpus report*", f"wrote {shards[-1]}"])
    first, second = (by_source(path.read_text(encoding="utf-8")) for path in shards)
    assert (len(first), len(second)) == (3, 2)  # each recording in one shard
    assert first | second == by_source(whole.read_text(encoding="utf-8"))  # line for line

    merged, unsharded = Report.read(shards), Report.read([whole])
    assert (
        merged.counts
        == unsharded.counts
        == {
            "passed": 4,
            "diverged": 1,
            "failed": 0,
            "error": 0,
        }
    )
    assert merged.totals == unsharded.totals
    assert [(r.source, r.outcome, r.first_divergence) for r in merged.rows] == [
        (r.source, r.outcome, r.first_divergence) for r in unsharded.rows
    ]
    status, said = report_out(*shards)
    assert (status, said) == report_out(whole)
    assert status == 1 and said[0] == "5 recordings: 4 passed, 1 diverged"
    assert said[2].startswith("diverged  incidents/request-03.json: research#1")


def test_pytest_xdist_workers_lines_are_merged_into_one_file(
    agent: LlmServer,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(pytester.path)
    paths = record_corpus(agent, pytester.path / "incidents", 4)
    divert(paths[0])
    whole = replay_json(Path("incidents"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *pytest_corpus("--chronicle-json", "all.jsonl", "-n", "2")
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*2 workers*"])
    written = (pytester.path / "all.jsonl").read_text(encoding="utf-8")
    assert by_source(written) == by_source(whole)  # both workers' results, each once
    sources = [json.loads(line)["source"] for line in written.splitlines()]
    assert sources == sorted(sources)  # in the report's order, whichever worker ran each
    assert report_out(pytester.path / "all.jsonl")[0] == 1


def test_a_recording_pytest_could_not_replay_is_an_error_line_that_fails_the_merge(
    agent: LlmServer,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(pytester.path)
    record_corpus(agent, pytester.path / "incidents", 2)
    args = ["--chronicle-corpus", "incidents", "--chronicle-entry", "no_such_module:triage"]
    result = run_inline(pytester, *args, "--chronicle-json", "out.jsonl", "incidents")
    result.assert_outcomes(failed=2)
    lines = by_source((pytester.path / "out.jsonl").read_text(encoding="utf-8"))
    assert [(r["source"], r["outcome"]) for r in lines.values()] == [
        ("incidents/request-00.json", "error"),
        ("incidents/request-01.json", "error"),
    ]
    assert "no_such_module" in lines["incidents/request-00.json"]["message"]
    status, said = report_out(pytester.path / "out.jsonl")
    assert status == 1 and said[0] == "2 recordings: 0 passed, 2 error"


# ---- a session with no corpus loads none of its code ----------------------------------------

SEEN = """
import json
import sys


def pytest_collection_finish(session):
    loaded = sorted(name for name in sys.modules if name.startswith("chronicle"))
    with open("loaded.json", "w", encoding="utf-8") as out:
        json.dump(loaded, out)
"""


def loaded_by(folder: Path, *args: str) -> set[str]:
    """The ``chronicle`` modules loaded when ``pytest --co ARGS`` in ``folder`` has collected."""
    (folder / "conftest.py").write_text(textwrap.dedent(SEEN), encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        check=False,
        timeout=120,
    )
    return set(json.loads((folder / "loaded.json").read_text(encoding="utf-8")))


def test_a_session_without_a_corpus_loads_none_of_the_corpus_code(tmp_path: Path) -> None:
    plain = loaded_by(tmp_path)
    assert "chronicle.testing.pytest_plugin" in plain  # the plugin is loaded, ...
    assert plain.isdisjoint(CORPUS_MODULES)  # ... without the corpus's code
    (tmp_path / "incidents").mkdir()
    with_corpus = loaded_by(tmp_path, *pytest_corpus())
    assert with_corpus.issuperset(CORPUS_MODULES)


def test_pytest_help_lists_every_option_of_the_plugin(
    pytester: pytest.Pytester, pytestconfig: pytest.Config
) -> None:
    group = pytestconfig._parser.getgroup("chronicle")  # the options as the plugin added them
    flags = [name for option in group.options for name in option.names()]
    assert "--chronicle-json" in flags
    shown = pytester.runpytest_inprocess("--help").stdout.str()
    assert [flag for flag in flags if flag not in shown] == []
    assert all(host in shown for host in LOOPBACK)  # --chronicle-allowed-hosts' default


# ---- Replayers and sys.path -------------------------------------------------------------------


def test_replayers_leave_sys_path_as_it_was_and_replay_an_entry_in_the_cwd(
    agent: LlmServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = record_corpus(agent, tmp_path / "incidents", 3)
    (tmp_path / "entry_in_cwd.py").write_text(
        "from examples.triage_agent import triage\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)  # the entry's module is found only here
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # where examples/ is, for a spawned process
    before = list(sys.path)
    assert str(tmp_path) not in before and "" not in before
    with Replayers("entry_in_cwd:triage", Options(), 2) as replayers:
        assert sys.path == before
        results = [result for _, result in replayers.results(paths)]
    assert sys.path == before
    assert [getattr(r, "outcome", r) for r in results] == ["passed"] * 3
