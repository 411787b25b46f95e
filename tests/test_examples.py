"""Every example runs end to end, as a user runs it, and prints what its README says.

(``examples/demo.py``, ``make demo``, has tests of its own: ``tests/test_demo.py``.)

Each example is its own process (``python examples/<name>.py``) against the local scripted model
server it starts and the session's real control plane (``CHRONICLE_CONTROL_PLANE_URL``); the
test checks its exit status and the lines that carry its claims: what was recorded, how the
replay crossed each boundary, what the fixed code returned, and that the replay sent no model
request.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chronicle.testing import LocalControlPlane

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CHAT = "openai.chat.completions.create"
MESSAGES = "anthropic.messages.create"


def run_example(name: str, control_plane: LocalControlPlane, *args: str) -> list[str]:
    """Run ``examples/<name>``; its output lines (the test fails with its stderr if it fails)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CHRONICLE_")}
    env["CHRONICLE_CONTROL_PLANE_URL"] = control_plane.url
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return [line.strip() for line in done.stdout.splitlines()]


def block(lines: list[str], title: str) -> list[str]:
    """The lines after the one that is exactly ``title``, up to the next blank line."""
    start = lines.index(title) + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


FRAMEWORK_RUNS = {
    "openai-sdk": [CHAT, "get_weather", CHAT],
    "anthropic-sdk": [MESSAGES, "get_weather", MESSAGES],
    "langchain": [CHAT, "get_weather", CHAT],
    "openai-agents": [CHAT, "get_weather", CHAT],
    "pydantic-ai": [CHAT, "get_weather", CHAT],
    "wrap_llm": ["llm.chat", "get_weather", "llm.chat"],
}


def test_frameworks(control_plane: LocalControlPlane) -> None:
    lines = run_example("frameworks.py", control_plane)
    assert lines[0] == "model: local scripted server"
    for framework, calls in FRAMEWORK_RUNS.items():
        model, tool, again = calls
        assert block(lines, framework) == [
            f"recorded:  {model}, {tool}, {again}",
            f"replayed:  {model}:stub, {tool}:run, {again}:stub",
            "get_weather in the replay returned {'city': 'Paris', 'temp_c': 21}",
            "model requests: 2 while recording, 0 during the replay",
        ]
    graph = block(lines, "langgraph")
    assert graph[0] == (
        f"recorded:  node agent, {CHAT}, route agent.next_step, node tools, get_weather, "
        f"node agent, {CHAT}, route agent.next_step"
    )
    assert graph[1] == (
        "replayed:  node agent:stub, route agent.next_step:stub, node tools:run, get_weather:run, "
        "node agent:stub, route agent.next_step:stub"
    )
    assert graph[3] == "model requests: 2 while recording, 0 during the replay"
    assert lines[-1] == "every framework recorded and replayed with the fix as the cut-point: True"


@pytest.mark.parametrize(
    ("incident", "tool", "what_ran", "why_blocked"),
    [
        (
            "refund",
            "issue_refund",
            "refunded $9,800,000.00 on ORD-9800000",
            "'$9,800,000.00 is over the $500.00 cap'",
        ),
        (
            "invoice",
            "send_invoice",
            "invoiced Muller GmbH 2,000,000.00 USD",
            "'Muller GmbH is billed in EUR, not USD'",
        ),
        (
            "trade",
            "place_order",
            "sell 1000 ACME ($190,000.00)",
            "'$190,000.00 notional is over the $10,000.00 cap'",
        ),
    ],
)
def test_incidents(
    control_plane: LocalControlPlane, incident: str, tool: str, what_ran: str, why_blocked: str
) -> None:
    lines = run_example("incidents.py", control_plane, incident)
    title = next(line for line in lines if line.startswith(f"{incident}: "))
    found = block(lines, title)
    assert found[0] == f"recorded:  {CHAT}, {tool}, {CHAT}"
    assert found[1] == f"the ungated tool: {what_ran}"
    assert found[3] == f"replayed:  {CHAT}:stub, {tool}:run, {CHAT}:stub"
    assert found[4].endswith(f"{{'blocked': True, 'reason': {why_blocked}}}")
    assert found[5:] == ["model requests during the replay: 0", "fixed: True"]
    assert lines[-1] == "every incident is fixed: True"


def test_record_and_replay(control_plane: LocalControlPlane) -> None:
    lines = run_example("record_and_replay.py", control_plane)
    assert "customers.db still exists: False" in lines  # the incident happened
    assert any(line.startswith("saved 3 envelope(s) ") for line in lines)
    reason = "'/var/data/customers.db is outside /tmp'"
    blocked = f"delete_file returned: {{'blocked': True, 'reason': {reason}}}"
    for step in (
        "3. replayed it from the control plane, the gated delete_file as the cut-point",
        "4. replayed it from the saved file (what a committed test does)",
    ):
        found = lines[lines.index(step) + 1 :]
        assert found[0] == f"call log: {CHAT}:stub, delete_file:run, {CHAT}:stub"
        assert found[1] == blocked
        assert found[3] == "model requests during the replay: 0"
    assert "the fix holds: True" in lines


def test_multi_agent(control_plane: LocalControlPlane) -> None:
    lines = run_example("multi_agent.py", control_plane)
    assert (
        "one trace, services ['billing-agent', 'support-agent']; "
        "billing parented on the HTTP call: True"
    ) in lines
    assert "refunded: [980000000]" in lines  # the incident happened
    replay = lines[
        lines.index("2. replayed the billing span alone, the gated issue_refund as the cut-point")
        + 1 :
    ]
    assert replay[0] == f"call log: {MESSAGES}:stub, issue_refund:run, {MESSAGES}:stub"
    assert replay[1] == (
        "issue_refund returned: {'blocked': True, 'reason': '980000000 cents is over the cap'}"
    )
    assert replay[2] == "model requests during the replay: 0"
    assert lines[-1] == "one trace across two services, and the fix holds: True"
