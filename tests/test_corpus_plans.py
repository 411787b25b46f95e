"""A corpus proves a fix: the plan applies to the recordings that make the calls it names.

The agent is a small weather assistant written into the test's project as ``weather_agent.py``:
its ``answer`` entry asks the ``get_weather`` tool only when the question is about the weather,
then has the model (a real ``openai.OpenAI`` client, wrapped, talking to the local model server)
write the answer from what it found. Twenty requests are recorded in this process
(``chronicle.testing.capture()``, written as incident files by the real code): half of them ask
for the weather. Then the tool is fixed (it reports Fahrenheit) and the corpus replayed with the
tool as a cut-point, by ``chronicle replay --run get_weather`` and by ``pytest --chronicle-corpus
--chronicle-run get_weather`` on two workers: the ten recordings that call the tool diverge
(the model call now reads the fixed tool's result), the ten that never call it pass, in both,
recording by recording; declaring the model call's change passes all twenty.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.cli import main
from chronicle.errors import ReplayDivergenceError
from chronicle.save.incident import Incident
from chronicle.testing import capture
from chronicle.whatif.corpus import Options, replay_corpus
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer, chat_text
from tests.support.nested_pytest import RECORDINGS, TWO_WORKERS_GROUP, UNREACHED, CorpusRun

pytest_plugins = ["pytester", "tests.support.two_workers"]

MODULE = "weather_agent"
ENTRY = f"{MODULE}:answer"
LLM = "openai.chat.completions.create"
AGENT = '''"""A weather assistant: asks for the weather only when the question is about it."""

import json
import os

import openai

import chronicle

client = chronicle.wrap(
    openai.OpenAI(
        base_url=os.environ.get("WEATHER_LLM_URL", "http://127.0.0.1:9/v1"),
        api_key="local",
        max_retries=0,
    )
)


@chronicle.boundary("get_weather", kind="tool")
def get_weather(city: str) -> dict:
    """Today's forecast for ``city``."""
    return TOOL_BODY


@chronicle.boundary("answer")
def answer(question: str, city: str) -> str:
    """The request's entry: the weather when asked for, then the model's answer."""
    messages = [{"role": "user", "content": question}]
    if "weather" in question:
        messages.append({"role": "user", "content": json.dumps(get_weather(city))})
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    return reply.choices[0].message.content
'''
RECORDED_TOOL = '{"city": city, "forecast": "sunny", "temperature": 21}'
FIXED_TOOL = '{"city": city, "forecast": "sunny", "temperature": 70, "unit": "F"}'
CITIES = ["Lisbon", "Oslo", "Nairobi", "Lima", "Osaka"]


def question(n: int) -> dict[str, str]:
    """The n-th request: even ones ask for the weather, odd ones do not."""
    city = CITIES[n % len(CITIES)]
    if n % 2 == 0:
        return {"question": f"What is the weather in {city} today? (request {n})", "city": city}
    return {"question": f"Recommend a book set in {city} (request {n})", "city": city}


def write_agent(project: pytest.Pytester, tool: str) -> None:
    """``weather_agent.py`` with ``tool`` as the tool's result, imported fresh next time."""
    (project.path / f"{MODULE}.py").write_text(AGENT.replace("TOOL_BODY", tool), encoding="utf-8")
    sys.modules.pop(MODULE, None)  # (pytester restores sys.modules when the test ends)
    importlib.invalidate_caches()


@pytest.fixture
def project(
    pytester: pytest.Pytester, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """The project: 20 recorded requests in ``incidents/`` (10 call the tool), then the tool
    fixed in ``weather_agent.py``."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # the module is rewritten in place
    monkeypatch.setenv("WEATHER_LLM_URL", llm_server.openai_base_url)
    pytester.syspathinsert()
    write_agent(pytester, RECORDED_TOOL)
    agent: Any = importlib.import_module(MODULE)
    for n in range(20):
        llm_server.reply_with(chat_text(f"Here is my answer to request {n}."))
        with capture() as sent:
            with chronicle.record(f"weather-{n}"):
                agent.answer(**question(n))
        Incident.of(sent.envelopes).write(pytester.path / "incidents" / f"request-{n:02d}.json")
    assert len(llm_server.requests) == 20
    write_agent(pytester, FIXED_TOOL)
    return pytester


def calls_the_tool(source: str) -> bool:
    """Whether the recording ``incidents/request-NN.json`` asked for the weather."""
    return int(Path(source).stem.removeprefix("request-")) % 2 == 0


def replay_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``chronicle replay incidents --entry weather_agent:answer ...`` in this process."""
    capsys.readouterr()  # (what ran before: pytester's lines, say)
    status = main(["replay", "incidents", "--entry", ENTRY, *args])
    out, err = capsys.readouterr()
    return status, out, err


def run_pytest(project: pytest.Pytester, *args: str, workers: int = 0) -> pytest.RunResult:
    """``pytest --chronicle-corpus incidents`` with ``args``: on ``workers`` pytest-xdist
    workers in a subprocess, or in this process (faster) without them."""
    corpus = ["--chronicle-corpus", "incidents", "--chronicle-entry", ENTRY, *args, "incidents"]
    if workers:
        return project.runpytest_subprocess(
            "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", *corpus, "-n", str(workers),
            timeout=120,
        )  # fmt: skip
    return run_inline(project, "-p", "no:xdist", *corpus)


def outcomes(done: pytest.RunResult) -> dict[str, str]:
    """Each item's outcome, ``passed`` or ``failed``, from pytest's ``-rA`` summary lines."""
    found = {}
    for line in done.outlines:
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED"):
            found[rest.partition(" - ")[0]] = word.lower()
    return found


# ---- the CLI and pytest agree, recording by recording ------------------------------------------


def test_cli_and_pytest_on_two_workers_agree_and_the_recordings_without_the_tool_pass(
    project, capsys
):
    status, out, err = replay_cli(capsys, "--run", "get_weather", "--json")
    assert status == 1
    cli = {r["source"]: r["outcome"] for r in map(json.loads, out.splitlines())}
    assert len(cli) == 20
    assert {s for s, outcome in cli.items() if outcome == "passed"} == {
        s for s in cli if not calls_the_tool(s)
    }
    diverged = [r for r in map(json.loads, out.splitlines()) if r["outcome"] == "diverged"]
    assert len(diverged) == 10
    for result in diverged:  # the model call read the fixed tool's result; nothing else moved
        (found,) = result["divergences"]
        assert (found["name"], found["index"], found["kind"]) == (LLM, 1, "input")
        assert '\\"temperature\\": 21}' in found["diff"] and '\\"unit\\": \\"F\\"}' in found["diff"]
    assert err.startswith("20 recordings: 10 passed, 10 diverged (")

    done = run_pytest(project, "--chronicle-run", "get_weather", "-rA", workers=2)
    done.assert_outcomes(passed=10, failed=10)
    assert outcomes(done) == {
        source: "passed" if outcome == "passed" else "failed" for source, outcome in cli.items()
    }

    status, out, err = replay_cli(capsys, "--run", "get_weather", "--expect-change", LLM, "--json")
    assert status == 0, out
    assert err.startswith("20 recordings: 20 passed (")
    expected = [d for r in map(json.loads, out.splitlines()) for d in r["divergences"]]
    assert len(expected) == 10 and all(d["expected"] for d in expected)  # reported, not failed
    done = run_pytest(
        project, "--chronicle-run", "get_weather", "--chronicle-expect-change", f"{LLM}#1"
    )
    done.assert_outcomes(passed=20)


def test_without_the_cut_point_the_fixed_tool_is_never_run_and_every_recording_passes(
    project, capsys
):
    """What the corpus said before it took a plan: the tool's change is invisible."""
    status, _, err = replay_cli(capsys, "--json")
    assert status == 0 and err.startswith("20 recordings: 20 passed (")


def test_not_strict_reports_each_divergence_once_and_passes(project, capsys, caplog):
    status, out, _ = replay_cli(capsys, "--run", "get_weather", "--not-strict")
    assert status == 0
    assert out.count("passed    ") == 20
    assert out.count(f"the input of call 1 of {LLM!r} differs from its recording") == 10
    # the replay's own end-of-run warning would say it again, and the plan entry the odd
    # recordings never reach would be one more "divergence" in it
    assert [r.getMessage() for r in caplog.records if r.name == "chronicle"] == []


# ---- one replay against a corpus --------------------------------------------------------------


def test_an_entry_a_single_replay_never_reaches_is_still_a_divergence_there(project):
    plan = chronicle.ReplayPlan().run("get_weather")
    with pytest.raises(ReplayDivergenceError) as raised:
        with chronicle.replay("incidents/request-01.json", plan, strict=True):
            importlib.import_module(MODULE).answer(**question(1))
    (found,) = raised.value.divergences
    assert found.kind == "plan"
    assert "the plan entry run('get_weather') matched no call" in str(raised.value)

    (result,) = replay_corpus(
        ["incidents/request-01.json"], ENTRY, options=Options(run=(("get_weather", None),))
    )
    assert result.outcome == "passed", result.describe()
    assert result.divergences == ()
    assert [d.name for d in result.unmatched or ()] == ["get_weather"]


def test_an_entry_no_recording_reaches_fails_the_corpus_and_names_the_close_name(project, capsys):
    status, out, _ = replay_cli(capsys, "--run", "get_wether")
    assert status == 1
    assert out.count("passed    ") == 20  # each recording passes on its own
    (line,) = [line for line in out.splitlines() if "matched no call" in line]
    assert line.startswith(
        "the plan entry --run get_wether matched no call in any of the 20 recordings replayed"
    )
    assert "(did you mean 'get_weather'?)" in line

    status, _, _ = replay_cli(capsys, "--run", "get_wether", "--not-strict")
    assert status == 0  # reported, not failed

    done = run_pytest(project, "--chronicle-run", "get_wether")
    done.assert_outcomes(passed=20)
    assert done.ret == pytest.ExitCode.TESTS_FAILED
    done.stdout.fnmatch_lines(
        [
            "*chronicle corpus*",
            "the plan entry --chronicle-run get_wether matched no call in any of the 20 "
            "recordings replayed*did you mean 'get_weather'?*",
        ]
    )


@pytest.mark.xdist_group(TWO_WORKERS_GROUP)
def test_on_two_workers_an_entry_neither_reaches_is_said_once_for_the_whole_corpus(
    corpus_on_two_workers: CorpusRun,
) -> None:
    run = corpus_on_two_workers  # --chronicle-run UNREACHED, each worker replaying a share
    said = f"the plan entry --chronicle-run {UNREACHED} matched no call in any of the "
    replayed = RECORDINGS - 1  # the corrupt one is not replayed
    run.result.stdout.fnmatch_lines(
        ["*chronicle corpus*", f"{said}{replayed} recordings replayed*did you mean 'search_kb'?*"]
    )
    unmatched = [line for line in run.result.outlines if "matched no call" in line]
    assert len(unmatched) == 1, unmatched  # the workers' shares merged: said once, not per worker


def test_a_bad_option_is_a_usage_error_naming_its_form(project, capsys):
    status, _, err = replay_cli(capsys, "--expect-change", "answer#0")
    assert status == 2
    assert "--expect-change takes NAME or NAME#n with n from 1" in err
    done = run_pytest(project, "--chronicle-ignore", "messages[")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    done.stderr.fnmatch_lines(["*--chronicle-corpus: ignore pattern 'messages[' cannot be read*"])


# ---- the advice names the fix as it is written where it is printed ----------------------------


def test_the_advice_is_a_plan_method_in_python_a_flag_in_the_cli_a_marker_argument_in_pytest(
    project, capsys
):
    model_call = f"{LLM}#1"
    (result,) = replay_corpus(
        ["incidents/request-00.json"], ENTRY, options=Options(run=(("get_weather", None),))
    )
    python = result.describe()
    assert f"ReplayPlan().expect_change({LLM!r}, 1)" in python
    assert f"ReplayPlan().run({LLM!r}, 1)" in python

    _, cli, _ = replay_cli(capsys, "--run", "get_weather")
    assert f"run it live with --run '{model_call}', or mark the change as expected with " in cli
    assert f"--expect-change '{model_call}'" in cli and "ReplayPlan()" not in cli

    done = run_pytest(project, "--chronicle-run", "get_weather")
    done.assert_outcomes(passed=10, failed=10)
    text = done.stdout.str()
    assert f"run it live with --chronicle-run '{model_call}', or mark the change as" in text
    assert f"--chronicle-expect-change '{model_call}'" in text
    assert "On the command line: --chronicle-run NAME[#n] runs a call live" in text
    assert "ReplayPlan()" not in text and "On the marker" not in text

    project.makepyfile(
        test_fix=f"""
        import pytest

        import {MODULE}


        @pytest.mark.chronicle_replay("incidents/request-00.json", run=["get_weather"])
        def test_the_fixed_tool():
            {MODULE}.answer(question="What is the weather in Lisbon today? (request 0)",
                            city="Lisbon")
        """
    )
    marked = run_inline(project, "-p", "no:xdist", "test_fix.py")
    marked.assert_outcomes(failed=1)
    text = marked.stdout.str()
    assert f"run it live with run=[({LLM!r}, 1)], or mark the change as expected with " in text
    assert f"expect_change=[({LLM!r}, 1)]" in text
    assert "ReplayPlan()" not in text and "--chronicle-run" not in text
