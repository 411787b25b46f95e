"""The pytest plugin as a user meets it: each test runs a small test file in a pytest subprocess.

The test files drive a small agent (``AGENT`` below): a real ``openai.OpenAI`` client, wrapped,
pointed at the local model server, and a destructive ``delete_file`` tool. Whether the model
server got a request, and whether the tool ran, is what tells a replay from a live run. The
network blocking is in test_pytest_plugin_network.py, sessions (xdist workers, a test's own
settings) in test_pytest_plugin_sessions.py.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.save.incident import Incident
from chronicle.testing import capture, pytest_plugin
from tests.support.inline import run_inline
from tests.support.llm_server import LlmServer, chat_text, chat_tool_calls, tool_call

pytest_plugins = ["pytester"]

AGENT = '''
"""The agent under test: a wrapped OpenAI client and a destructive tool."""
import json
import os

import openai

import chronicle

DELETED = []
client = chronicle.wrap(
    openai.OpenAI(base_url=os.environ["AGENT_LLM_URL"], api_key="test", max_retries=0)
)
TOOLS = [{"type": "function", "function": {"name": "delete_file", "parameters": {}}}]


@chronicle.boundary("delete_file", kind="tool")
def delete_file(path: str) -> dict:
    DELETED.append(path)
    return {"deleted": path}


@chronicle.boundary("delete_file", kind="tool")
def delete_file_gated(path: str) -> dict:
    if not path.startswith("/tmp/"):
        return {"blocked": True, "reason": f"{path} is outside /tmp"}
    DELETED.append(path)
    return {"deleted": path}


def run_agent(message, tool=delete_file):
    messages = [{"role": "user", "content": message}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
    choice = first.choices[0].message
    messages.append(choice.model_dump(exclude_none=True))
    for call in choice.tool_calls or []:
        result = tool(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    final = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    return final.choices[0].message.content
'''

INCIDENT_TEST = """
import pytest

import agent


@pytest.mark.chronicle_replay("incidents/delete-db.json")
def test_the_incident():
    answer = agent.run_agent("clean up my files")
    assert answer == "Done: deleted /var/data/customers.db."
"""

LLM = "openai.chat.completions.create"


@pytest.fixture
def project(
    pytester: pytest.Pytester, llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """A folder with the agent, warnings as errors, and the model server's address set."""
    monkeypatch.setenv("AGENT_LLM_URL", llm_server.openai_base_url)
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(agent=AGENT)
    return pytester


def script_one_live_run(server: LlmServer) -> None:
    """The model's two answers for one run of the agent: delete the database, then report."""
    server.reply_with(
        chat_tool_calls(tool_call("delete_file", {"path": "/var/data/customers.db"}, id="call_1")),
        chat_text("Done: deleted /var/data/customers.db."),
    )


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest on the test folder, in this process: the plugin's behaviour in a test run (a
    new pytest session of its own, with a configuration of its own), without the second or two
    of CPU a new interpreter's start and imports cost."""
    return run_inline(pytester, *args)


def run_in_child(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in a new process: for what only a fresh interpreter shows (how the plugin is
    found and imported)."""
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=120)


def record_in_this_process(project: pytest.Pytester, server: LlmServer) -> Path:
    """``incidents/delete-db.json``: one live run of the agent, captured in memory and written."""
    agent: dict[str, Any] = {}
    exec(compile(AGENT, "agent.py", "exec"), agent)
    script_one_live_run(server)
    with capture() as sent:
        with chronicle.record("incident"):
            agent["run_agent"]("clean up my files")
    path = project.path / "incidents" / "delete-db.json"
    Incident.of(sent.envelopes).write(path)
    return path


def write_lookups(path: Path, *keys: str) -> None:
    """An incident file of one ``lookups`` request calling ``lookup(key)`` (which upper-cases)
    once per key, in order."""

    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: str) -> str:
        return key.upper()

    with capture() as sent:
        with chronicle.record("lookups"):
            for key in keys:
                lookup(key)
    Incident.of(sent.envelopes).write(path)


STUBBED_LOOKUP = """\
import pytest

import chronicle

@chronicle.boundary("lookup", kind="tool")
def lookup(key):
    raise AssertionError("stubbed")
"""


def lookup_tests(tests: str) -> str:
    """A test module replaying ``write_lookups``' files: its ``lookup`` boundary fails if it runs
    live (a replay stubs it), then ``tests`` from line 9 on."""
    return STUBBED_LOOKUP + textwrap.dedent(tests)


def masked(value: Any) -> Any:
    """``value`` with every id and time replaced: what may change when a run is recorded again."""
    if isinstance(value, dict):
        return {
            key: "<masked>"
            if key.endswith("id") or key.endswith("_at") or key == "created"
            else masked(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [masked(item) for item in value]
    return value


# ---- the marker ------------------------------------------------------------------------------


def test_the_marker_alone_runs_the_whole_test_in_the_replay(project, llm_server):
    record_in_this_process(project, llm_server)
    project.makepyfile(
        test_replay="""
        import pytest

        import agent


        @pytest.mark.chronicle_replay("incidents/delete-db.json")
        def test_no_fixture_requested():
            assert agent.run_agent("clean up my files") == "Done: deleted /var/data/customers.db."
            assert agent.DELETED == []  # the destructive tool was stubbed too
        """
    )
    before = len(llm_server.requests)
    result = run(project, "-v", "test_replay.py")
    result.assert_outcomes(passed=1)
    assert len(llm_server.requests) == before  # the model server got no request
    # -v prints the call log of a passing replay test
    result.stdout.re_match_lines(
        [
            r".*chronicle.*",
            rf"\s+{re.escape(LLM)}#1 stub",
            r"\s+delete_file#1 stub",
            rf"\s+{re.escape(LLM)}#2 stub",
        ],
        consecutive=False,
    )


def test_a_bad_marker_or_a_missing_file_fails_saying_what_to_do(project):
    project.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.chronicle_replay("incidents/never-recorded.json")
        def test_missing():
            raise AssertionError("the body must not run without its incident")

        @pytest.mark.chronicle_replay("incidents/x.json", rnu=["delete_file"])
        def test_unknown_keyword():
            pass

        @pytest.mark.chronicle_replay("incidents/x.json", run=["delete_file", 42])
        def test_cut_point_not_a_string():
            pass

        @pytest.mark.chronicle_replay(trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
        def test_trace_without_span():
            pass

        @pytest.mark.chronicle_replay("incidents/x.json", match="fuzzy")
        def test_bad_match():
            pass
        """
    )
    result = run(project, "test_bad.py")
    result.assert_outcomes(errors=5)
    out = result.stdout.str()
    assert "the body must not run" not in out
    assert "the incident file incidents/never-recorded.json does not exist" in out
    assert "pytest --chronicle-record-mode=once 'test_bad.py::test_missing'" in out
    assert "python -m chronicle save TRACE_ID -o incidents/never-recorded.json" in out
    assert "has no option 'rnu' (did you mean 'run'?)" in out
    assert "run=[...] holds boundary names (str) or (name, n) pairs" in out
    assert "got 42 (int)" in out
    assert "reads a recorded span with both trace_id= and span_id=" in out
    assert "match is 'order' or 'input', got 'fuzzy'" in out


# ---- divergences: strict by default ---------------------------------------------------------

DIVERGING_TEST = """
import pytest

import agent
import chronicle


@pytest.mark.chronicle_replay("incidents/delete-db.json", run=["delete_file"])
def test_the_fix_changes_what_the_model_reads():
    agent.run_agent("clean up my files", tool=agent.delete_file_gated)


@pytest.mark.chronicle_replay(
    "incidents/delete-db.json",
    run=["delete_file"],
    expect_change=[("openai.chat.completions.create", 2)],
)
def test_the_change_is_expected():
    agent.run_agent("clean up my files", tool=agent.delete_file_gated)


@pytest.mark.chronicle_replay("incidents/delete-db.json", run=["delete_file"], strict=False)
def test_not_strict(chronicle_run):
    agent.run_agent("clean up my files", tool=agent.delete_file_gated)
    (found,) = chronicle_run.divergences()
    assert (found.name, found.index, found.kind) == ("openai.chat.completions.create", 2, "input")


@pytest.mark.chronicle_replay("incidents/delete-db.json")
def test_a_recorded_call_not_made():
    agent.client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "clean up my files"}],
        tools=agent.TOOLS,
    )


def test_a_replay_the_test_opens_is_strict_too(chronicle_replay):
    with chronicle_replay("incidents/delete-db.json", chronicle.ReplayPlan().run("delete_file")):
        agent.run_agent("clean up my files", tool=agent.delete_file_gated)
"""


def test_a_diverging_replay_fails_with_the_boundary_the_diff_and_the_call_log(project, llm_server):
    record_in_this_process(project, llm_server)
    project.makepyfile(test_diverging=DIVERGING_TEST)
    before = len(llm_server.requests)
    result = run(project, "-v", "test_diverging.py")
    result.assert_outcomes(passed=2, failed=3)
    assert len(llm_server.requests) == before
    result.stdout.fnmatch_lines(
        [
            "*_ test_the_fix_changes_what_the_model_reads _*",
            "chronicle: the replay of incidents/delete-db.json diverged from its recording in "
            "1 place:",
            f"1. the input of call 2 of '{LLM}' differs from its recording, so its recorded "
            "result may be stale:",
            '    messages?2?.content: "{\\"deleted\\": \\"/var/data/customers.db\\"}" -> '
            '"{\\"blocked\\": true, *',
            "On the marker: run=* runs a call live, expect_change=* accepts a change the fix *",
            "raised at test_diverging.py:9, by the call that diverged",
            "call log (incidents/delete-db.json):",
            f"  {LLM}#1 stub",
            "  delete_file#1 run",
            f"  {LLM}#2 stub",
            "*_ test_a_recorded_call_not_made _*",
            "chronicle: the replay of incidents/delete-db.json diverged from its recording in "
            "2 places:",
            "1. call 1 of 'delete_file' was recorded but not made during the replay:",
            '    recorded input: {"path": "/var/data/customers.db"}',
            "*",
            f"2. call 2 of '{LLM}' was recorded but not made during the replay:",
            "*",
            "*",
            "*found when the test body ended",
            "*_ test_a_replay_the_test_opens_is_strict_too _*",
            "chronicle: the replay diverged from its recording in 1 place:",
            f"1. the input of call 2 of '{LLM}' differs from its recording*",
            "raised at test_diverging.py:38",
            "call log (incidents/delete-db.json):",
            f"  {LLM}#1 stub",
            "  delete_file#1 run",
            f"  {LLM}#2 stub",
        ]
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "site-packages" not in out  # a report, not a traceback
    # -v: the non-strict test's divergence and call log in the summary
    result.stdout.fnmatch_lines(
        [
            "*= chronicle =*",
            "test_diverging.py::test_not_strict",
            "the replay of incidents/delete-db.json diverged from its recording in 1 place "
            "(allowed: strict=False):",
        ]
    )


def test_match_input_from_chronicle_config_serves_calls_whose_order_changed(pytester):
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def chronicle_config():
            return {"match": "input"}
        """
    )

    write_lookups(pytester.path / "lookups.json", "a", "b")
    pytester.makepyfile(
        test_order=lookup_tests(
            """
            @pytest.mark.chronicle_replay("lookups.json")
            def test_by_input():
                assert [lookup("b"), lookup("a")] == ["B", "A"]

            @pytest.mark.chronicle_replay("lookups.json", match="order")  # the marker wins
            def test_by_order():
                lookup("b")
            """
        )
    )
    result = run(pytester, "--chronicle-log-calls", "test_order.py")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_by_order _*",
            "1. the input of call 1 of 'lookup' differs from its recording*",
            '    key: "a" -> "b"',
            # --chronicle-log-calls: the passing test's call log, without -v
            "*= chronicle =*",
            "test_order.py::test_by_input",
            "call log (replayed lookups.json):",
            "  lookup#2 stub",  # each call is named by the recording it stood for
            "  lookup#1 stub",
        ]
    )


# ---- record modes ----------------------------------------------------------------------------


def record_once(
    project: pytest.Pytester, llm_server: LlmServer, module: str, source: str
) -> pytest.RunResult:
    """Write ``source`` as the test module ``module``, script one live run of the agent and run
    the module with ``--chronicle-record-mode=once``."""
    project.makepyfile(**{module: source})
    script_one_live_run(llm_server)
    return run(project, "--chronicle-record-mode=once", f"{module}.py")


def test_once_writes_a_missing_file_then_replays_it_with_no_live_call(project, llm_server):
    path = project.path / "incidents" / "delete-db.json"
    first = record_once(project, llm_server, "test_incident", INCIDENT_TEST)
    first.assert_outcomes(passed=1)
    assert len(llm_server.requests) == 2  # recorded by running live
    first.stdout.fnmatch_lines(["*wrote incidents/delete-db.json (3 calls)*"])
    text = path.read_text(encoding="utf-8")
    body = json.loads(text)
    assert list(body) == ["trace_id", "metadata", "spans", "envelopes"]
    assert body["metadata"] == {
        "outcome": "passed",
        "recorded_by": "pytest",
        "test": "test_incident.py::test_the_incident",
    }
    assert [e["name"] for e in body["envelopes"]] == [LLM, "delete_file", LLM]
    assert text == Incident.read(path).to_text()  # written exactly as the stable form
    assert text.endswith("}\n") and '\n  "spans": [\n' in text  # pretty, one key a line

    second = run(project, "--chronicle-record-mode=once", "test_incident.py")
    second.assert_outcomes(passed=1)
    assert len(llm_server.requests) == 2  # replayed: zero live calls
    assert path.read_text(encoding="utf-8") == text  # and not written again
    assert "wrote" not in second.stdout.str()


def test_rewrite_and_all_record_again_and_only_ids_and_times_change(project, llm_server):
    path = project.path / "incidents" / "delete-db.json"
    record_once(project, llm_server, "test_incident", INCIDENT_TEST).assert_outcomes(passed=1)
    first = path.read_text(encoding="utf-8")

    script_one_live_run(llm_server)
    rewrite = run(project, "--chronicle-record-mode=rewrite", "test_incident.py")
    rewrite.assert_outcomes(passed=1)
    assert len(llm_server.requests) == 4  # ran live again, although the file existed
    second = path.read_text(encoding="utf-8")
    assert second != first
    assert masked(json.loads(second)) == masked(json.loads(first))

    script_one_live_run(llm_server)
    everything = run(project, "--chronicle-record-mode=all", "test_incident.py")
    everything.assert_outcomes(passed=1)
    assert len(llm_server.requests) == 6  # never replays
    everything.stdout.fnmatch_lines(["*wrote incidents/delete-db.json (3 calls)*"])
    assert masked(json.loads(path.read_text(encoding="utf-8"))) == masked(json.loads(first))


FAILING_INCIDENT_TEST = """
import pytest

import agent


@pytest.mark.chronicle_replay(
    "incidents/failing.json",
    run=["delete_file"],  # the (fixed) tool runs live on replay
    expect_change=[("openai.chat.completions.create", 2)],
)
def test_the_database_survives(chronicle_run):
    agent.run_agent("clean up my files")
    assert agent.DELETED == [], "the fix is not in yet"
"""


def test_once_records_a_failing_incident_test_and_it_passes_after_the_fix(project, llm_server):
    path = project.path / "incidents" / "failing.json"
    first = record_once(project, llm_server, "test_failing", FAILING_INCIDENT_TEST)
    first.assert_outcomes(failed=1)
    assert "the fix is not in yet" in first.stdout.str()
    first.stdout.fnmatch_lines(["*wrote incidents/failing.json (3 calls; the test failed*"])
    body = json.loads(path.read_text(encoding="utf-8"))
    assert list(body) == ["trace_id", "metadata", "spans", "envelopes"]
    assert body["metadata"]["outcome"] == "failed"
    assert body["metadata"]["test"] == "test_failing.py::test_the_database_survives"
    assert "the fix is not in yet" in body["metadata"]["failure"]
    assert [e["name"] for e in body["envelopes"]] == [LLM, "delete_file", LLM]
    written = path.read_text(encoding="utf-8")

    again = run(project, "--chronicle-record-mode=once", "test_failing.py")  # not fixed yet
    again.assert_outcomes(failed=1)
    assert path.read_text(encoding="utf-8") == written  # a failing test never overwrites it
    assert len(llm_server.requests) == 2  # replayed, not run live again

    project.makepyfile(
        agent=AGENT.replace(
            "def run_agent(message, tool=delete_file)",
            "def run_agent(message, tool=delete_file_gated)",
        )
    )
    fixed = run(project, "--chronicle-record-mode=once", "-v", "test_failing.py")
    fixed.assert_outcomes(passed=1)
    assert len(llm_server.requests) == 2
    fixed.stdout.fnmatch_lines(["*recorded from a failing test*the fix is not in yet*"])


def test_a_marker_without_a_path_uses_a_file_named_after_the_test(project, llm_server):
    project.makepyfile(
        test_named="""
        import pytest

        import agent

        @pytest.mark.chronicle_replay
        def test_clean_up():
            assert agent.run_agent("clean up my files") == "Done: deleted /var/data/customers.db."

        class TestNested:
            @pytest.mark.chronicle_replay()
            def test_clean_up(self):
                assert agent.run_agent("clean up my files").startswith("Done")
        """
    )
    missing = run(project, "test_named.py")
    missing.assert_outcomes(errors=2)
    missing.stdout.fnmatch_lines(["*incidents/test_named/test_clean_up.json does not exist*"])
    script_one_live_run(llm_server)
    script_one_live_run(llm_server)
    recorded = run(project, "--chronicle-record-mode=once", "test_named.py")
    recorded.assert_outcomes(passed=2)
    recorded.stdout.fnmatch_lines(
        [
            "*wrote incidents/test_named/test_clean_up.json (3 calls)*",
            "*wrote incidents/test_named/TestNested.test_clean_up.json (3 calls)*",
        ]
    )
    run(project, "test_named.py").assert_outcomes(passed=2)
    assert len(llm_server.requests) == 4


def test_rewrite_writes_whole_files_under_two_workers_and_says_when_tests_share_one(
    project, llm_server
):
    tests = "\n".join(
        f"""
@pytest.mark.chronicle_replay("incidents/shared.json")
def test_{n}():
    agent.run_agent("clean up my files")
"""
        for n in range(4)
    )
    project.makepyfile(test_shared="import pytest\n\nimport agent\n" + tests)
    for _ in range(4):
        script_one_live_run(llm_server)
    result = run(project, "--chronicle-record-mode=rewrite", "-n", "2", "test_shared.py")
    result.assert_outcomes(passed=4)
    path = project.path / "incidents" / "shared.json"
    Incident.read(path)  # whole, whichever worker wrote last
    assert [p.name for p in path.parent.iterdir()] == ["shared.json"]  # no temporary left
    assert "also written by test_shared.py::test_" in result.stdout.str()

    for _ in range(2):
        script_one_live_run(llm_server)
    one = run(
        project,
        "--chronicle-record-mode=rewrite",
        "test_shared.py::test_0",
        "test_shared.py::test_1",
    )
    one.assert_outcomes(passed=2)
    one.stdout.fnmatch_lines(
        ["*incidents/shared.json was also written by test_shared.py::test_0 in this run*"]
    )


# ---- chronicle_config --------------------------------------------------------------------------


def test_chronicle_config_sets_strictness_the_folder_redactors_and_settings(project, llm_server):
    project.makeconftest(
        """
        import pytest

        @pytest.fixture
        def chronicle_config():
            return {
                "strict": False,
                "incident_dir": "incidents",
                "redactors": [lambda text: text.replace("hunter2", "[PASSWORD]")],
                "settings": {"service_name": "support-agent"},
            }
        """
    )
    project.mkdir("suite")
    (project.path / "suite" / "test_config.py").write_text(
        textwrap.dedent(
            """
            import pytest

            import agent

            @pytest.mark.chronicle_replay("with-secret.json")
            def test_secret(chronicle_run):
                agent.run_agent("my password is hunter2, clean up")
                # replayed, the live input is redacted the same way before it is compared
                assert chronicle_run.divergences() == []

            @pytest.mark.chronicle_replay("with-secret.json", run=["delete_file"])
            def test_diverges_and_is_not_strict(chronicle_run):
                agent.run_agent("my password is hunter2, clean up", tool=agent.delete_file_gated)
                assert [d.kind for d in chronicle_run.divergences()] == ["input"]
            """
        )
    )
    script_one_live_run(llm_server)
    result = run(project, "--chronicle-record-mode=once", "suite")
    result.assert_outcomes(passed=2)  # the first records the file, the second replays it
    path = project.path / "incidents" / "with-secret.json"  # from the rootdir, not suite/
    text = path.read_text(encoding="utf-8")
    assert "hunter2" not in text and "my password is [PASSWORD], clean up" in text
    assert json.loads(text)["spans"][0]["service"] == "support-agent"
    replayed = run(project, "suite")
    replayed.assert_outcomes(passed=2)
    assert len(llm_server.requests) == 2


# ---- help ------------------------------------------------------------------------------------


def test_the_marker_and_options_are_in_pytest_markers_and_help(pytester):
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.chronicle_replay(source=None, *, trace_id=None*"])
    help_text = pytester.runpytest("--help")
    help_text.stdout.fnmatch_lines(
        [
            "Chronicle replay (incidents as regression tests):",
            "*--chronicle-record-mode=*",
            "*--chronicle-block-network*",
            "*--chronicle-allowed-hosts=HOSTS*",
            "*--chronicle-log-calls*",
        ]
    )


def test_a_call_with_no_recording_fails_with_the_report_in_the_markers_terms(pytester):
    pytester.makeini("[pytest]\nfilterwarnings = error\n")

    write_lookups(pytester.path / "one.json", "a")
    pytester.makepyfile(
        test_extra=lookup_tests(
            """
            @pytest.mark.chronicle_replay("one.json")
            def test_one_call_too_many():
                lookup("a")
                lookup("b")
            """
        )
    )
    result = run(pytester, "test_extra.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "chronicle: the replay of one.json met a call it has no recording for:",
            "1. call 2 of 'lookup' has no recording (the recording has only 1 call to "
            "'lookup'); the run diverged from the recorded request",
            "On the marker: run=[[]('lookup', 2)] runs it live if it is new on purpose*",
            "raised at test_extra.py:12, by that call",
            "call log (one.json):",
            "  lookup#1 stub",
            "  lookup#2 stub",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert "chronicle/replay/" not in result.stdout.str()  # no trip through our source


def test_a_strict_failure_shows_the_diff_of_the_replay_against_its_recording(project, llm_server):
    record_in_this_process(project, llm_server)
    project.makepyfile(
        test_fix="""
        import pytest

        import agent
        import chronicle


        @pytest.mark.chronicle_replay("incidents/delete-db.json", run=["delete_file"])
        def test_the_fix():
            agent.run_agent("clean up my files", tool=agent.delete_file_gated)


        def test_opened_by_the_test(chronicle_replay):
            plan = chronicle.ReplayPlan().run("delete_file")
            with chronicle_replay("incidents/delete-db.json", plan):
                agent.run_agent("clean up my files", tool=agent.delete_file_gated)
        """
    )
    result = run(project, "test_fix.py")
    result.assert_outcomes(failed=2)
    diff_lines = [
        "diff of the replay against its recording (changed calls only):",
        "~ delete_file#1",
        "    output  blocked: (missing) -> true",
        f"~ {LLM}#2",
        "    input  (divergence 1 above)",  # said once: the divergence above shows it whole
        "differ: 2 calls differ; the first divergence is delete_file#1",
    ]
    result.stdout.fnmatch_lines(
        [
            "*_ test_the_fix _*",
            f"1. the input of call 2 of '{LLM}' differs from its recording*",
            *diff_lines,
            "On the marker: *",
            "call log (incidents/delete-db.json):",
            "*_ test_opened_by_the_test _*",
            f"1. the input of call 2 of '{LLM}' differs from its recording*",
            *diff_lines,
            "raised at test_fix.py:*",
        ]
    )
    out = result.stdout.str()
    assert f"{LLM}#1" not in out.split("changed calls only")[1].split("differ:")[0]  # only changes
    # once in each test's report, not again (the short summary, which repeats the first line of
    # each failure, whole when CI is set, is pytest's own)
    reports = out.split("short test summary info")[0]
    assert reports.count("messages[2].content: ") == 2


# ---- the old module path (deprecated, one release) -------------------------------------------

OLD_PATH = "chronicle.replay.pytest_plugin"


def test_importing_the_old_plugin_path_warns_with_the_new_one_and_reads_through(monkeypatch):
    monkeypatch.delitem(sys.modules, OLD_PATH, raising=False)  # imported afresh, so it warns
    with pytest.warns(DeprecationWarning, match=r"moved to chronicle\.testing\.pytest_plugin"):
        old = importlib.import_module(OLD_PATH)
    assert old.CONFIG_KEYS is pytest_plugin.CONFIG_KEYS
    assert old.CorpusItem is pytest_plugin.CorpusItem
    assert old.default_path is pytest_plugin.default_path


@pytest.mark.plugin_autoload
@pytest.mark.parametrize(
    ("args", "autoload"),
    [
        pytest.param(("-p", OLD_PATH), True, id="beside-the-entry-point"),
        pytest.param(("-p", "no:chronicle", "-p", OLD_PATH), True, id="entry-point-blocked"),
        pytest.param(("-p", OLD_PATH), False, id="autoload-off"),
    ],
)
def test_the_old_plugin_path_still_loads_the_plugin_once_with_a_deprecation_warning(
    pytester, monkeypatch, args, autoload
):
    if not autoload:
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    write_lookups(pytester.path / "lookups.json", "a")
    pytester.makepyfile(
        test_old_path="""
        import pytest

        import chronicle

        @chronicle.boundary("lookup", kind="tool")
        def lookup(key):
            raise AssertionError("stubbed by the replay")

        @pytest.mark.chronicle_replay("lookups.json")
        def test_replayed(chronicle_run):
            assert lookup("a") == "A"
            assert [c.mode for c in chronicle_run.call_log()] == ["stub"]
        """
    )
    result = run_in_child(pytester, "--strict-markers", *args, "test_old_path.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"*DeprecationWarning: {OLD_PATH} moved to chronicle.testing.pytest_plugin*"]
    )
