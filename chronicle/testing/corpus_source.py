"""``--chronicle-from-control-plane``: the control plane's traces as a pytest corpus, fetched once,
page by page, and cached as incident files.

The options read as ``chronicle replay --from-control-plane`` reads them, with the prefix every
option of the plugin has: ``--chronicle-label K:V`` (repeatable, every one must match),
``--chronicle-agent NAME``, ``--chronicle-since WHEN`` and ``--chronicle-limit N`` (default 100,
the most recent first), the control plane named by ``--chronicle-url`` (else the configured one:
``CHRONICLE_CONTROL_PLANE_URL``, the config file), the cache by ``--chronicle-cache DIR`` (else
``chronicle-corpus`` in pytest's cache folder, ``.pytest_cache/d/chronicle-corpus``).

How it runs:

- The flag adds the control plane to the ``--chronicle-corpus`` list (``FROM_CONTROL_PLANE``, in
  its place); ``resolve`` puts the selected traces' cached files there when pytest is configured,
  before collection, so they are collected as a folder's files are: each trace is one item, named
  after its file, ``<cache>/<trace_id>.json`` relative to pytest's rootdir (``-k TRACE_ID``
  selects it), its result's ``source`` the same path.
- The fetch happens once per session, in the process that runs it: the only one, or the
  pytest-xdist controller, before it starts any worker. Each worker is handed the list of files
  (``workerinput``) and opens no socket: every item reads the cache.
- The traces are listed a page at a time (``GET /v1/traces``, most recently active first, labels
  filtered by the control plane, the time window here; a listed page is all that is held). A trace
  the cache already has complete is not read again: a second run with the same selection asks the
  control plane for the list only. Any other trace is read (``GET /v1/traces/{id}`` for its
  spans' agents, then its envelopes) and written as an incident file, atomically; beside it a
  small ``<trace_id>.meta`` says which agents its spans carry and whether every span was closed
  when it was read. A trace read while still open is read again next time, until it is closed.
  Saved evaluations (``evaluate(save=True)``) are traces of their own, not requests: left out.

A control plane that cannot be read, a selector that cannot be used, and a selection no trace
matches are each a ``pytest.UsageError`` that says what to do.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from chronicle.errors import ChronicleError, ControlPlaneError, ReplayError, plural
from chronicle.read.connection import Connection, parse_time
from chronicle.read.traces import Match, agent_names, recent_traces
from chronicle.save.client import HttpControlPlane
from chronicle.save.incident import Incident, read_incident
from chronicle.testing.plugin_options import DEFAULT_LIMIT, FROM_CONTROL_PLANE
from chronicle.wire import EVALUATION

__all__ = ["Selection", "resolve"]

_HANDED = "chronicle_corpus_traces"
"""The ``workerinput`` key under which the pytest-xdist controller hands its workers the files."""
_RESOLVED = pytest.StashKey["Selection | None"]()
_PAGE = 100
"""Traces listed per request."""
_READERS = 4
"""Traces read (and written to the cache) at once."""


@dataclass
class Selection:
    """The traces ``--chronicle-from-control-plane`` selected: their files, in the control
    plane's order, how many were read now (the rest came from the cache), and the matching
    traces left out because they hold nothing to replay (each ``trace ID: why``)."""

    url: str
    cache: Path
    files: list[Path] = field(default_factory=list)
    read: int = 0
    left_out: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        """The session header's lines: what came from where, then what was left out and why."""
        kept = len(self.files) - self.read
        lines = [
            f"chronicle: {plural(len(self.files), 'trace')} from the control plane at "
            f"{self.url}: {self.read} read, {kept} from the cache {self.cache}"
        ]
        lines += [f"chronicle: left out {why}" for why in self.left_out[:5]]
        if len(self.left_out) > 5:
            lines.append(f"chronicle: left out {len(self.left_out) - 5} more traces")
        return lines


def resolve(config: pytest.Config) -> Selection | None:
    """Put the selected traces' files in the ``--chronicle-corpus`` list in place of
    ``FROM_CONTROL_PLANE`` (once per process; ``None`` without the flag): fetched here, or,
    in a pytest-xdist worker, as the controller handed them over. Raises ``pytest.UsageError``
    for a control plane that cannot be read, a selector that cannot be used, or no trace."""
    if _RESOLVED in config.stash:
        return config.stash[_RESOLVED]
    given: list[str] = list(config.getoption("chronicle_corpus") or [])
    selection: Selection | None = None
    if FROM_CONTROL_PLANE in given:
        workerinput: Mapping[str, Any] | None = getattr(config, "workerinput", None)
        if workerinput is not None:
            files = [Path(path) for path in workerinput.get(_HANDED) or ()]
            selection = Selection("", Path(), files)
        else:
            selection = _fetch(config)
            config.pluginmanager.register(_Handover(selection), "chronicle-corpus-source")
        kept = [path for path in given if path != FROM_CONTROL_PLANE]
        config.option.chronicle_corpus = kept + [str(path) for path in selection.files]
    elif _selectors_given(config):
        raise pytest.UsageError(
            "--chronicle-label, --chronicle-agent, --chronicle-since, --chronicle-limit and "
            "--chronicle-url select control-plane traces: add --chronicle-from-control-plane"
        )
    config.stash[_RESOLVED] = selection
    return selection


class _Handover:
    """The controller's (or the one process's) part: hands each pytest-xdist worker the files
    and says in the session's header what was fetched."""

    def __init__(self, selection: Selection) -> None:
        self.selection = selection

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """A worker about to start: the files it collects, instead of a fetch of its own."""
        node.workerinput[_HANDED] = [str(path) for path in self.selection.files]

    def pytest_report_header(self) -> list[str]:
        """``chronicle: 5 traces from the control plane at URL: 2 read, 3 from the cache``."""
        return self.selection.describe()


def _selectors_given(config: pytest.Config) -> bool:
    return bool(
        config.getoption("chronicle_label")
        or config.getoption("chronicle_agent")
        or config.getoption("chronicle_since")
        or config.getoption("chronicle_url")
        or config.getoption("chronicle_limit") != str(DEFAULT_LIMIT)
    )


# ---- the fetch ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Wanted:
    """What the command line selects."""

    labels: dict[str, str]
    since: datetime | None
    agent: str | None
    limit: int

    @property
    def said(self) -> str:
        """The selection as the command line gave it, for a message."""
        parts = [f"--chronicle-label {key}:{value}" for key, value in self.labels.items()]
        if self.agent is not None:
            parts.append(f"--chronicle-agent {self.agent}")
        if self.since is not None:
            parts.append(f"--chronicle-since {self.since.isoformat(timespec='seconds')}")
        return " ".join(parts) or "no selector (every trace)"


def _wanted(config: pytest.Config) -> _Wanted:
    labels: dict[str, str] = {}
    for text in config.getoption("chronicle_label"):
        key, sep, value = str(text).partition(":")
        if not sep or not key:
            raise pytest.UsageError(
                f"--chronicle-label takes K:V, a label's key and value (--chronicle-label "
                f"release:2.4), got {text!r}"
            )
        labels[key] = value
    since_text = config.getoption("chronicle_since")
    try:
        since = parse_time(since_text) if since_text else None
    except ValueError as exc:
        raise pytest.UsageError(f"--chronicle-since: {exc}") from None
    limit_text = str(config.getoption("chronicle_limit"))
    if not limit_text.isdigit() or int(limit_text) < 1:
        raise pytest.UsageError(
            f"--chronicle-limit takes the most traces to replay, a whole number from 1; got "
            f"{limit_text!r}"
        )
    return _Wanted(labels, since, config.getoption("chronicle_agent"), int(limit_text))


def _cache_folder(config: pytest.Config) -> Path:
    given = config.getoption("chronicle_cache")
    if given:
        return Path(os.path.abspath(given))
    cache = getattr(config, "cache", None)
    if cache is None:
        raise pytest.UsageError(
            "--chronicle-from-control-plane keeps the traces in pytest's cache, which is off "
            "here (-p no:cacheprovider): give --chronicle-cache DIR, a folder to keep them in"
        )
    return Path(cache.mkdir("chronicle-corpus"))


def _fetch(config: pytest.Config) -> Selection:
    """The selected traces, each in the cache (read now unless it was there, complete)."""
    if not config.getoption("chronicle_entry"):  # before any request: the corpus needs it
        raise pytest.UsageError(
            "--chronicle-corpus needs --chronicle-entry module:function, the function each "
            "recording is replayed through"
        )
    wanted = _wanted(config)
    cache = _cache_folder(config)
    try:
        connection = Connection.resolve(config.getoption("chronicle_url"), None)
    except ChronicleError as exc:
        raise pytest.UsageError(
            f"--chronicle-from-control-plane: {exc}; or name it with --chronicle-url URL"
        ) from None
    selection = Selection(connection.url, cache)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(connection.client()) as client:
            _select(client, wanted, selection)
    except ControlPlaneError as exc:
        raise pytest.UsageError(
            f"--chronicle-from-control-plane: {exc}; or read another control plane with "
            "--chronicle-url URL"
        ) from None
    except OSError as exc:
        raise pytest.UsageError(
            f"--chronicle-from-control-plane: cannot write to the cache {cache} "
            f"({exc.strerror or exc}); give --chronicle-cache DIR, a folder you can write to"
        ) from None
    if not selection.files:
        raise pytest.UsageError(
            f"--chronicle-from-control-plane: no trace on the control plane at {connection.url} "
            f"matches {wanted.said}; widen the selection (another label, an earlier "
            "--chronicle-since), or record some requests first"
        )
    return selection


def _select(client: HttpControlPlane, wanted: _Wanted, selection: Selection) -> None:
    """Fill ``selection`` with the first ``wanted.limit`` traces that match, page by page, each
    batch of candidates taken ``_READERS`` at a time (never more than the limit still wants, so
    no trace past it is read), in the control plane's order."""
    match = Match(wanted.labels, wanted.since, None, wanted.agent)
    candidates = (
        item
        for item in recent_traces(client, wanted.labels, since=wanted.since, page=_PAGE)
        if match.started_in(item) and not (item.get("metadata") or {}).get(EVALUATION)
    )
    with ThreadPoolExecutor(_READERS, thread_name_prefix="chronicle-corpus") as pool:
        while len(selection.files) < wanted.limit:
            batch = list(itertools.islice(candidates, wanted.limit - len(selection.files)))
            if not batch:
                return
            taken = pool.map(lambda item: _take(client, wanted.agent, selection.cache, item), batch)
            for path, read, why in taken:
                if why is not None:
                    selection.left_out.append(why)
                if path is not None:
                    selection.files.append(path)
                    selection.read += read


def _take(
    client: HttpControlPlane, agent: str | None, cache: Path, item: Mapping[str, Any]
) -> tuple[Path | None, bool, str | None]:
    """One listed trace: its cached file (``None`` when the agent does not match, or it holds
    nothing to replay), whether it was read now, and why it was left out (``trace ID: why``)."""
    trace_id = str(item.get("trace_id"))
    path = cache / f"{trace_id}.json"
    about = _about(path)
    known = about is not None and about.get("closed") is True  # as it is now, for good
    if about is None or not known:
        detail = client.get_trace(trace_id)
        if detail is None:  # pruned meanwhile
            return None, False, None
        about = {
            "agents": agent_names(detail.get("spans") or []),
            "closed": item.get("state") == "closed",
        }
    if agent is not None and agent not in (about.get("agents") or []):
        if not known:  # next time, told without a read
            _write_atomically(path.with_suffix(".meta"), json.dumps(about) + "\n")
        return None, False, None
    if known and path.exists():
        return path, False, None
    why = _read(client, trace_id, path)
    if why is not None:
        return None, False, f"trace {trace_id}: {why}"
    _write_atomically(path.with_suffix(".meta"), json.dumps(about) + "\n")
    return path, True, None


def _read(client: HttpControlPlane, trace_id: str, path: Path) -> str | None:
    """Read one trace's envelopes into the cache as its incident file; why not, when it holds
    nothing to replay (no envelopes, an envelope that is not valid) or is gone."""
    try:
        incident = read_incident(client, trace_id, all_spans=True)
    except ControlPlaneError as exc:
        if exc.status_code == 404 or "has no envelopes" in str(exc):
            return str(exc).partition("; ")[0].removeprefix(f"trace {trace_id} ")
        raise
    except ReplayError as exc:  # an envelope the model refuses: its replay would refuse it too
        return str(exc).splitlines()[0]
    assert isinstance(incident, Incident)  # all_spans: never a choice of spans
    incident.write(path)
    return None


def _about(path: Path) -> dict[str, Any] | None:
    """What the cache knows of a trace (``<trace_id>.meta``), or ``None``."""
    try:
        found = json.loads(path.with_suffix(".meta").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
