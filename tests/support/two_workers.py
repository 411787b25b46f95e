"""``corpus_on_two_workers``: the one corpus run on two pytest-xdist workers that several test
modules assert on (``tests/support/nested_pytest.py`` says why). A test module lists this module
in its ``pytest_plugins``."""

from __future__ import annotations

import pytest

from examples import triage_agent
from tests.support.llm_server import LlmServer
from tests.support.nested_pytest import (
    CORRUPT,
    DIVERGED,
    RECORDINGS,
    REPO,
    UNREACHED,
    WATCH,
    CorpusRun,
    run_pytest,
)


@pytest.fixture(scope="session")
def corpus_on_two_workers(tmp_path_factory: pytest.TempPathFactory) -> CorpusRun:
    """``pytest --chronicle-corpus incidents -n 2 -v --chronicle-jobs 2 --chronicle-run
    UNREACHED`` over ``RECORDINGS`` recordings of ``examples/triage_agent.py`` (one corrupt, one
    diverged), writing ``report.html``, ``summary.md`` and ``out.xml``, with ``WATCH`` as its
    conftest."""
    from tests.test_corpus import ENTRY, record_corpus  # (test modules: imported when it runs)
    from tests.test_corpus_reports import divert

    folder = tmp_path_factory.mktemp("corpus-on-two-workers")
    (folder / "conftest.py").write_text(WATCH, encoding="utf-8")
    log = folder / "watch.log"
    log.write_text("", encoding="utf-8")
    with LlmServer() as server, pytest.MonkeyPatch.context() as patch:
        patch.setattr(triage_agent.client, "base_url", server.openai_base_url)
        paths = record_corpus(server, folder / "incidents", RECORDINGS)
        paths[CORRUPT].write_text("{", encoding="utf-8")
        divert(paths[DIVERGED])
        served = len(server.requests)
        args = ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY, "incidents"]
        args += ["-n", "2", "-v", "--chronicle-jobs", "2", "--chronicle-run", UNREACHED]
        args += ["--junit-xml", "out.xml"]
        args += ["--chronicle-report", "report.html", "--chronicle-markdown", "summary.md"]
        env = {"PYTHONPATH": str(REPO), "CORPUS_WATCH_LOG": str(log)}
        result = run_pytest(folder, *args, env=env)
        live_calls = len(server.requests) - served
    noted = log.read_text(encoding="utf-8").splitlines()
    return CorpusRun(folder, paths, result, noted, live_calls)
