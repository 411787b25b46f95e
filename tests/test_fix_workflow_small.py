"""The smaller breaks of the fix workflow (issue 39, item 7), each as a new user meets it.

- ``chronicle evaluate TRACE --profile module:PROFILE`` with a profile that derives its tools
  (``tools=None``) from a module that does not import them: the trace is checked against the
  tools its recorded profile lists, and the output says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chronicle.testing import LocalControlPlane

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
    args = ["-m", "chronicle", "evaluate", weather_trace, "--url", control_plane.url]
    result = python([*args, "--profile", "weather_profile:PROFILE"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS [tools] every tool called is one the profile lists" in result.stdout
    assert "not in the profile's tools" not in result.stdout
    assert (
        "tools: the 2 the trace's recorded profile lists (get_weather, weather_agent), as "
        "'Weather Agent' "
        "derives its tools (tools=None)"
    ) in result.stdout
    as_json = json.loads(
        python([*args, "--profile", "weather_profile:PROFILE", "--json"], tmp_path).stdout
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
    args = ["-m", "chronicle", "evaluate", weather_trace, "--url", control_plane.url]
    result = python([*args, "--profile", "listed_profile:PROFILE"], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr  # the user's list wins
    assert "get_weather not in the profile's tools (get_forecast)" in result.stdout
    assert "recorded profile lists" not in result.stdout
