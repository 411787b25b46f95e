"""Shared fixtures. Nothing here needs the internet: every server runs on 127.0.0.1.

Sections:

1. Local servers: the real control plane (``LocalControlPlane``) and a scripted model server
   speaking the OpenAI and Anthropic wire formats (``LlmServer``).
2. Chronicle: configuration and reset between tests.
"""

from __future__ import annotations

import os

# The dev environment has logfire installed, which registers a pydantic plugin: pydantic imports
# logfire (about 0.3 s of CPU) the first time any model class is built, in every process (each
# control plane, CLI child and nested pytest the suite starts). No test here uses that plugin.
# Set before anything builds a model, and inherited by every process the tests start.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from collections.abc import Iterator
from typing import TYPE_CHECKING

import openai
import pytest

import chronicle
from chronicle.testing import LocalControlPlane
from tests.support.child import ONLY_OUR_PLUGINS
from tests.support.llm_server import LlmServer

if TYPE_CHECKING:
    import anthropic  # not in the framework environments (make test-frameworks)

pytest_plugins = ["tests.support.recording", "tests.support.leftovers"]
"""The ``recording`` fixture (and Chronicle's reset around every test); the check, after each
module, of what it left unclosed (named in the run's summary)."""

# LiteLLM fetches its model price list from the internet when imported, unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The openai SDK imports its HTTP core the first time a client is built. Built first inside a
# pytester test, that import is undone by pytester's sys.modules restore at the test's end, while
# the HTTP client keeps its cached map of the first copy's exception classes: a later test's
# connection error then escapes unmapped. Build one client now so the import happens once.
openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1").close()

# ---- 1. local servers --------------------------------------------------------------------


@pytest.fixture(scope="session")
def control_plane() -> Iterator[LocalControlPlane]:
    """One real control plane for the whole session (shared: filter reads by your own ids).

    Do not stop it; use ``fresh_control_plane`` for a test that stops or restarts the server
    or needs an empty database.
    """
    with LocalControlPlane() as server:
        yield server


@pytest.fixture
def fresh_control_plane() -> Iterator[LocalControlPlane]:
    """A control plane of this test's own, with an empty database; the test may stop/start it."""
    with LocalControlPlane() as server:
        yield server


@pytest.fixture
def llm_server() -> Iterator[LlmServer]:
    """A started ``LlmServer`` with nothing queued and no requests recorded."""
    with LlmServer() as server:
        yield server


@pytest.fixture
def oai(llm_server: LlmServer) -> Iterator[openai.OpenAI]:
    """A real ``openai.OpenAI`` client against ``llm_server``, wrapped by Chronicle."""
    client = openai.OpenAI(base_url=llm_server.openai_base_url, api_key="test", max_retries=0)
    with client:
        yield chronicle.wrap(client)


@pytest.fixture
def claude(llm_server: LlmServer) -> Iterator[anthropic.Anthropic]:
    """A real ``anthropic.Anthropic`` client against ``llm_server``, wrapped by Chronicle."""
    import anthropic

    client = anthropic.Anthropic(
        base_url=llm_server.anthropic_base_url, api_key="test", max_retries=0
    )
    with client:
        yield chronicle.wrap(client)


# ---- pytest in a subprocess ---------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "plugin_autoload: a pytest this test starts loads plugins by entry point"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Make ``--dist loadgroup`` (``make test``) group again on pytest 9.2: an xdist worker
    marks a test of an ``xdist_group`` by writing ``item._nodeid`` (``...@group``), which pytest
    9.2 no longer reads (its node ids are structured, ``item._id``), so every group was silently
    spread over the workers (pytest-xdist issue 1386). Carry that id into ``item._id``, as the
    proposed fix does; a no-op where xdist's write took effect or nothing was written."""
    from _pytest.nodeid import NodeId  # (only the pytest versions that need this have it)

    for item in items:
        written = item.__dict__.get("_nodeid")
        if isinstance(written, str) and written != item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(written)


@pytest.fixture(autouse=True)
def _quick_pytest_subprocesses(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test using ``pytester``: its pytest runs load ``PYTEST_PLUGINS`` only
    (tests/support/child.py). A test about how the plugin is loaded (entry points,
    ``-p no:chronicle``) is marked ``plugin_autoload`` and gets the entry points as a user's
    pytest does."""
    if "pytester" not in request.fixturenames or request.node.get_closest_marker("plugin_autoload"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ONLY_OUR_PLUGINS.items():
            patch.setenv(name, value)
        yield


# ---- 2. chronicle ------------------------------------------------------------------------
