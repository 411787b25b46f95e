"""``chronicle evaluate`` on hostile recorded tool schemas (issue 40, item 3): every schema ends
in a verdict, in bounded time, never an exception. The schemas reach evaluate as a user's do: in
the agent profile recorded with the trace, on the real control plane, read back by the
``chronicle evaluate`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.check import schema
from chronicle.testing import LocalControlPlane

ROOT = Path(__file__).resolve().parent.parent
LONG = "a" * 40 + "b"  # 2**40 ways for ^(a+)+$ to fail, for a backtracking engine


def branching(levels: int) -> dict[str, Any]:
    """A schema whose anyOf doubles at each level: 2**levels paths for a value none match."""
    defs: dict[str, Any] = {f"L{levels}": {"type": "integer"}}  # the string recorded fails it
    for n in range(levels):
        defs[f"L{n}"] = {"anyOf": [{"$ref": f"#/$defs/L{n + 1}"}, {"$ref": f"#/$defs/L{n + 1}"}]}
    return {"$defs": defs, "type": "object", "properties": {"code": {"$ref": "#/$defs/L0"}}}


def tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "description": f"the {name} tool", "parameters": parameters}


HOSTILE = [
    tool("match", {"type": "object", "properties": {"code": {"pattern": "^(a+)+$"}}}),
    tool("loop", {"$ref": "#"}),
    tool(
        "cycle",
        {
            "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"allOf": [{"$ref": "#/$defs/A"}]}},
            "$ref": "#/$defs/A",
        },
    ),
    tool("branch", branching(40)),
    tool("remote", {"$ref": "https://schemas.example.invalid/order.json"}),
    tool("look", {"type": "object", "properties": {"code": {"pattern": "(?=a)a"}}}),
]


@pytest.fixture
def hostile_trace(control_plane: LocalControlPlane) -> str:
    """A trace recorded with a profile listing the hostile tools, each called once."""
    profile = chronicle.AgentProfile("Hostile", "Calls tools with hostile schemas", tools=HOSTILE)
    chronicle.configure(control_plane_url=control_plane.url, agent=profile, flush_interval=0.05)

    def use(code: str) -> str:
        return code

    calls = [chronicle.boundary(t["name"], kind="tool")(use) for t in HOSTILE]

    @chronicle.boundary("agent")
    def agent() -> None:  # the entry: the tools it calls are what evaluate checks
        for call in calls:
            call(LONG)

    try:
        with chronicle.record("hostile") as session:
            agent()
        assert chronicle.flush(10)
        control_plane.wait_for_envelopes(session.trace_id, len(HOSTILE) + 1)
    finally:
        chronicle.reset()
    return session.trace_id


def evaluate_cli(trace_id: str, url: str) -> dict[str, Any]:
    """``chronicle evaluate TRACE --json``, run as a user runs it. The timeout only guards the
    test run against the hang this issue is about; no speed is asserted."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, "-m", "chronicle", "evaluate", trace_id, "--url", url, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert "Traceback" not in done.stderr, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_every_hostile_recorded_schema_ends_in_a_verdict(hostile_trace, control_plane):
    evaluation = evaluate_cli(hostile_trace, control_plane.url)
    (arguments,) = [v for v in evaluation["verdicts"] if v["check"] == "arguments"]
    reason = arguments["reason"]
    assert arguments["status"] == "fail"
    assert arguments["calls"] == ["match#1", "loop#1", "cycle#1", "remote#1"]
    assert f"match#1: code: '{LONG[:30]}" in reason and "does not match '^(a+)+$'" in reason
    assert "loop#1: the schema's $ref cycle # -> # never reaches a value" in reason
    assert (
        "cycle#1: the schema's $ref cycle #/$defs/A -> #/$defs/B -> #/$defs/B/allOf/0 -> "
        "#/$defs/A never reaches a value"
    ) in reason
    assert "remote#1: the schema's $ref 'https://schemas.example.invalid/order.json' does not " in (
        reason
    )
    assert "not checked, the schema needs more than 10,040 steps to check this value" in reason
    assert reason.endswith(
        "branch#1; in part: the pattern '(?=a)a' was not run: it uses what a "
        "linear-time engine does not run (a lookaround or a backreference)"
    )


def test_a_pattern_matches_as_before_on_the_linear_engine():
    assert schema.regex_engine() == "re2"
    pattern = {"type": "object", "properties": {"order": {"type": "string", "pattern": "^o-\\d+$"}}}
    assert schema.check_arguments({"order": "o-12"}, pattern) == schema.SchemaCheck()
    assert schema.schema_errors({"order": "x-12"}, pattern) == [
        "order: 'x-12' does not match '^o-\\\\d+$'"
    ]
    keyed = {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False}
    assert schema.schema_errors({"x-a": 1, "x-b": "2", "y": 3}, keyed) == [
        "x-b: '2' is not of type integer",
        "the arguments: 'y' is not an allowed argument",
    ]
    assert schema.schema_errors("abc", {"pattern": "("}) == [
        "the arguments: the schema's pattern '(' does not compile; fix the tool's schema"
    ]


def test_without_a_linear_engine_a_pattern_is_not_run_and_the_result_says_how_to_get_one(
    monkeypatch,
):
    monkeypatch.setattr(schema, "_ENGINE", [None])
    monkeypatch.setattr(schema, "_COMPILED", {})
    found = schema.check_arguments({"code": LONG}, HOSTILE[0]["parameters"])
    assert found.errors == [] and found.skipped is None
    assert found.unchecked == [
        "the pattern '^(a+)+$' was not run: no linear-time regular expression engine is "
        "installed (pip install 'agentplane-chronicle[evaluate]' installs google-re2)"
    ]


def test_without_jsonschema_the_arguments_verdict_is_undetermined_and_says_how_to_install(
    monkeypatch, hostile_trace, control_plane
):
    monkeypatch.setattr(schema, "_MODULE", [None])
    tree = chronicle.show(hostile_trace, url=control_plane.url)
    arguments = chronicle.evaluate(tree).verdict("arguments")
    assert arguments.status == "undetermined"
    assert arguments.reason == (
        "no tool call to check; not checked, the jsonschema package is not installed (pip "
        "install 'agentplane-chronicle[evaluate]'): match#1, loop#1, cycle#1, branch#1, "
        "remote#1, look#1"
    )


@pytest.mark.parametrize(
    "parameters",
    [
        {"$ref": "#"},
        {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"},
        {
            "properties": {"x": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"not": {"$ref": "#/$defs/A"}}},
        },
    ],
    ids=["self", "a-b-a", "through-not"],
)
def test_a_ref_cycle_is_an_error_of_the_schema_not_a_recursion_error(parameters):
    (error,) = schema.schema_errors({"x": 1}, parameters)
    assert "$ref cycle" in error and "never reaches a value; fix the tool's schema" in error


def test_a_recursive_schema_that_consumes_the_value_still_validates():
    tree = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            }
        },
        "$ref": "#/$defs/Node",
    }
    assert schema.schema_errors({"kids": [{"kids": []}, {"kids": [{"kids": []}]}]}, tree) == []
    assert schema.schema_errors({"kids": [{"kids": 3}]}, tree) == [
        "kids[0].kids: 3 is not of type array"
    ]


def test_a_ref_to_another_document_is_never_fetched():
    fetched: list[str] = []

    class Schemas(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "integer"}')

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Schemas)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/order.json"
        found = schema.check_arguments({"amount": "3000"}, {"$ref": url})
    finally:
        server.shutdown()
        server.server_close()
    assert found.errors == [f"the schema's $ref '{url}' does not resolve; fix the tool's schema"]
    assert fetched == []  # jsonschema's default registry would have fetched it


def test_a_ref_that_does_not_resolve_is_said_so_after_referencing_is_imported_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host that puts ``sys.modules`` back (pytest's in-process runs) makes a second copy of
    ``referencing`` on its next import: the check still catches what the validator it built
    raises (seen in CI as "the schema cannot be applied (_WrappedReferencingError ...)")."""
    schema.check_arguments({"amount": 1}, {"type": "object"})  # the validator is built now
    for name in [n for n in sys.modules if n == "referencing" or n.startswith("referencing.")]:
        monkeypatch.delitem(sys.modules, name)
    __import__("referencing.exceptions")  # a second copy, as the next importer would make
    found = schema.check_arguments({"amount": 1}, {"$ref": "#/$defs/missing"})
    assert found.errors == [
        "the schema's $ref '#/$defs/missing' does not resolve; fix the tool's schema"
    ]
