"""Incident files a pytest-marker test replays, recorded in memory (no control plane)."""

from __future__ import annotations

from pathlib import Path

import chronicle
from chronicle.save.incident import Incident
from chronicle.testing import capture


def write_today_incident(path: Path) -> None:
    """Write to ``path`` an incident of one request named ``today`` with one call of a ``today``
    tool boundary, which returned ``"monday"``."""

    @chronicle.boundary("today", kind="tool")
    def today() -> str:
        return "monday"

    with capture() as sent:
        with chronicle.record("today"):
            today()
    Incident.of(sent.envelopes).write(path)
