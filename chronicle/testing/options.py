"""The pytest plugin's options: what ``@pytest.mark.chronicle_replay(...)`` and the
``chronicle_config`` fixture may say (``MARKER_OPTIONS``, ``CONFIG_KEYS``), read into one
``Options`` per test, with one clear error (``Invalid``) for each thing that cannot be used."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from chronicle.config import load_settings
from chronicle.errors import ChronicleError
from chronicle.replay.divergence import Volatile
from chronicle.replay.network import NETWORK_MODES, NetworkMode
from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import Match
from chronicle.testing.network import LOOPBACK, AllowList
from chronicle.testing.plugin_options import MARKER, RECORD_MODES

MARKER_OPTIONS = (
    "source",
    "trace_id",
    "span_id",
    "run",
    "stub",
    "expect_change",
    "strict",
    "match",
    "ignore",
    "block_network",
    "allowed_hosts",
    "network",
    "record_mode",
)
"""The keywords ``@pytest.mark.chronicle_replay(...)`` takes."""
CONFIG_KEYS = (
    "strict",
    "match",
    "ignore",
    "incident_dir",
    "redactors",
    "settings",
    "block_network",
    "allowed_hosts",
    "network",
)
"""The keys ``chronicle_config`` may hold:

- ``strict``: fail a test whose replay diverges from its recording (default ``True``);
- ``match``: ``"order"`` (default) or ``"input"``, as for ``chronicle.replay()``;
- ``ignore``: input paths fresh on every run, not compared (``["state.messages[*].id"]``), as
  for ``chronicle.replay()``; a marker's ``ignore`` adds to these;
- ``incident_dir``: the folder relative marker paths are read from (a relative one is taken from
  pytest's rootdir); default: the test file's folder;
- ``redactors``: ``str -> str`` functions added to the default redactors, for recording and for
  comparing inputs during replay;
- ``settings``: other ``chronicle.configure()`` settings for the test body (``service_name``, ...);
  its ``control_plane_url`` is where ``trace_id=`` replays read; the configuration before the
  test is put back when it ends;
- ``block_network``, ``allowed_hosts``: as the command-line options, for every replay test;
- ``network``: what the replay does about a connection made outside any boundary the plan runs
  live, as for ``chronicle.replay()``: ``"report"`` (the default: a divergence, which fails the
  strict test), ``"block"`` or ``"allow"``. The hosts it lets through anyway are the control
  plane and ``allowed_hosts`` (when given: the block's default, loopback, is not the replay's).
"""


class Invalid(Exception):
    """A marker or ``chronicle_config`` that cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class Options:
    """One marked test's options: its marker and ``chronicle_config`` read together."""

    source: str | os.PathLike[str] | None
    trace_id: str | None
    span_id: str | None
    plan: ReplayPlan
    strict: bool
    match: Match
    ignore: Volatile
    incident_dir: Path | None
    settings: dict[str, object] | None
    block_network: bool
    allowed_hosts: tuple[str, ...]
    network: NetworkMode = "report"
    """The replay's ``network=`` (``chronicle.replay()``)."""
    replay_hosts: tuple[str, ...] = ()
    record_mode: str = "none"
    """The test's record mode: ``--chronicle-record-mode`` when given, else the marker's
    ``record_mode``, else ``none``."""
    """The replay's ``allowed_hosts=``: ``allowed_hosts`` as given (marker, config, command
    line), never the block's loopback default."""


def read_options(marker: pytest.Mark, config: object, pytest_config: pytest.Config) -> Options:
    """The marker's options over ``chronicle_config`` over the command line, checked."""
    kwargs = dict(marker.kwargs)
    _no_unknown(kwargs, MARKER_OPTIONS, f"@pytest.mark.{MARKER}() has no option")
    if len(marker.args) > 1:
        raise Invalid(
            f"@pytest.mark.{MARKER}() takes one positional argument, the incident file; got "
            f"{len(marker.args)}: {', '.join(repr(a) for a in marker.args)}"
        )
    if marker.args and "source" in kwargs:
        raise Invalid(f"@pytest.mark.{MARKER}() got the incident file twice (source=)")
    source = marker.args[0] if marker.args else kwargs.get("source")
    trace_id, span_id = kwargs.get("trace_id"), kwargs.get("span_id")
    if source is not None and not isinstance(source, (str, os.PathLike)):
        raise Invalid(f"the incident file is a path (str), got {source!r}")
    if source is None and (trace_id is None) != (span_id is None):
        raise Invalid(
            f"@pytest.mark.{MARKER}() reads a recorded span with both trace_id= and span_id=; "
            f'or give it an incident file (@pytest.mark.{MARKER}("incidents/x.json")), or '
            "neither, for the file named after the test"
        )
    if source is not None and (trace_id is not None or span_id is not None):
        raise Invalid(
            f"@pytest.mark.{MARKER}() takes an incident file or trace_id=/span_id=, not both"
        )
    for name, value in (("trace_id", trace_id), ("span_id", span_id)):
        if value is not None and not isinstance(value, str):
            raise Invalid(f"{name}= is a hex id (str), got {value!r}")
    plan = ReplayPlan()
    for mode in ("stub", "run", "expect_change"):
        for name, n in _targets(mode, kwargs.get(mode, ())):
            getattr(plan, mode)(name, n)

    if not isinstance(config, Mapping):
        raise Invalid(f"the chronicle_config fixture returns a dict, got {type(config).__name__}")
    _no_unknown(config, CONFIG_KEYS, "chronicle_config has no key")
    incident_dir = config.get("incident_dir")
    if incident_dir is not None:
        if not isinstance(incident_dir, (str, os.PathLike)):
            raise Invalid(f"chronicle_config: incident_dir is a folder path, got {incident_dir!r}")
        incident_dir = pytest_config.rootpath / Path(incident_dir)
    settings = settings_of(config)
    strict, match, ignore = replay_options(kwargs, config)
    block = kwargs.get("block_network", config.get("block_network"))
    if block is None:
        block = bool(pytest_config.getoption("chronicle_block_network"))
    if not isinstance(block, bool):
        raise Invalid(f"block_network is True or False, got {block!r}")
    network = network_option(kwargs, config)
    record_mode = pytest_config.getoption("chronicle_record_mode") or kwargs.get("record_mode")
    if record_mode is not None and record_mode not in RECORD_MODES:
        raise Invalid(f"record_mode is one of {', '.join(RECORD_MODES)}; got {record_mode!r}")
    hosts = _given_hosts(kwargs, config, pytest_config)
    return Options(
        source,
        trace_id,
        span_id,
        plan,
        strict,
        match,
        ignore,
        incident_dir,
        settings,
        block,
        LOOPBACK if hosts is None else hosts,
        network,
        hosts or (),
        record_mode or "none",
    )


def network_option(given: Mapping[str, object], config: Mapping[str, object]) -> NetworkMode:
    """``network``: ``given`` (the marker's or the fixture call's) over ``chronicle_config``,
    default ``"report"``, checked."""
    network = given.get("network", config.get("network", "report"))
    for mode in NETWORK_MODES:
        if network == mode:
            return mode
    raise Invalid(f"network is 'report', 'block' or 'allow', got {network!r}")


def replay_hosts(
    given: Mapping[str, object], config: Mapping[str, object], pytest_config: pytest.Config
) -> tuple[str, ...]:
    """The hosts a replay lets through anyway: ``allowed_hosts`` from ``given`` (the marker's or
    the fixture call's), else ``chronicle_config``, else ``--chronicle-allowed-hosts``; none
    when none is given (``block_network``'s default, loopback, is not a replay's)."""
    return _given_hosts(given, config, pytest_config) or ()


def _given_hosts(
    given: Mapping[str, object], config: Mapping[str, object], pytest_config: pytest.Config
) -> tuple[str, ...] | None:
    allowed = given.get("allowed_hosts", config.get("allowed_hosts"))
    if allowed is None:
        allowed = pytest_config.getoption("chronicle_allowed_hosts")
    if allowed is None:
        return None
    if isinstance(allowed, str):
        allowed = [part for part in allowed.split(",") if part.strip()]
    if not isinstance(allowed, Iterable) or not all(isinstance(h, str) for h in allowed):
        raise Invalid(f"allowed_hosts is a list of host names or addresses, got {allowed!r}")
    hosts = tuple(allowed)
    try:
        AllowList.parse(hosts)
    except ValueError as exc:
        raise Invalid(f"allowed_hosts: {exc}") from None
    return hosts


def replay_options(
    given: Mapping[str, object], config: Mapping[str, object]
) -> tuple[bool, Match, Volatile]:
    """``strict`` (default ``True``), ``match`` (default ``"order"``) and ``ignore``: ``given``
    (the marker's or the fixture call's) over ``chronicle_config`` (``ignore``: both), checked."""
    strict = given.get("strict", config.get("strict", True))
    if not isinstance(strict, bool):
        raise Invalid(f"strict is True or False, got {strict!r}")
    match = given.get("match", config.get("match", "order"))
    if match != "order" and match != "input":
        raise Invalid(f"match is 'order' or 'input', got {match!r}")
    patterns: list[str] = []
    for source in (config.get("ignore"), given.get("ignore")):
        if source is None:
            continue
        if isinstance(source, str):
            source = [source]
        if not isinstance(source, Iterable) or not all(isinstance(p, str) for p in source):
            raise Invalid(f'ignore is a list of input paths ("messages[*].id"), got {source!r}')
        patterns.extend(source)
    try:
        ignore = Volatile(patterns)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    return strict, match, ignore


def _no_unknown(given: Mapping[str, object], known: tuple[str, ...], what: str) -> None:
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise Invalid(f"{what} {key!r}{hint}; the known ones: {', '.join(known)}")


def _targets(mode: str, value: object) -> list[tuple[str, int | None]]:
    """``run=``/``stub=`` as ``(name, n)`` pairs: a name, or a list of names and pairs."""
    single = isinstance(value, str) or (
        isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int)
    )
    items = [value] if single else value
    if not isinstance(items, Iterable):
        raise Invalid(f"{mode}= takes a list of boundary names, got {value!r}")
    targets: list[tuple[str, int | None]] = []
    for item in items:
        if isinstance(item, str) and item:
            targets.append((item, None))
        elif (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[0]
            and isinstance(item[1], int)
            and not isinstance(item[1], bool)
            and item[1] >= 1
        ):
            targets.append((item[0], item[1]))
        else:
            raise Invalid(
                f"{mode}=[...] holds boundary names (str) or (name, n) pairs with n counted "
                f"from 1; got {item!r} ({type(item).__name__})"
            )
    return targets


def settings_of(config: Mapping[str, object]) -> dict[str, object] | None:
    """The ``configure()`` settings the test body runs with, or ``None`` to keep the current."""
    redactors = config.get("redactors")
    settings = config.get("settings")
    if redactors is None and settings is None:
        return None
    if settings is not None and not isinstance(settings, Mapping):
        raise Invalid(
            f"chronicle_config: settings is a dict of configure() settings, got {settings!r}"
        )
    merged: dict[str, object] = dict(settings or {})
    if redactors is not None:
        if not isinstance(redactors, Iterable) or not all(callable(r) for r in redactors):
            raise Invalid(
                f"chronicle_config: redactors is a list of str -> str functions, got {redactors!r}"
            )
        merged["redactors"] = [*_as_list(merged.get("redactors")), *redactors]
    try:
        load_settings(merged)
    except ChronicleError as exc:
        raise Invalid(f"chronicle_config: {exc}") from None
    return merged


def read_from(settings: Mapping[str, object] | None) -> tuple[str | None, str | None]:
    """Where a ``trace_id=`` replay reads its span (``url``, ``api_key``): the control plane the
    test's settings name (``chronicle_config()["settings"]["control_plane_url"]``, a worker's own
    under pytest-xdist, say), else ``(None, None)``: the configured one."""
    url = (settings or {}).get("control_plane_url")
    if not isinstance(url, str) or not url:
        return None, None
    key = (settings or {}).get("api_key")
    return url, key if isinstance(key, str) else None


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, Iterable) and not isinstance(value, str) else []
