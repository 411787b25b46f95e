"""How a test module asks pytest-xdist to keep its tests on one worker."""

from __future__ import annotations

import pytest


def one_worker(group: str) -> pytest.MarkDecorator:
    """The ``pytestmark`` of a module one worker runs whole (``make test``: ``--dist
    loadgroup``, every test of ``group`` on the same worker): its module-scoped setup (servers,
    recordings) is made once, not once per worker. ``group`` names the module."""
    return pytest.mark.xdist_group(group)
