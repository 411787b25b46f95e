"""Deprecated: the pytest plugin is ``chronicle.testing.pytest_plugin`` now (kept for one release).

Importing this module warns (``DeprecationWarning``) and hands back the plugin's names
(``from chronicle.replay.pytest_plugin import CONFIG_KEYS`` still works). Loaded as a pytest
plugin by this old path (``-p chronicle.replay.pytest_plugin``, or ``pytest_plugins`` in a
``conftest.py``), it registers the plugin itself unless pytest has it already (the package's
``pytest11`` entry point, ``chronicle``), so the plugin's hooks and fixtures are never registered
twice. Nothing in Chronicle imports this module.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from chronicle.testing import pytest_plugin as _plugin

warnings.warn(
    "chronicle.replay.pytest_plugin moved to chronicle.testing.pytest_plugin; import it from "
    "there (pytest loads it by itself, through the package's entry point); the old path goes "
    "away in the next release",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    """The plugin's names, read through (not copied, so pytest never registers them twice)."""
    return getattr(_plugin, name)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the plugin under its entry point's name (``chronicle``) unless pytest has it
    already, or under its module name when ``-p no:chronicle`` blocks that name."""
    if pluginmanager.is_registered(_plugin):
        return
    blocked = pluginmanager.is_blocked("chronicle")
    pluginmanager.register(_plugin, _plugin.__name__ if blocked else "chronicle")
