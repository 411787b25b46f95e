"""The corpus's part of the pytest plugin: loaded by ``pytest_plugin`` (by name,
``config.pluginmanager.import_plugin``) only in a session with ``--chronicle-corpus`` or
``--chronicle-from-control-plane``, so that the corpus's code (the replay runner, the report
page, the control plane's client) costs nothing to a session that has no corpus.

It adds one ``CorpusItem`` per incident file (``corpus_items``), leaves the corpus folders'
files to them, and registers, for the session, what replays the corpus ahead
(``--chronicle-jobs``: ``corpus_jobs``), what names the plan entries no recording reached
(``corpus_items.UnmatchedEntries``) and what writes the report files and the JSON lines
(``corpus_report``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chronicle.testing.corpus_items import (
    Corpus,
    CorpusItem,
    UnmatchedEntries,
    corpus_options,
    in_corpus_folder,
)
from chronicle.testing.corpus_jobs import CorpusJobs, jobs_wanted
from chronicle.testing.corpus_report import CorpusReport
from chronicle.testing.failure_text import shown_path
from chronicle.testing.plugin_options import wants_report
from chronicle.whatif import corpus
from chronicle.whatif.report import parse_shard


def pytest_configure(config: pytest.Config) -> None:
    """Read the corpus's options (a bad ``--chronicle-run`` and the like: a usage error), and
    register what the session needs besides the items."""
    options = corpus_options(config)
    jobs = jobs_wanted(config)
    if jobs:
        config.pluginmanager.register(
            CorpusJobs(config, jobs, options, _recording_of), "chronicle-corpus-jobs"
        )
    if not hasattr(config, "workerinput"):  # gathered where every report arrives
        config.pluginmanager.register(UnmatchedEntries(config), "chronicle-corpus-plan")
        if wants_report(config):
            config.pluginmanager.register(CorpusReport(config), "chronicle-corpus-report")


def _recording_of(item: pytest.Item) -> Path | None:
    """A corpus item's recording (``None`` for any other item)."""
    return item.recording if isinstance(item, CorpusItem) else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add one ``CorpusItem`` per incident file under ``--chronicle-corpus`` (sorted, so every
    pytest-xdist worker collects the same items), before ``-k`` and ``--deselect`` apply."""
    folders = config.getoption("chronicle_corpus")
    if not folders:
        return
    if not config.getoption("chronicle_entry"):
        raise pytest.UsageError(
            "--chronicle-corpus needs --chronicle-entry module:function, the function each "
            "recording is replayed through"
        )
    try:
        found = corpus.find_recordings(folders)
    except corpus.CorpusError as exc:
        raise pytest.UsageError(f"--chronicle-corpus: {exc}") from None
    given = config.getoption("chronicle_shard")
    if given:  # the K-th of N parts, as chronicle replay --shard cuts them
        try:
            found = corpus.sharded(found, (), *parse_shard(given, "--chronicle-shard"))[0]
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    named = [
        (shown_path(Path(os.path.abspath(path)), config), path)  # a link keeps its name
        for path in found
    ]
    collector = Corpus.from_parent(
        session, name="chronicle-corpus", nodeid="chronicle-corpus", recordings=named
    )
    items.extend(session.genitems(collector))  # reported as collected, as a file's tests are


@pytest.hookimpl(tryfirst=True)
def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave a ``--chronicle-corpus`` folder's incident files to the corpus (``None``: pytest
    decides as usual for everything else)."""
    return True if in_corpus_folder(collection_path, config) else None
