"""Tests against the real provider APIs: never in CI, never by default.

They run only when ``CHRONICLE_LIVE=1`` is set *and* the provider's key is in the environment
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``); otherwise each is skipped with the reason saying
what to set. They cost money (a few tokens each) and need the internet: run them before a
release, or when a provider changes its wire format::

    CHRONICLE_LIVE=1 OPENAI_API_KEY=... ANTHROPIC_API_KEY=... .venv/bin/python -m pytest tests/live

Each records one real call to the real control plane (a local one), then replays the recording
with the network blocked: what the provider's SDK returned live must come back from the
recording as the same SDK type and the same text.
"""

from __future__ import annotations

import os

import pytest

LIVE = os.environ.get("CHRONICLE_LIVE") == "1"


def live_key(variable: str) -> str:
    """The provider's key, or skip saying what to set."""
    if not LIVE:
        pytest.skip(f"a live provider test: set CHRONICLE_LIVE=1 and {variable} to run it")
    key = os.environ.get(variable)
    if not key:
        pytest.skip(f"CHRONICLE_LIVE=1 but {variable} is not set")
    return key


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.live)
