"""A corpus replayed in shards (``chronicle replay --shard K/N --json``) and merged
(``chronicle report``): the same recordings, the same totals and the same verdict as one
unsharded run; each recording in one shard, whatever the order the paths are given in.

The corpus is ``examples/triage_agent.py``'s requests, recorded in this process and written as
incident files by the real code (``tests/test_corpus.py``'s ``record_corpus``).
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from chronicle.cli import main
from chronicle.whatif.corpus import find_recordings, sharded
from chronicle.whatif.report import Report, parse_shard, shard
from examples import triage_agent
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer
from tests.test_corpus import ENTRY, record_corpus
from tests.test_corpus_reports import divert, report_files

pytest_plugins = ["pytester"]


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def test_shards_are_even_consecutive_and_cover_every_item_once():
    for size in range(0, 23):
        items = list(range(size))
        for n in range(1, 8):
            parts = [shard(items, k, n) for k in range(1, n + 1)]
            assert [x for part in parts for x in part] == items  # each once, in order
            lengths = [len(part) for part in parts]
            assert max(lengths) - min(lengths) <= 1


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2", "1/2/3"])
def test_a_shard_that_is_not_k_of_n_is_a_usage_error(text, tmp_path, capsys):
    with pytest.raises(ValueError, match="K/N"):
        parse_shard(text)
    assert main(["replay", str(tmp_path), "--entry", ENTRY, f"--shard={text}"]) == 2
    assert "--shard takes K/N" in capsys.readouterr().err


def test_a_recording_is_in_the_same_shard_whatever_the_order_of_the_paths(tmp_path):
    for name in ("b", "a", "c"):
        for n in range(3):
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / f"r{n}.json").write_text("{}", encoding="utf-8")
    forward = find_recordings([tmp_path / "a", tmp_path / "b", tmp_path / "c"])
    backward = find_recordings([tmp_path / "c", tmp_path / "b", tmp_path / "a"])
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    for k in (1, 2, 3, 4):
        assert sharded(forward, [trace], k, 4) == sharded(backward, [trace], k, 4)
    parts = [sharded(forward, [trace], k, 4) for k in (1, 2, 3, 4)]
    assert sorted(len(files) + len(ids) for files, ids in parts) == [2, 2, 3, 3]


def replay_json(folder: Path, *options: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``chronicle replay FOLDER --entry ENTRY --json OPTIONS``'s stdout."""
    main(["replay", str(folder), "--entry", ENTRY, "--json", *options])
    return capsys.readouterr().out


def test_two_shards_merged_give_the_report_of_one_unsharded_run(agent, tmp_path, capsys):
    folder = tmp_path / "incidents"
    paths = record_corpus(agent, folder, 7)
    divert(paths[2])
    divert(paths[5])
    whole = replay_json(folder, capsys=capsys)
    first = replay_json(folder, "--shard", "1/2", capsys=capsys)
    second = replay_json(folder, "--shard", "2/2", capsys=capsys)
    assert len(first.splitlines()) == 4 and len(second.splitlines()) == 3
    shards = []
    for number, text in enumerate((first, second), 1):
        shards.append(tmp_path / f"shard-{number}.jsonl")
        shards[-1].write_text(text, encoding="utf-8")
    (tmp_path / "whole.jsonl").write_text(whole, encoding="utf-8")

    merged, unsharded = Report.read(shards), Report.read([tmp_path / "whole.jsonl"])
    assert [row.source for row in merged.rows] == [row.source for row in unsharded.rows]
    assert (
        merged.counts
        == unsharded.counts
        == {
            "passed": 5,
            "diverged": 2,
            "failed": 0,
            "error": 0,
        }
    )
    assert merged.totals == unsharded.totals

    page, summary, junit, options = report_files(tmp_path)
    status = main(["report", *map(str, shards), *options])
    out, err = capsys.readouterr()
    assert status == 1  # two recordings diverged
    assert out.startswith("7 recordings: 5 passed, 2 diverged (")
    assert out.splitlines()[1] == unsharded.totals.change()
    assert sum(line.startswith("diverged  ") for line in out.splitlines()) == 2
    assert f"wrote {page}" in err
    assert "7 recordings: 5 passed, 2 diverged" in summary.read_text(encoding="utf-8")
    assert page.read_text(encoding="utf-8").count('<tr class="recording ') == 7
    suite = ElementTree.fromstring(junit.read_text(encoding="utf-8"))
    assert (suite.get("tests"), suite.get("failures")) == ("7", "2")


def test_chronicle_report_exits_0_when_every_recording_passed(agent, tmp_path, capsys):
    record_corpus(agent, tmp_path / "incidents", 2)
    text = replay_json(tmp_path / "incidents", capsys=capsys)
    (tmp_path / "all.jsonl").write_text(text, encoding="utf-8")
    assert main(["report", str(tmp_path / "all.jsonl")]) == 0
    assert capsys.readouterr().out.startswith("2 recordings: 2 passed (")


def test_a_file_that_is_not_replay_json_is_named_with_its_line(tmp_path, capsys):
    good = {"source": "a.json", "outcome": "passed"}
    path = tmp_path / "shard.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + "2 recordings: 2 passed\n", encoding="utf-8")
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path} line 3 is not a chronicle replay --json result" in err
    assert "its summary goes to stderr" in err
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps(good) + "\n", encoding="utf-8")
    assert main(["report", str(twice), str(twice)]) == 2
    assert "a.json is in both" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_a_plan_entry_no_shard_reached_fails_the_merge_naming_it(agent, tmp_path, capsys):
    folder = tmp_path / "incidents"
    record_corpus(agent, folder, 4)
    misspelt = ("--run", "serach_kb")
    status = main(["replay", str(folder), "--entry", ENTRY, "--json", *misspelt])
    unsharded = capsys.readouterr().err.splitlines()[-1]  # what one run says, last
    assert status == 1 and unsharded.startswith("the plan entry --run serach_kb matched no call")
    shards = []
    for k in (1, 2):
        status = main(
            ["replay", str(folder), "--entry", ENTRY, "--json", *misspelt, "--shard", f"{k}/2"]
        )
        out, err = capsys.readouterr()
        assert status == 0  # its recordings passed; another shard's might reach the entry
        assert f"shard {k}/2: the plan entry --run serach_kb matched no call" in err
        shards.append(tmp_path / f"shard-{k}.jsonl")
        shards[-1].write_text(out, encoding="utf-8")

    page, summary, _, options = report_files(tmp_path)
    assert main(["report", *map(str, shards), *options]) == 1
    out = capsys.readouterr().out
    assert out.startswith("4 recordings: 4 passed (")
    assert unsharded in out.splitlines()  # word for word what the unsharded run said
    assert "(did you mean 'search_kb'?)" in unsharded
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### ❌") and "--run serach_kb matched no call" in text
    assert "--run serach_kb matched no call" in page.read_text(encoding="utf-8")

    # One shard's recordings reach the entry (its results say they never missed it): no mistake.
    reached = [json.loads(line) | {"unmatched": []} for line in shards[1].read_text().splitlines()]
    shards[1].write_text("".join(json.dumps(r) + "\n" for r in reached), encoding="utf-8")
    assert main(["report", *map(str, shards)]) == 0
    assert "serach_kb" not in capsys.readouterr().out
    # Results written before they carried the plan merge as before: nothing to tell.
    for path in shards:
        old = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        path.write_text("".join(json.dumps(r | {"unmatched": None}) + "\n" for r in old))
    bare = [
        {k: v for k, v in json.loads(line).items() if k not in ("unmatched", "spelling")}
        for line in shards[0].read_text(encoding="utf-8").splitlines()
    ]
    shards[0].write_text("".join(json.dumps(r) + "\n" for r in bare), encoding="utf-8")
    assert main(["report", *map(str, shards)]) == 0
    assert capsys.readouterr().out.startswith("4 recordings: 4 passed (")


def test_j_2_replays_in_two_processes_with_the_results_in_the_same_order(agent, tmp_path, capsys):
    folder = tmp_path / "incidents"
    paths = record_corpus(agent, folder, 6)
    divert(paths[3])
    one = [json.loads(line) for line in replay_json(folder, capsys=capsys).splitlines()]
    two = [json.loads(line) for line in replay_json(folder, "-j", "2", capsys=capsys).splitlines()]
    assert [(r["source"], r["outcome"]) for r in two] == [(r["source"], r["outcome"]) for r in one]
    assert [r["usage"] for r in two] == [r["usage"] for r in one]
    assert two[3]["divergences"] == one[3]["divergences"]
    assert main(["replay", str(folder), "--entry", ENTRY, "-j", "2", "--record"]) == 2
    assert "drop -j, or --record" in capsys.readouterr().err


def test_the_pytest_corpus_collects_the_same_shards(agent, pytester, capsys):
    folder = pytester.path / "incidents"
    record_corpus(agent, folder, 5)
    args = ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY, "incidents"]
    args += ["--collect-only", "-q"]
    cli = [  # chronicle replay --shard's parts, before pytester prints anything
        [Path(json.loads(line)["source"]).name for line in text.splitlines()]
        for text in (replay_json(folder, "--shard", f"{k}/2", capsys=capsys) for k in (1, 2))
    ]
    parts = []
    for k in (1, 2):
        result = run_inline(pytester, *args, "--chronicle-shard", f"{k}/2")
        parts.append([line for line in result.outlines if line.startswith("incidents/")])
    assert [[Path(line).name for line in part] for part in parts] == cli  # the same cut
    assert [len(part) for part in parts] == [3, 2]
    wrong = run_inline(pytester, *args, "--chronicle-shard", "3/2")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    wrong.stderr.fnmatch_lines(["*--chronicle-shard takes K/N*"])


def test_a_pytest_shard_notes_an_entry_it_did_not_reach_and_the_whole_run_fails_over_it(
    agent, pytester
):
    record_corpus(agent, pytester.path / "incidents", 4)
    args = ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY, "incidents"]
    args += ["--chronicle-run", "serach_kb", "--chronicle-markdown", "summary.md"]
    shard = run_inline(pytester, *args, "--chronicle-shard", "1/2")
    assert shard.ret == pytest.ExitCode.OK  # another shard's recordings might reach it
    shard.stdout.fnmatch_lines(["shard 1/2: the plan entry --chronicle-run serach_kb matched*"])
    part = (pytester.path / "summary.md").read_text(encoding="utf-8")
    assert "serach_kb" not in part and "❌" not in part  # the shard's report fails over nothing
    whole = run_inline(pytester, *args)
    assert whole.ret == pytest.ExitCode.TESTS_FAILED
    line = "the plan entry --chronicle-run serach_kb matched no call in any of the 4 recordings"
    whole.stdout.fnmatch_lines([f"{line}*did you mean 'search_kb'*"])
    assert line in (pytester.path / "summary.md").read_text(encoding="utf-8")  # the report too
