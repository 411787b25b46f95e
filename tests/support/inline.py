"""A pytest run in the test's own process, on a ``pytester`` folder.

``pytester.runpytest_inprocess`` runs a new pytest session (a configuration, plugins and
collection of its own) without the second or two of CPU a new interpreter's start and imports
cost. It imports the folder's test files by their base names, as a user's pytest does; this
suite's own modules are imported the same way (``test_replay``, ``test_config``, examples'
``test_incident``), so a folder's file of the same name would be taken for the module already
imported. ``run_inline`` sets those aside for the run and puts them back after it.
"""

from __future__ import annotations

import sys

import pytest


def run_inline(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """``pytest -p no:cacheprovider ARGS`` on ``pytester.path``, in this process."""
    names = {path.stem for path in pytester.path.rglob("*.py")}
    shadowed = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    try:
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    finally:
        sys.modules.update(shadowed)
