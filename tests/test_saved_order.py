"""A saved incident file replays the values the code returned, in the order it returned them.

The agent: an ``orchestrator`` asks a ``researcher`` sub-agent (which plans with a model call and
searches with a ``web_search`` tool) and returns a dict built as ``task, plan, found``; the
orchestrator's next prompt is ``json.dumps`` of that dict. A file that sorted the dict's keys
would serve ``found, plan, task`` back, and the prompt built from it would no longer be the one
recorded: the strict replay of unchanged code would fail from the file while it passes from the
control plane.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import chronicle
from chronicle.cli import main
from chronicle.save.incident import Incident
from tests.support.llm_server import LlmServer, chat_text

pytest_plugins = ["pytester"]

WRITER = "openai.chat.completions.create"


class Orchestrator:
    """The orchestrator, its researcher and the researcher's search; the model at ``base_url``."""

    def __init__(self, base_url: str) -> None:
        self.client = chronicle.wrap(
            openai.OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
        )
        self.prompts: list[str] = []

        @chronicle.boundary("web_search", kind="tool")
        def web_search(query: str) -> dict[str, Any]:
            return {"hits": [f"{query} (1)", f"{query} (2)"], "source": "index"}

        @chronicle.boundary("researcher", kind="tool")
        def researcher(task: str) -> dict[str, Any]:
            plan = self.ask(f"Plan a search for: {task}")
            found = web_search(plan)
            return {"task": task, "plan": plan, "found": found}

        self.researcher = researcher

    def ask(self, prompt: str) -> str:
        self.prompts.append(prompt)
        answer = self.client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
        )
        return answer.choices[0].message.content or ""

    def run(self, task: str) -> str:
        result = self.researcher(task)
        return self.ask(json.dumps(result))


@pytest.fixture
def saved(
    recording: Any, llm_server: LlmServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """The orchestrator's run recorded and saved with ``chronicle save``: ``(agent, session,
    path)``; the model answers nothing more, so any live model call fails."""
    monkeypatch.setenv("CHRONICLE_CONTROL_PLANE_URL", recording.control_plane.url)
    agent = Orchestrator(llm_server.openai_base_url)
    llm_server.reply_with(chat_text("refund policy 2024"), chat_text("Refunds take 5 days."))
    with chronicle.record("research") as session:
        assert agent.run("refunds") == "Refunds take 5 days."
    recording.saved(session.trace_id, 4)
    path = tmp_path / "research.json"
    assert main(["save", session.trace_id, "-o", str(path)]) == 0
    requests = llm_server.request_count
    agent.prompts.clear()
    try:
        yield agent, session, path
    finally:
        agent.client.close()
    assert llm_server.request_count == requests, "a replay called the model"


RECORDED_PROMPT = json.dumps(
    {
        "task": "refunds",
        "plan": "refund policy 2024",
        "found": {
            "hits": ["refund policy 2024 (1)", "refund policy 2024 (2)"],
            "source": "index",
        },
    }
)


def test_the_file_keeps_the_order_the_code_returned(saved):
    _, _, path = saved
    researcher = next(e for e in Incident.read(path).envelopes if e.name == "researcher")
    assert researcher.output is not None
    raw = researcher.output.raw
    assert isinstance(raw, dict)
    assert list(raw) == ["task", "plan", "found"]
    assert isinstance(raw["found"], dict)
    assert list(raw["found"]) == ["hits", "source"]
    # The envelope's own keys stay in a fixed order, for review.
    text = path.read_text(encoding="utf-8")
    envelope = json.loads(text)["envelopes"][0]
    assert list(envelope) == sorted(envelope)


def test_a_file_replays_what_the_control_plane_replays(saved):
    agent, session, path = saved
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as from_plane:
        assert agent.run("refunds") == "Refunds take 5 days."
    assert from_plane.divergences() == []
    plane_prompts = list(agent.prompts)
    agent.prompts.clear()
    with chronicle.replay(path, strict=True) as from_file:
        assert agent.run("refunds") == "Refunds take 5 days."
    assert from_file.divergences() == []
    assert agent.prompts == plane_prompts == [RECORDED_PROMPT]
    calls = [(c.name, c.invocation_index, c.mode) for c in from_file.call_log()]
    assert calls == [("researcher", 1, "stub"), (WRITER, 2, "stub")]
    # Saved again from the file, it is the same file: nothing reorders on the way.
    Incident.read(path).write(path.with_name("again.json"))
    assert path.with_name("again.json").read_text(encoding="utf-8") == path.read_text("utf-8")


MARKER_TEST = """
import pytest

from tests.test_saved_order import RECORDED_PROMPT, Orchestrator


@pytest.mark.chronicle_replay("research.json")
def test_unchanged_nested_code_replays_strictly_from_the_file(chronicle_run):
    agent = Orchestrator("http://127.0.0.1:9/v1")
    assert agent.run("refunds") == "Refunds take 5 days."
    assert agent.prompts == [RECORDED_PROMPT]
    assert chronicle_run.divergences() == []
"""


def test_the_strict_marker_passes_on_unchanged_nested_code(saved, pytester, monkeypatch):
    _, _, path = saved
    (pytester.path / "research.json").write_text(path.read_text("utf-8"), encoding="utf-8")
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(test_research=MARKER_TEST)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent.parent))
    # A pytest of its own: the test file imports this module afresh (tests.test_saved_order),
    # a second copy whose clients must not outlive the run in this process.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1)
