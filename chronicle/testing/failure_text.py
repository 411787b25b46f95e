"""What a failed replay test prints: the diff of the replay against its recording, the call
log, and the lines that say how to fix a marker or record a missing incident file. Each thing is
said once: a changed input the divergences above the diff already print is, in the diff, a
pointer to its number."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from chronicle.replay.calllog import LoggedCall
from chronicle.replay.divergence import Divergence
from chronicle.replay.incident import IncidentRun
from chronicle.replay.run import ReplayRun
from chronicle.testing.recording_run import RecordingRun
from chronicle.whatif.diff import TraceDiff, diff

ON_THE_MARKER = (
    "On the marker: run=[(name, n)] runs a call live, expect_change=[(name, n)] accepts a "
    "change the fix makes, strict=False reports divergences without failing the test."
)
ON_THE_COMMAND_LINE = (
    "On the command line: --chronicle-run NAME[#n] runs a call live, --chronicle-expect-change "
    "NAME[#n] accepts a change the fix makes, --chronicle-ignore PATH leaves a fresh input path "
    "out, --chronicle-not-strict reports divergences without failing."
)
"""The corpus items' counterpart of ``ON_THE_MARKER``: ``--chronicle-corpus`` takes its plan
from pytest's command line."""


def diff_text(
    run: ReplayRun | IncidentRun | RecordingRun, said: Sequence[Divergence] = ()
) -> list[str]:
    """The diff of a finished replay against its recording, the changed calls only (a span
    whose calls all match is left out); nothing for a recording run. ``said``: the divergences
    printed above it, numbered from 1; a changed input one of them already shows whole is
    ``input  (divergence N above)`` instead of its paths again."""
    runs = list(run.runs.values()) if isinstance(run, IncidentRun) else [run]
    lines: list[str] = []
    for each in runs:
        if not isinstance(each, ReplayRun):
            continue
        span = f" (span {each.span_id})" if isinstance(run, IncidentRun) else ""
        try:
            found = diff(each)
        except Exception as exc:  # the report must not fail over its diff
            lines.append(f"(no diff of the replay against its recording{span}: {exc})")
            continue
        if isinstance(run, IncidentRun) and found.same:
            continue
        if said:
            mine = each.divergences() if isinstance(run, IncidentRun) else said
            found = _pointing_to(found, said, mine)
        lines.append(f"diff of the replay against its recording{span} (changed calls only):")
        lines.append(found.render(changed_only=True))
    return lines


def _pointing_to(
    found: TraceDiff, said: Sequence[Divergence], mine: Sequence[Divergence]
) -> TraceDiff:
    """``found`` with each changed input that a divergence of ``said`` (and of this span's,
    ``mine``) shows whole, every path of it, replaced by the number it is printed under."""
    numbers = {
        (d.name, d.index): (number, set(d.diff.splitlines()))
        for number, d in enumerate(said, 1)
        if d.kind == "input" and d in mine
    }
    calls = []
    for entry in found.calls:
        shown = numbers.get((entry.a.name, entry.a.index)) if entry.a is not None else None
        if shown is not None and entry.input and set(entry.input) <= shown[1]:
            entry = dataclasses.replace(entry, input=(f"(divergence {shown[0]} above)",))
        calls.append(entry)
    return dataclasses.replace(found, calls=tuple(calls))


def call_log_text(run: ReplayRun | IncidentRun | RecordingRun) -> str:
    """The call log, ``name#n stub|run`` a line (by span for a multi-span incident)."""
    if isinstance(run, IncidentRun):
        blocks = []
        for span in run.spans:
            calls = run.runs[span.span_id].call_log()
            if calls:
                blocks.append(
                    f"span {span.span_id} ({span.service or 'unknown service'}):\n"
                    + _calls_text(calls, "    ")
                )
        return "\n".join(blocks) or "  (no boundary was called)"
    return _calls_text(run.call_log(), "  ") or "  (no boundary was called)"


def _calls_text(calls: list[LoggedCall], indent: str) -> str:
    return "\n".join(f"{indent}{c.name}#{c.invocation_index} {c.mode}" for c in calls)


def shown_path(path: Path, config: pytest.Config) -> str:
    """``path`` as a message shows it: relative to pytest's rootdir when it is under it."""
    try:
        return str(path.relative_to(config.rootpath))
    except ValueError:
        return str(path)


def missing_file(shown: str, nodeid: str) -> str:
    """The failure of a replay test whose incident file does not exist: how to record it."""
    return (
        f"chronicle: the incident file {shown} does not exist, and record mode 'none' only "
        f"replays. Record it by running the test live once (the file is written whether the "
        f"test passes or fails, and says which):\n"
        f"    pytest --chronicle-record-mode=once '{nodeid}'\n"
        f"or save a recorded trace from the control plane:\n"
        f"    python -m chronicle save TRACE_ID -o {shown}"
    )
