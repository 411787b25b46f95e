"""Chronicle fixtures: a configured Chronicle saving to the session's control plane.

``recording`` configures Chronicle against the shared control plane for one test and resets it
afterwards; ``recording.saved(trace_id, n)`` flushes and reads back the trace's envelopes.
``only`` (the one envelope saved, lossless) and ``replay_of`` (the replay of a recorded session)
help every test of a wrapped client; ``streamed_metadata`` and ``drain`` the tests of streamed
calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import chronicle
from chronicle.testing import LocalControlPlane


@dataclass
class Recording:
    control_plane: LocalControlPlane

    def saved(self, trace_id: str, count: int) -> list[dict[str, Any]]:
        """Flush, then the trace's envelopes once ``count`` of them are stored (start order)."""
        assert chronicle.flush(10), "delivery did not finish; see the chronicle log"
        return self.control_plane.wait_for_envelopes(trace_id, count)


def only(
    envelopes: list[dict[str, Any]], *, lossless: tuple[str, ...] = ("input", "output")
) -> dict[str, Any]:
    """The one envelope of ``envelopes``; each part named in ``lossless`` was saved as it was
    (JSON already: no ``chronicle.lossy_input`` / ``chronicle.lossy_output`` mark)."""
    assert len(envelopes) == 1, [e["name"] for e in envelopes]
    for part in lossless:
        assert f"chronicle.lossy_{part}" not in envelopes[0]["metadata"], part
    return envelopes[0]


def replay_of(session: chronicle.Session, plan: chronicle.ReplayPlan | None = None) -> Any:
    """``chronicle.replay_trace`` of the request ``session`` recorded, with ``plan``."""
    return chronicle.replay_trace(session.trace_id, session.span_id, plan)


def streamed_metadata(envelope: dict[str, Any], chunks: int) -> dict[str, Any]:
    """A saved envelope's metadata, asserting it says a stream of ``chunks`` items was kept."""
    metadata = envelope["metadata"]
    assert metadata["chronicle.streamed"] is True
    assert metadata["chronicle.chunk_count"] == chunks
    assert metadata["chronicle.time_to_first_chunk_ms"] > 0
    assert "chronicle.lossy_output" not in metadata
    return dict(metadata)


def drain(stream: Any, into: list[Any]) -> None:
    """Read ``stream`` into ``into`` until it ends or raises."""
    for item in stream:
        into.append(item)


@pytest.fixture
def recording(control_plane: LocalControlPlane) -> Iterator[Recording]:
    """Chronicle configured to save to the shared control plane, reset after the test."""
    chronicle.configure(control_plane_url=control_plane.url, flush_interval=0.05)
    try:
        yield Recording(control_plane)
    finally:
        chronicle.reset()


@pytest.fixture(autouse=True)
def _isolated_chronicle() -> Iterator[None]:
    """Every test starts and ends with Chronicle unconfigured and no default hooks."""
    chronicle.reset()
    chronicle.default_hooks.clear()
    yield
    chronicle.reset()
    chronicle.default_hooks.clear()
