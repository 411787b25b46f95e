"""``pytest --chronicle-corpus --chronicle-jobs N`` (issue 41 item 6): the corpus's replays run
ahead in N processes and each item reports its recording's result as it arrives, exactly as it
reports it when it replays the recording itself; and ``Replayers``, which runs them, yields the
results in order while holding only a few at a time.

The corpus is ``examples/triage_agent.py``'s requests, recorded through a real ``openai.OpenAI``
client talking to the local model server (``tests/test_corpus.py``'s ``record_corpus``): one
replays as recorded, one is edited so the code no longer asks what it recorded (diverged), one is
not an incident file (error).
"""

from __future__ import annotations

import re
import sys
import textwrap
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

import chronicle
from chronicle.save.incident import Incident
from chronicle.testing import capture
from chronicle.whatif.corpus import CorpusResult, Options, Replayers
from examples import triage_agent
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer
from tests.support.nested_pytest import RECORDINGS, TWO_WORKERS_GROUP, CorpusRun
from tests.test_corpus import ENTRY, record_corpus
from tests.test_corpus_reports import divert

pytest_plugins = ["pytester", "tests.support.two_workers"]

REPO = Path(__file__).parent.parent


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def corpus_args(name: str, *args: str) -> list[str]:
    """``pytest --chronicle-corpus incidents -p no:xdist``'s options, writing ``name``'s
    reports."""
    command = ["-p", "no:xdist", "-rf", "--chronicle-corpus", "incidents", "--chronicle-entry"]
    command += [ENTRY, "incidents", "--chronicle-report", f"{name}.html"]
    command += ["--chronicle-markdown", f"{name}.md", "--junit-xml", f"{name}.xml", *args]
    return command


def untimed(text: str) -> str:
    """A report without its timings (a replay's seconds, the run's, its rate), which differ
    from run to run."""
    text = re.sub(r'(time|timestamp|hostname)="[^"]*"', r'\1="-"', text)
    text = re.sub(r'(_ms|seconds)(&quot;|"): [0-9.e-]+', r"\1\2: -", text)  # JSON, also in XML
    text = re.sub(r"[0-9-]+ [0-9:.]+ UTC", "-", text)  # when the report was written
    return re.sub(r"[0-9]+(\.[0-9]+)? ?(s|ms|/s)\b", "-", text)


def failures(junit: Path) -> dict[str, str]:
    """Each failed test case's name and failure text, from a JUnit XML file."""
    found = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        for failure in case.iter("failure"):
            found[case.attrib["name"]] = failure.text or ""
    return found


WHERE = """
import sys


def pytest_terminal_summary(terminalreporter):
    imported = "examples.triage_agent" in sys.modules
    terminalreporter.write_line(f"the entry was imported by pytest's process: {imported}")
"""
"""A conftest saying whether pytest's own process replayed the recordings (imported the entry)."""


def test_jobs_report_what_one_process_reports(agent, pytester, monkeypatch):
    folder = pytester.path / "incidents"
    paths = record_corpus(agent, folder, 3)
    divert(paths[1])
    paths[2].write_text("not JSON at all", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest(WHERE)

    alone = run_inline(pytester, *corpus_args("alone"))  # replays in pytest's process
    ahead = pytester.runpytest_subprocess(  # a new one, to show it imports no entry
        "-p", "no:cacheprovider", *corpus_args("ahead", "--chronicle-jobs", "2"), timeout=120
    )  # fmt: skip

    for result in (alone, ahead):
        result.assert_outcomes(passed=1, failed=2)
    said = failures(pytester.path / "ahead.xml")
    diverged, error = (said[name] for name in sorted(said))
    assert "diverged  incidents/request-01.json" in diverged
    assert "a question the code no longer asks" in diverged
    assert "error     incidents/request-02.json: it is not JSON" in error
    assert said == failures(pytester.path / "alone.xml")  # the failure texts, word for word
    for suffix in ("xml", "md", "html"):
        one = (pytester.path / f"alone.{suffix}").read_text(encoding="utf-8")
        two = (pytester.path / f"ahead.{suffix}").read_text(encoding="utf-8")
        assert untimed(two) == untimed(one), suffix
    summary = (pytester.path / "ahead.md").read_text(encoding="utf-8")
    assert "3 recordings: 1 passed, 1 diverged, 1 error" in summary
    lines = [line for line in ahead.outlines if line.startswith("FAILED")]
    assert lines == [line for line in alone.outlines if line.startswith("FAILED")]
    ahead.stdout.fnmatch_lines(["the entry was imported by pytest's process: False"])


@pytest.mark.xdist_group(TWO_WORKERS_GROUP)
def test_under_xdist_jobs_is_ignored_with_a_warning_and_each_worker_replays(
    corpus_on_two_workers: CorpusRun,
) -> None:
    run = corpus_on_two_workers  # -n 2 --chronicle-jobs 2
    run.result.stdout.fnmatch_lines(["*--chronicle-jobs is ignored under pytest-xdist (-n)*"])
    summary = run.text("summary.md")
    assert f"{RECORDINGS} recordings: {RECORDINGS - 2} passed, 1 diverged, 1 error" in summary
    assert len(set(run.readers().values())) == 2  # the two workers, no job process


ANSWERS = """
import os

import chronicle


@chronicle.boundary("answer")
def answer(n):
    log = os.environ.get("JOBS_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{n}\\n")
    return {"n": n, "double": 2 * n}
"""
"""An entry that notes each call (in the file ``JOBS_LOG`` names) and what it was asked."""


def test_replayers_yield_in_order_and_replay_only_a_few_chunks_ahead(tmp_path, monkeypatch):
    (tmp_path / "jobs_answers.py").write_text(textwrap.dedent(ANSWERS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import jobs_answers  # type: ignore[import-not-found]

    files = []
    for n in range(40):
        with capture() as sent, chronicle.record(f"answer-{n}"):
            jobs_answers.answer(n)
        files.append(tmp_path / f"answer-{n:02d}.json")
        Incident.of(sent.envelopes).write(files[-1])
    log = tmp_path / "calls.log"
    monkeypatch.setenv("JOBS_LOG", str(log))  # reaches the processes started after this
    del sys.modules["jobs_answers"]

    with Replayers("jobs_answers:answer", Options(), 2, ahead=3) as replayers:
        results = replayers.results(files, chunk=2)
        first_file, first = next(results)
        assert first_file == files[0]
        assert isinstance(first, CorpusResult) and first.passed
        deadline = time.monotonic() + 60
        while len(log.read_text(encoding="utf-8").split()) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # room to replay more, were it not held back
        replayed = log.read_text(encoding="utf-8").split()
        assert len(replayed) == 6  # the chunk read, and the 3 chunks ahead of it: no more
        rest = list(results)
    assert [path for path, _ in rest] == files[1:]
    assert all(isinstance(r, CorpusResult) and r.passed for _, r in rest)
    assert [r.live_output for _, r in [(first_file, first), *rest]] == [  # type: ignore[union-attr]
        {"n": n, "double": 2 * n} for n in range(40)
    ]
    assert sorted(map(int, log.read_text(encoding="utf-8").split())) == list(range(40))


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("no_such_module_here:entry", "No module named 'no_such_module_here'"),
        ("jobs_broken:entry", "RuntimeError: no settings here"),  # raises on import
    ],
)
def test_an_entry_that_cannot_be_imported_is_said_for_each_recording(
    tmp_path, monkeypatch, entry, said
):
    (tmp_path / "jobs_broken.py").write_text("raise RuntimeError('no settings here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    files = [tmp_path / f"any-{n}.json" for n in range(2)]
    with Replayers(entry, Options(), 2) as replayers:
        results = list(replayers.results(files))
    assert [path for path, _ in results] == files
    for _, result in results:
        assert isinstance(result, str) and f"the entry {entry} cannot be imported" in result
        assert said in result
