"""The smaller breaks of the fix workflow (issue 39, item 7), each as a new user meets it.

- ``chronicle evaluate TRACE --profile module:PROFILE`` with a profile that derives its tools
  (``tools=None``) from a module that does not import them: the trace is checked against the
  tools its recorded profile lists, and the output says so.
- The README's Quickstart run right after ``chronicle serve ... &``: its first ``record()`` finds
  nothing listening yet, and the script still records, flushes and replays once the control
  plane answers.
- A recorded what-if (``chronicle replay TRACE --record``) whose entry raised: listed by
  ``traces --replays-of`` as failed, under the service whose span it replays.
- ``chronicle show`` never cuts a call's name: each name it prints (``#n`` included) is one
  ``--envelope`` takes.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import chronicle
from chronicle import cli
from chronicle.testing import LocalControlPlane
from tests.support.cli import run_cli
from tests.support.llm_server import LlmServer, chat_text

ROOT = Path(__file__).resolve().parent.parent


def python(args: list[str], cwd: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    """Run ``python args`` in ``cwd`` with Chronicle's settings only from ``environ``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(ROOT)])
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**env, **environ},
    )


# ---- evaluate --profile module:PROFILE ----------------------------------------------------------

PROFILE_MODULE = """
import chronicle

PROFILE = chronicle.AgentProfile(
    "Weather Agent", "Answer weather questions", model="gpt-4o"
)  # tools=None: the @boundary tools the agent's process registers
"""

AGENT_MODULE = """
import sys

import chronicle
from weather_profile import PROFILE


@chronicle.boundary("get_weather", kind="tool")
def get_weather(city: str) -> dict:
    return {"city": city, "celsius": 18}


@chronicle.boundary("weather_agent")
def weather_agent(question: str) -> str:
    return f"{get_weather('Paris')['celsius']} C"


if __name__ == "__main__":
    chronicle.configure(control_plane_url=sys.argv[1], agent=PROFILE, flush_interval=0.05)
    with chronicle.record("weather") as session:
        weather_agent("What is the weather in Paris?")
    assert chronicle.flush(10)
    print(session.trace_id)
"""


@pytest.fixture
def weather_trace(control_plane: LocalControlPlane, tmp_path: Path) -> str:
    """A correct trace of an agent whose profile derives its tools: it called ``get_weather``,
    which its recorded profile lists."""
    (tmp_path / "weather_profile.py").write_text(textwrap.dedent(PROFILE_MODULE))
    (tmp_path / "weather_agent.py").write_text(textwrap.dedent(AGENT_MODULE))
    recorded = python(["weather_agent.py", control_plane.url], tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    trace_id = recorded.stdout.strip()
    control_plane.wait_for_envelopes(trace_id, 2)
    return trace_id


def test_evaluate_with_a_profile_that_derives_its_tools_checks_the_tools_the_trace_recorded(
    control_plane: LocalControlPlane, tmp_path: Path, weather_trace: str
) -> None:
    # The profile's module does not import the tools (they live with the agent's code).
    args = ["evaluate", weather_trace, "--url", control_plane.url]
    result = run_cli(*args, "--profile", "weather_profile:PROFILE", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS [tools] every tool called is one the profile lists" in result.stdout
    assert "not in the profile's tools" not in result.stdout
    assert (
        "tools: the 2 the trace's recorded profile lists (get_weather, weather_agent), as "
        "'Weather Agent' "
        "derives its tools (tools=None)"
    ) in result.stdout
    as_json = json.loads(
        run_cli(*args, "--profile", "weather_profile:PROFILE", "--json", cwd=tmp_path).stdout
    )
    assert as_json["passed"] is True
    assert as_json["notes"][0].startswith("tools: the 2 the trace's recorded profile lists")


def test_evaluate_with_a_profile_that_lists_its_tools_checks_that_list(
    control_plane: LocalControlPlane, tmp_path: Path, weather_trace: str
) -> None:
    (tmp_path / "listed_profile.py").write_text(
        textwrap.dedent(
            """
            import chronicle

            PROFILE = chronicle.AgentProfile(
                "Weather Agent",
                "Answer weather questions",
                model="gpt-4o",
                tools=[{"name": "get_forecast", "description": "", "parameters": {}}],
            )
            """
        )
    )
    args = ["evaluate", weather_trace, "--url", control_plane.url]
    result = run_cli(*args, "--profile", "listed_profile:PROFILE", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr  # the user's list wins
    assert "get_weather not in the profile's tools (get_forecast)" in result.stdout
    assert "recorded profile lists" not in result.stdout


# ---- the Quickstart right after `chronicle serve &` ---------------------------------------------

README = ROOT / "README.md"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_quickstart_runs_right_after_the_control_plane_is_started(tmp_path: Path) -> None:
    (code,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
        if "chronicle.replay_trace(" in b
    ]
    port = free_port()
    configure = 'service_name="support-agent")\n'
    assert code.count("8800") == 1 and code.count(configure) == 1
    code = code.replace("8800", str(port)).replace(
        configure, configure + 'print("configured", flush=True)\n'
    )
    (tmp_path / "quickstart.py").write_text(code)
    child = subprocess.Popen(
        [sys.executable, "quickstart.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")},
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "configured\n"  # record() comes next: nothing listens
        with LocalControlPlane(port=port) as control_plane:  # `chronicle serve &`, a moment late
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            url, calls = out.strip().splitlines()
            trace_id = url.rsplit("/", 1)[1]
            assert calls == "[('planner', 'stub'), ('search', 'run')]"
            assert len(control_plane.trace_envelopes(trace_id)) == 2
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert "lost" not in err and "Traceback" not in err, err


# ---- a recorded what-if whose entry raised -----------------------------------------------------


@pytest.fixture
def support_trace(control_plane: LocalControlPlane, llm_server: LlmServer) -> Iterator[str]:
    """The refund agent recorded once by the ``support-agent`` service; its trace id."""
    from tests.support import refund_agent

    refund_agent.use(llm_server)
    chronicle.configure(
        control_plane_url=control_plane.url, service_name="support-agent", flush_interval=0.05
    )
    try:
        llm_server.reply_with(chat_text("Your refund is on its way."))
        with chronicle.record("support") as session:
            refund_agent.support_agent("Where is my refund?", "o-17")
        assert chronicle.flush(10)
        control_plane.wait_for_envelopes(session.trace_id, 5)
        yield session.trace_id
    finally:
        refund_agent.close()
        chronicle.reset()


def test_a_recorded_what_if_whose_entry_raised_is_listed_as_failed_with_its_service(
    support_trace: str, control_plane: LocalControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    chronicle.reset()  # as the command runs: its own process, no service configured
    status = cli.main(
        [
            "replay",
            support_trace,
            "--entry",
            "tests.support.refund_agent:support_agent",
            "--fail",
            "lookup_order#1=ConnectionError: orders database down",
            "--record",
            "--url",
            control_plane.url,
        ]
    )
    out = capsys.readouterr().out
    assert status == 1, out  # the entry raised where the recording returned
    assert "the entry raised ConnectionError: orders database down" in out
    [new] = re.findall(r"recorded as trace ([0-9a-f]{32})", out)
    assert chronicle.flush(10)
    listed = cli.main(
        ["traces", "--replays-of", support_trace, "--json", "--url", control_plane.url]
    )
    assert listed == 0
    [replayed] = json.loads(capsys.readouterr().out)
    assert replayed["trace_id"] == new
    assert (replayed["status"], replayed["services"]) == ("failure", ["support-agent"])


# ---- chronicle show never cuts a name ----------------------------------------------------------

LONG = "lookup_customer_order_history_in_the_regional_warehouse_database"


@chronicle.boundary(LONG, kind="tool")
def lookup_history(order_id: str) -> dict[str, str]:
    return {"order_id": order_id, "history": "shipped"}


@chronicle.boundary("summarize_the_order_history", kind="tool")
def summarize(history: dict[str, str]) -> str:
    return f"{history['order_id']}: {history['history']}"


def test_show_never_cuts_a_name_and_each_name_it_prints_opens_its_envelope(
    control_plane: LocalControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    chronicle.configure(control_plane_url=control_plane.url, flush_interval=0.05)
    with chronicle.record("history") as session:
        for order in ("o-1", "o-2"):
            summarize(lookup_history(order))
    assert chronicle.flush(10)
    control_plane.wait_for_envelopes(session.trace_id, 4)
    assert cli.main(["show", session.trace_id, "--url", control_plane.url]) == 0
    shown = capsys.readouterr().out
    for label in (f"{LONG}#1", f"{LONG}#2", "summarize_the_order_history#2"):
        assert label in shown.split(), shown  # whole, as a word of its own
        assert (
            cli.main(["show", session.trace_id, "--envelope", label, "--url", control_plane.url])
            == 0
        )
        assert capsys.readouterr().out.startswith(label)
    rows = [line for line in shown.splitlines() if " tool " in f" {line} "]
    assert len(rows) == 4  # each call's columns still on a row of their own
