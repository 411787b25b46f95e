"""Every example runs end to end, as a user runs it, and prints what its README says.

(``examples/demo.py``, ``make demo``, has tests of its own: ``tests/test_demo.py``.)

Each example is its own process (``python examples/<name>.py``) against the local scripted model
server it starts and the session's real control plane (``CHRONICLE_CONTROL_PLANE_URL``); the
test checks its exit status and the lines that carry its claims: what was recorded, how the
replay crossed each boundary, what the fixed code returned, what the model is now told, that the
strict replay diverged only where the plan expects, and that the replay sent no model request.
A test an example prints is run as printed, with pytest, in a folder of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import chronicle.agent as agent_registry
from chronicle.testing import LocalControlPlane
from tests.support.calls import CHAT, MESSAGES
from tests.support.inline import run_inline
from tests.support.workers import one_worker

pytestmark = one_worker("examples")
pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


_PRINTED: dict[tuple[str, str, tuple[str, ...]], str] = {}
"""What each example printed, by control plane and arguments: one run serves every test that
reads it (the README's lines are checked on the runs the other tests made)."""


def example_output(name: str, control_plane: LocalControlPlane, *args: str) -> str:
    """Run ``examples/<name>`` (once per control plane and arguments); what it printed (the test
    fails with its stderr if it fails)."""
    key = (name, control_plane.url, args)
    if key not in _PRINTED:
        _PRINTED[key] = _run(name, control_plane, *args)
    return _PRINTED[key]


def _run(name: str, control_plane: LocalControlPlane, *args: str) -> str:
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
    return done.stdout


def run_example(name: str, control_plane: LocalControlPlane, *args: str) -> list[str]:
    """Run ``examples/<name>``; its output lines, stripped."""
    return [line.strip() for line in example_output(name, control_plane, *args).splitlines()]


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
FIXED_WEATHER = "get_weather returned {'city': 'Paris', 'temp_c': 21}"
UNCHANGED = "replayed unchanged (strict): 0 divergences"  # values come back as recorded
READS_THE_FIX = "the calls after the tool now read the fixed result: True"
NO_MODEL_REQUEST = "model requests: 2 while recording, 0 during the replays"


def test_frameworks(control_plane: LocalControlPlane) -> None:
    lines = run_example("frameworks.py", control_plane)
    assert lines[0] == "model: local scripted server"
    for framework, calls in FRAMEWORK_RUNS.items():
        model, tool, again = calls
        assert block(lines, framework) == [
            f"recorded: {model}, {tool}, {again}",
            UNCHANGED,
            f"replayed with the fix: {model}:stub, {tool}:run, {again}:stub",
            FIXED_WEATHER,
            f"divergences: 0 unexpected, 1 expected ({again}#2)",  # the model reads the fix
            READS_THE_FIX,
            NO_MODEL_REQUEST,
        ]
    # The tool is the cut-point, so the node that calls it runs; the agent node (the model call)
    # and the router read the new state: declared, and nothing else differs (no message
    # rebuilt differently by the stub, no id compared).
    assert block(lines, "langgraph") == [
        f"recorded: node agent, {CHAT}, route agent.next_step, node tools, get_weather, "
        f"node agent, {CHAT}, route agent.next_step",
        UNCHANGED,
        "replayed with the fix: node agent:stub, route agent.next_step:stub, node tools:run, "
        "get_weather:run, node agent:stub, route agent.next_step:stub",
        FIXED_WEATHER,
        "divergences: 0 unexpected, 2 expected (node agent#2, route agent.next_step#2)",
        READS_THE_FIX,
        NO_MODEL_REQUEST,
    ]
    assert lines[-1] == (
        "every framework recorded, then replayed strictly with the fix as the cut-point and no "
        "unexpected divergence: True"
    )


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
    reason = why_blocked.strip("'")
    assert found[5:] == [
        f'the model\'s second call now reads: {{"blocked": true, "reason": "{reason}"}}',
        f"divergences: 0 unexpected, 1 expected ({CHAT}#2)",
        "moved by the replay: nothing",
        "model requests during the replay: 0",
        "fixed: True",
    ]
    assert lines[-1] == "every incident is fixed: True"


@pytest.fixture(scope="module")
def record_and_replay(
    control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    """One run of ``record_and_replay.py`` that keeps its incident file: what it printed, and
    the folder it saved into."""
    folder = tmp_path_factory.mktemp("committed")
    return example_output("record_and_replay.py", control_plane, "--save-to", str(folder)), folder


def test_record_and_replay(record_and_replay: tuple[str, Path]) -> None:
    lines = [line.strip() for line in record_and_replay[0].splitlines()]
    assert "customers.db still exists: False" in lines  # the incident happened
    assert any(line.startswith("saved 3 envelopes ") for line in lines)
    reason = "/var/data/customers.db is outside /tmp"
    for step in (
        "3. replayed it from the control plane, the gated delete_file as the cut-point",
        "4. replayed it from the saved file (what a committed test does)",
    ):
        found = lines[lines.index(step) + 1 :]
        assert found[:4] == [
            f"call log: {CHAT}:stub, delete_file:run, {CHAT}:stub",
            f"delete_file returned: {{'blocked': True, 'reason': '{reason}'}}",
            f'the model\'s second call now reads: {{"blocked": true, "reason": "{reason}"}}',
            f"divergences: 0 unexpected, 1 expected ({CHAT}#2)",
        ]
        # the recorded answer is shown for what it is, and nothing rests on it
        assert found[4].startswith("the agent's last answer is that call's recording, stale: ")
        assert found[5:7] == [
            "customers.db still exists: True",
            "model requests during the replay: 0",
        ]
    assert "the fix holds: True" in lines


def test_the_test_an_example_prints_passes_as_printed(
    record_and_replay: tuple[str, Path],
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The committed test ``record_and_replay.py`` prints, run verbatim by pytest on the incident
    file that run saved, passes; the same test without its fix fails (it proves something)."""
    output, folder = record_and_replay
    intro, _, shown = output.partition("\nAs a committed test")[2].partition("\n\n")
    where = re.search(r"(\S+/test_\w+\.py), beside (\S+\.json), with examples/ importable", intro)
    assert where is not None, intro
    test_file, incident = Path(where[1]), Path(where[2])
    assert test_file.parent == folder and incident.is_file()
    code = textwrap.dedent(shown)
    fix = '    monkeypatch.setitem(TOOL, "delete_file", delete_file_gated)\n'
    assert code.count(fix) == 1
    test_file.write_text(code, encoding="utf-8")
    (folder / "test_without_the_fix.py").write_text(code.replace(fix, ""), encoding="utf-8")

    # pytest in this process (run_inline), as a new one would start: no CHRONICLE_ settings,
    # examples/ importable, the example's module imported afresh, no tool registered yet
    for key in [k for k in os.environ if k.startswith("CHRONICLE_")]:
        monkeypatch.delenv(key)
    monkeypatch.syspath_prepend(str(EXAMPLES))  # "with examples/ importable"
    monkeypatch.delitem(sys.modules, "record_and_replay", raising=False)
    monkeypatch.setattr(agent_registry, "_tools", {})
    monkeypatch.chdir(folder)  # where the user runs it
    done = run_inline(pytester, "-q", "--rootdir", ".", test_file.name, "test_without_the_fix.py")
    summary = done.outlines
    assert summary[-1].startswith("1 failed, 1 passed"), "\n".join(summary)
    failed = "FAILED test_without_the_fix.py::test_the_gate_blocks_the_delete"
    assert any(line.startswith(failed) for line in summary), "\n".join(summary)
    # it failed on what the fix is about: the database was deleted
    assert "assert '/var/data/customers.db' in {'/tmp/cache.bin'" in done.stdout.str()


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
    reason = "980000000 cents is over the cap"
    assert replay[:6] == [
        f"call log: {MESSAGES}:stub, issue_refund:run, {MESSAGES}:stub",
        f"issue_refund returned: {{'blocked': True, 'reason': '{reason}'}}",
        f'the billing model\'s second call now reads: {{"blocked": true, "reason": "{reason}"}}',
        f"divergences: 0 unexpected, 1 expected ({MESSAGES}#2)",
        "refunded by the replay: []",
        "model requests during the replay: 0",
    ]
    across = lines[
        lines.index("3. replayed the incident across both services, from the support agent's side")
        + 1 :
    ]
    chat, support, billing = "openai.chat.completions.create", "support-agent", "billing-agent"
    assert across[:4] == [
        f"call log: {support}:{chat}:stub, {support}:ask_billing:run, "
        f"{support}:http POST 127.0.0.1:run, {billing}:{MESSAGES}:stub, "
        f"{billing}:issue_refund:run, {billing}:{MESSAGES}:stub, {support}:{chat}:stub",
        f"divergences: 0 unexpected, 1 expected ({MESSAGES}#2)",
        "refunded by the replay: []",
        "model requests during the replay: 0",
    ]
    assert lines[-1] == "one trace across two services, and the fix holds: True"


# ---- examples/README.md lists what each example prints -----------------------------------------


def readme_lines() -> dict[str, list[str]]:
    """The lines examples/README.md says each example prints: its bullets ``- `name.py`...``,
    each backticked text after the name one line (``…`` standing for what varies)."""
    text = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    section = text.split("The lines to look for", 1)[1].split("\n\n", 2)[1]
    listed: dict[str, list[str]] = {}
    for bullet in re.split(r"\n(?=- )", section):
        joined = re.sub(r"\n\s*", " ", bullet)
        name, *lines = re.findall(r"`([^`]+)`", joined)
        listed[name] = lines
    return listed


def printed(line: str, output: str) -> bool:
    """Whether ``output`` has a line that is ``line``, each ``…`` standing for any text."""
    pattern = re.compile(".*".join(re.escape(part) for part in line.split("…")))
    return any(pattern.fullmatch(shown.strip()) for shown in output.splitlines())


def test_the_readme_lists_the_lines_each_example_prints(
    control_plane: LocalControlPlane, record_and_replay: tuple[str, Path]
) -> None:
    listed = readme_lines()
    assert sorted(listed) == [
        "frameworks.py",
        "incidents.py",
        "multi_agent.py",
        "record_and_replay.py",
    ]
    for name, lines in listed.items():
        assert len(lines) >= 5, (name, lines)
        output = (
            record_and_replay[0]
            if name == "record_and_replay.py"
            else example_output(name, control_plane)
        )
        missing = [line for line in lines if not printed(line, output)]
        assert missing == [], (
            f"examples/README.md says {name} prints {missing}; it printed:\n{output}"
        )
    assert not printed("recorded: …", record_and_replay[0])  # it says what it saved instead
    assert not printed("replayed: …", example_output("multi_agent.py", control_plane))


def test_a_readme_line_is_matched_whole() -> None:
    assert printed(
        "divergences: 0 unexpected, 1 expected (…)",
        "  divergences: 0 unexpected, 1 expected (x#2)\n",
    )
    assert not printed(
        "divergences: 0 unexpected, 1 expected (…)", "divergences: 1 unexpected, 1 expected (x#2)"
    )
    assert not printed("fixed: True", "  fixed: True, or not")
