"""``--chronicle-corpus``: one pytest item per recording, replayed by calling
``--chronicle-entry`` with its recorded input (``chronicle.replay.corpus``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typing_extensions import override

from chronicle.replay import corpus

_ENTRY = pytest.StashKey["corpus.Entry | str"]()
"""The corpus's entry, imported once per process (or why it cannot be)."""


class CorpusFailed(Exception):
    """A corpus item whose replay did not pass; the message is ``CorpusResult.describe()``."""


class CorpusItem(pytest.Item):
    """One recording of ``--chronicle-corpus``, replayed by calling ``--chronicle-entry`` with
    its recorded input (``chronicle.replay.corpus``); named after the file."""

    def __init__(self, *, recording: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recording = recording

    @override
    def runtest(self) -> None:
        entry = corpus_entry(self.config)
        if isinstance(entry, str):
            raise CorpusFailed(entry)
        hosts = self.config.getoption("chronicle_allowed_hosts") or ""
        allowed = tuple(host for host in hosts.split(",") if host.strip())
        result = corpus.replay_file(self.recording, entry, corpus.Options(allowed_hosts=allowed))
        if not result.passed:
            raise CorpusFailed(result.describe())

    @override
    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        if isinstance(excinfo.value, CorpusFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    @override
    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.recording, None, f"chronicle replay {self.name}"


def corpus_entry(config: pytest.Config) -> corpus.Entry | str:
    """The corpus's entry, imported once per process, or the line saying why it cannot be."""
    entry = config.stash.get(_ENTRY, None)
    if entry is None:
        try:
            entry = corpus.load_entry(str(config.getoption("chronicle_entry")))
        except corpus.CorpusError as exc:
            entry = f"chronicle: {exc}"
        config.stash[_ENTRY] = entry
    return entry
