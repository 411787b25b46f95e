"""End-to-end suites: several services or processes, agent frameworks, the examples as users run
them, the tools users run beside Chronicle, the soak test.

Every test under ``tests/e2e`` carries the ``e2e`` marker, so ``pytest -m "not e2e"`` runs the
quick suites alone while iterating; ``make test`` (and CI) runs everything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
