"""``pytest --chronicle-corpus`` at the scale of a real corpus (issue 41 item 6): collection
names the recordings without reading them, each recording is read once, by the process that
replays it (not by every pytest-xdist worker), and a corpus of files opens no connection.

The rates themselves are ``make bench``'s (section 8a), not asserted here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import chronicle
from chronicle.save.incident import Incident
from chronicle.testing import capture
from examples import triage_agent
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer, chat_text
from tests.support.nested_pytest import TWO_WORKERS_GROUP, WATCH, CorpusRun

pytest_plugins = ["pytester", "tests.support.two_workers"]

ENTRY = "examples.triage_agent:triage"
REPO = Path(__file__).parent.parent


def corpus(server: LlmServer, folder: Path, count: int) -> list[str]:
    """``count`` incident files in ``folder``: two live requests of the triage agent, recorded,
    then repeated under names of their own (as a corpus of many users' requests is)."""
    recorded = []
    for n in range(2):
        server.reply_with(chat_text(f"Notes {n}."), chat_text(f"Answer {n}."))
        with capture() as sent:
            with chronicle.record(f"triage-{n}"):
                triage_agent.triage(ticket=f"My invoice is wrong ({n})", customer_tier="standard")
        path = folder.parent / f"recorded-{n}.json"
        Incident.of(sent.envelopes).write(path)
        recorded.append(path)
    folder.mkdir()
    names = [f"request-{n:03d}.json" for n in range(count)]
    for n, name in enumerate(names):
        shutil.copyfile(recorded[n % 2], folder / name)
    return names


def watched(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[pytest.RunResult, list[str]]:
    """``pytest --chronicle-corpus incidents`` in this process, with ``WATCH`` as its conftest;
    the result and the lines it noted."""
    log = pytester.path / "watch.log"
    log.write_text("", encoding="utf-8")
    pytester.makeconftest(WATCH)
    monkeypatch.setenv("CORPUS_WATCH_LOG", str(log))
    corpus_args = ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY, "incidents"]
    result = run_inline(pytester, *corpus_args, *args)
    return result, log.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def test_collection_names_the_recordings_without_reading_them(agent, pytester, monkeypatch):
    names = corpus(agent, pytester.path / "incidents", 30)
    (pytester.path / "incidents" / names[7]).write_text("not JSON at all", encoding="utf-8")
    result, noted = watched(pytester, monkeypatch, "--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["incidents/request-000.json", "30 tests collected*"])
    assert noted == []  # not one recording read, the unreadable one included


@pytest.mark.xdist_group(TWO_WORKERS_GROUP)
def test_two_workers_read_each_recording_once_and_connect_nowhere(
    corpus_on_two_workers: CorpusRun,
) -> None:
    run = corpus_on_two_workers
    reads = [line.split()[2] for line in run.noted if line.split()[1] == "read"]
    assert sorted(reads) == [p.name for p in run.paths]  # each once, whichever worker replayed it
    assert len(set(run.readers().values())) == 2  # both workers replayed a share
    assert [line for line in run.noted if line.split()[1] == "connect"] == []


def test_one_process_reads_each_recording_when_its_item_runs(agent, pytester, monkeypatch):
    names = corpus(agent, pytester.path / "incidents", 12)
    (pytester.path / "incidents" / names[5]).write_text("{", encoding="utf-8")
    result, noted = watched(pytester, monkeypatch, "-n", "0", "-x")
    result.assert_outcomes(passed=5, failed=1)  # -x: the run stops at the unreadable one
    assert [line.split()[2] for line in noted] == names[:6]  # nothing read ahead of its item
