"""What a failed replay test prints: the diff of the replay against its recording, the call
log, and the lines that say how to fix a marker or record a missing incident file."""

from __future__ import annotations

from pathlib import Path

import pytest

from chronicle.replay.calllog import LoggedCall
from chronicle.replay.diff import diff
from chronicle.replay.incident import IncidentRun
from chronicle.replay.run import ReplayRun
from chronicle.testing.recording_run import RecordingRun

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


def diff_text(run: ReplayRun | IncidentRun | RecordingRun) -> list[str]:
    """The diff of a finished replay against its recording, the changed calls only (a span
    whose calls all match is left out); nothing for a recording run."""
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
        lines.append(f"diff of the replay against its recording{span} (changed calls only):")
        lines.append(found.render(changed_only=True))
    return lines


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
