"""Every ``python`` example of README.md and docs/ runs, so a renamed argument breaks a test.

Each fenced ``python`` block is one test item, named ``<page>:<line>``. How a block runs:

- A block that is, word for word, part of a file ``make test`` runs (``examples/test_incident.py``)
  is counted as run there: the test checks that it still is.
- The blocks of ``docs/frameworks/*.md`` are run by ``tests/frameworks/`` (one each, which
  ``tests/frameworks/test_pages.py`` enforces); they are counted, not run twice.
- A block whose first line is a file name comment (``# conftest.py``, ``# tests/test_x.py``) is
  that file: the page's file blocks are written under a fresh folder and run with pytest there,
  once recording (``--chronicle-record-mode once``) and once replaying what was recorded; an
  incident path a comment names must exist after the first run.
- Every other block is a script, run as ``__main__`` with the worker's control plane in place of
  the documented ``http://127.0.0.1:8800`` and a scripted model server
  (``tests/support/llm_server.py``) behind every model SDK's environment (``OPENAI_BASE_URL``,
  ``ANTHROPIC_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``, ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, dummy
  keys). It runs in the worker itself, unless it changes the process for good
  (``PROCESS_WIDE``: a global tracer provider, a patched module) or needs a setup: then in a
  subprocess; a change ``PUT_BACK`` names (``chronicle.wrap(litellm)``) is undone after it
  instead. It passes when it ends without an error and prints what the page says: the
  ```` ```text ```` block right after it, whole, and each ``prints `...` `` of the paragraph
  after it.

A first line ``# docs: needs NAME`` asks for one of ``NEEDS`` (files or services the block uses
that the page describes but does not show); no block is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import chronicle
import chronicle.agent as agent_module
from chronicle.testing import LocalControlPlane
from tests.support.child import ONLY_OUR_PLUGINS
from tests.support.llm_server import LlmServer

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTED_CONTROL_PLANE = "http://127.0.0.1:8800"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FILE_COMMENT = re.compile(r"# ((?:[\w.-]+/)*(?:conftest|test_\w+)\.py)\n")
NEEDS_COMMENT = re.compile(r"# docs: needs ([\w-]+)")
OUTPUT = re.compile(r"\n*```text\n(.*?)^```", re.S | re.M)
# Files `make test` runs whose text a page may show in part.
RUN_BY_THE_SUITE = [ROOT / "examples" / "test_incident.py"]
FRAMEWORK_PAGES = ROOT / "docs" / "frameworks"
TIMEOUT = 120
# What a block does that changes the process for good (a global provider set, a module or a
# library patched): such a block runs in a process of its own; every other block runs in the
# worker, where its SDKs are imported already (a subprocess costs 1.5 to 4 s of imports).
PROCESS_WIDE = (
    "instrument_httpx(",
    "register(",
    "logfire.configure(",
    "Langfuse(",
    "set_tracer_provider(",
)


@dataclass(frozen=True)
class Block:
    """One fenced python block: where it is, what it says, and what the page says it prints."""

    page: Path
    line: int
    code: str
    prints: tuple[str, ...]  # "It prints `...`" after it: each a part of its output
    output: str | None  # a ```text block right after it: its whole output

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """The file the block says it is (its first-line comment), else None."""
        match = FILE_COMMENT.match(self.code)
        return match.group(1) if match else None

    @property
    def needs(self) -> str | None:
        match = NEEDS_COMMENT.match(self.code)
        return match.group(1) if match else None


def pages() -> list[Path]:
    """README.md and every page of the site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        after = text[match.end() :]
        paragraph = after.lstrip("\n").split("\n\n", 1)[0]
        prints = tuple(re.findall(r"prints `([^`]+)`", paragraph)) if "prints" in paragraph else ()
        output = OUTPUT.match(after)
        found.append(
            Block(
                page,
                text.count("\n", 0, match.start()) + 1,
                match.group(1),
                prints,
                output.group(1) if output else None,
            )
        )
    return found


ALL = [block for page in pages() for block in blocks(page)]
LOCAL = [b for b in ALL if b.page.parent != FRAMEWORK_PAGES]
SCRIPTS = [b for b in LOCAL if b.file_name is None]
# A page's file blocks (a conftest.py and the tests it configures) run together: one item each.
FILE_PAGES = sorted({b.page for b in LOCAL if b.file_name is not None})


def _shown_from_the_suite(block: Block) -> Path | None:
    for path in RUN_BY_THE_SUITE:
        if block.code in path.read_text(encoding="utf-8"):
            return path
    return None


# ---- what a block may need -----------------------------------------------------------------


@dataclass
class Setup:
    """What a need adds to a block's run: lines before it, text replaced in it, environment."""

    prelude: str = ""
    replace: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def _incident(folder: Path, control_plane: LocalControlPlane) -> Iterator[Setup]:
    """The demo's incident file (examples/incidents/delete-db.json) in the block's folder;
    examples/ is on every block's ``sys.path`` (its ``support_agent``)."""
    (folder / "incidents").mkdir()
    source = ROOT / "examples" / "incidents" / "delete-db.json"
    (folder / "incidents" / "delete-db.json").write_bytes(source.read_bytes())
    yield Setup()


@contextlib.contextmanager
def _billing(folder: Path, control_plane: LocalControlPlane) -> Iterator[Setup]:
    """The cross-service incident recorded (tests/test_cross_service_replay.py's two services:
    support here, the buggy billing in its process), then billing with the fix accepting replays
    in place of the documented ``127.0.0.1:8801``; the block gets the recording's ids, support's
    handler and the shared token."""
    from tests import test_cross_service_replay as services

    incident = services.record_incident(control_plane, folder / "recorded-ledger.txt")
    with services.fixed_billing(control_plane, folder) as billing:
        yield Setup(
            prelude=(
                "from tests.test_cross_service_replay import support\n"
                f"TRACE_ID, SUPPORT_SPAN_ID = {incident.trace_id!r}, {incident.support_span!r}\n"
            ),
            replace={"127.0.0.1:8801": billing.url.removeprefix("http://")},
            env={"REPLAY_TOKEN": services.TOKEN},
        )
        assert billing.charges() == [], "the fixed billing charged during the replay"


NEEDS = {"incident": _incident, "billing": _billing}


def _setup(block: Block, folder: Path, control_plane: LocalControlPlane) -> Any:
    if block.needs is None:
        return contextlib.nullcontext(Setup())
    assert block.needs in NEEDS, f"{block.id}: '# docs: needs {block.needs}': use one of {NEEDS}"
    return NEEDS[block.needs](folder, control_plane)


@contextlib.contextmanager
def _litellm_put_back(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A block wrapping the ``litellm`` module runs in the worker of tests/test_litellm.py (its
    ``xdist_group``: LiteLLM imported once, about 4 s of CPU) with what that module does around
    each test: the module's functions put back after it, an event loop of its own (for LiteLLM's
    sync logging), the SDK clients LiteLLM keeps closed, the httpx logger's level as it was."""
    import litellm

    from tests import test_litellm

    level = logging.getLogger("httpx").level
    monkeypatch.setattr(test_litellm, "litellm", litellm)  # what its release function reads
    for name in ("completion", "acompletion"):
        monkeypatch.setattr(litellm, name, getattr(litellm, name))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        loop.run_until_complete(test_litellm.release_litellm_clients())
        asyncio.set_event_loop(None)
        loop.close()
        logging.getLogger("httpx").setLevel(level)


PUT_BACK = {"chronicle.wrap(litellm)": (_litellm_put_back, "litellm")}
"""What a block changes for good that is put back after it (not ``PROCESS_WIDE``, then), and the
``xdist_group`` whose worker runs such a block."""


def _script(block: Block) -> Any:
    """A block as a test parameter, in the ``xdist_group`` of what it changes (``PUT_BACK``)."""
    groups = [group for change, (_, group) in PUT_BACK.items() if change in block.code]
    return pytest.param(block, id=block.id, marks=[pytest.mark.xdist_group(g) for g in groups])


# ---- servers, one each per worker ----------------------------------------------------------


@pytest.fixture(scope="module")
def model_server() -> Iterator[LlmServer]:
    with LlmServer() as server:
        yield server


def _environment(control_plane: LocalControlPlane, server: LlmServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "OTEL_"))}
    env.update(
        CHRONICLE_CONTROL_PLANE_URL=control_plane.url,
        PYTHONPATH=os.pathsep.join([str(ROOT / "examples"), str(ROOT)]),
        OPENAI_BASE_URL=server.openai_base_url,
        OPENAI_API_KEY="sk-docs-example",
        ANTHROPIC_BASE_URL=server.anthropic_base_url,
        ANTHROPIC_API_KEY="sk-ant-docs-example",
        GOOGLE_GEMINI_BASE_URL=server.gemini_base_url,
        GEMINI_API_KEY="docs-example",
        AWS_ENDPOINT_URL_BEDROCK_RUNTIME=server.bedrock_endpoint_url,
        AWS_ACCESS_KEY_ID="docs-example",
        AWS_SECRET_ACCESS_KEY="docs-example",
        AWS_DEFAULT_REGION="us-east-1",
        LANGFUSE_PUBLIC_KEY="pk-lf-docs-example",
        LANGFUSE_SECRET_KEY="sk-lf-docs-example",
        LANGFUSE_BASE_URL=server.url,
        LOGFIRE_SEND_TO_LOGFIRE="false",
        PHOENIX_COLLECTOR_ENDPOINT=server.url,
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # LiteLLM fetches its price list otherwise
        NO_COLOR="1",
    )
    return env


def _run(command: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def _failed(what: str, result: subprocess.CompletedProcess[str]) -> str:
    return f"{what} failed (exit status {result.returncode}):\n{result.stdout}\n{result.stderr}"


def _own_process(block: Block) -> bool:
    """Whether the block must run in a process of its own: it needs a setup, or changes the
    process for good (see ``PROCESS_WIDE``)."""
    return block.needs is not None or any(change in block.code for change in PROCESS_WIDE)


def _close_clients(namespace: dict[str, Any]) -> None:
    """Close the model clients a block run in this worker left in its globals (``client =
    chronicle.wrap(OpenAI())``), as its exit would drop them had it run as a script: left
    open, their sockets are the module's leftovers (``tests/support/leftovers.py``)."""
    for value in namespace.values():
        if isinstance(value, openai.OpenAI | anthropic.Anthropic):
            value.close()


@pytest.mark.parametrize("block", [_script(b) for b in SCRIPTS])
def test_the_example_runs(
    block: Block,
    tmp_path: Path,
    control_plane: LocalControlPlane,
    model_server: LlmServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The block runs as a script and prints what the page says it prints."""
    if _shown_from_the_suite(block) is not None:
        return  # `make test` runs it as part of that file
    env = _environment(control_plane, model_server)
    code = block.code.replace(DOCUMENTED_CONTROL_PLANE, control_plane.url)
    if _own_process(block):
        with _setup(block, tmp_path, control_plane) as setup:
            for documented, actual in setup.replace.items():
                code = code.replace(documented, actual)
            script = tmp_path / "example.py"
            script.write_text(setup.prelude + code)
            result = _run([sys.executable, str(script)], tmp_path, {**env, **setup.env})
        assert result.returncode == 0, _failed(block.id, result)
        output = result.stdout
    else:
        # In this worker, as __main__: its SDKs are imported already. Chronicle is reset after
        # it (the suite's autouse fixture); the environment, the folder and the registry of
        # tool boundaries (which a profile with tools=None lists) are put back.
        for key in [k for k in os.environ if k.startswith(("CHRONICLE_", "OTEL_"))]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(agent_module, "_tools", {})  # its tools, not the next test's
        with contextlib.ExitStack() as put_back:
            for change, (context, _) in PUT_BACK.items():
                if change in code:
                    put_back.enter_context(context(monkeypatch))
            namespace: dict[str, Any] = {"__name__": "__main__"}
            exec(compile(code, f"<{block.id}>", "exec"), namespace)
            chronicle.flush(10)
            _close_clients(namespace)
        output = capsys.readouterr().out
    for shown in block.prints:
        assert shown in output, (
            f"{block.id}: the page says it prints {shown!r}; it printed {output}"
        )
    if block.output is not None:
        assert output == block.output, f"{block.id}: the page shows another output: {output}"


@pytest.mark.parametrize("page", FILE_PAGES, ids=[str(p.relative_to(ROOT)) for p in FILE_PAGES])
def test_the_files_a_page_shows_run_with_pytest(
    page: Path, tmp_path: Path, control_plane: LocalControlPlane, model_server: LlmServer
) -> None:
    """The page's file blocks, written where their first lines say, pass under pytest: once
    recording (``--chronicle-record-mode once``: a marked test's missing incident file is
    written, where its comment says), then replaying from what was written."""
    files = [b for b in blocks(page) if b.file_name is not None]
    for block in files:
        target = tmp_path / str(block.file_name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.code.replace(DOCUMENTED_CONTROL_PLANE, control_plane.url))
    # Chronicle's plugin and pytest-xdist's, which the files use, and none of the other plugins
    # the environment has (most of a second of CPU per start: tests/support/child.py)
    env = {**_environment(control_plane, model_server), **ONLY_OUR_PLUGINS}
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
    pytest_command += ["--rootdir", str(tmp_path), str(tmp_path)]
    recorded = _run([*pytest_command, "--chronicle-record-mode", "once"], tmp_path, env)
    assert recorded.returncode == 0, _failed(f"{page.name}'s files, recording", recorded)
    for block in files:
        for path in re.findall(r"# ((?:[\w.-]+/)+[\w.-]+\.json)", block.code):
            assert (tmp_path / path).is_file(), f"{block.id}: no incident file at {path}"
    replayed = _run(pytest_command, tmp_path, env)
    assert replayed.returncode == 0, _failed(f"{page.name}'s files, replaying", replayed)


def test_the_framework_pages_are_run_by_their_tests() -> None:
    """Each framework page's one example is exec'd by tests/frameworks/ (counted there)."""
    framework_blocks = [b for b in ALL if b.page.parent == FRAMEWORK_PAGES]
    sources = "\n".join(p.read_text() for p in (ROOT / "tests" / "frameworks").glob("test_*.py"))
    assert framework_blocks, "no framework page has an example"
    for block in framework_blocks:
        assert f'"{block.page.name}"' in sources, f"no test in tests/frameworks runs {block.id}"


def test_every_page_is_read() -> None:
    """The collection sees README.md and the site's pages, and finds examples in them."""
    assert len(ALL) >= 30, [b.id for b in ALL]


def test_the_readmes_links_lead_to_files_that_exist() -> None:
    """The front page links into docs/ (mkdocs --strict checks the links between pages; nothing
    checks the README's but this)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(((?!https?://)[^)#]+)(?:#[^)]*)?\)", readme)
    assert targets, "the README links nowhere"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"
