"""Agent profiles: built and checked at configure, carried on every Span, found by agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Literal, cast

import pytest
from pydantic import BaseModel

import chronicle
from chronicle import agent as agent_module
from chronicle.agent import register_tool, tool_schema
from chronicle.config import load_settings


@pytest.fixture
def no_tools(monkeypatch):
    """An empty tool registry for this test (the test modules' own tools left aside)."""
    monkeypatch.setattr(agent_module, "_tools", {})


class Order(BaseModel):
    order_id: str
    amount: int


def refund(
    order: Order, reason: Literal["damaged", "late"] = "late", *notes: str, **extra: object
) -> None:
    """Issue a refund
    for an order.

    Amounts are in cents; this paragraph is not part of the description."""


def test_a_tool_schema_comes_from_the_signature_and_the_docstring():
    tool: Any = tool_schema("refund_api.create", refund)
    assert tool["name"] == "refund_api.create"
    assert tool["description"] == "Issue a refund for an order."
    parameters = tool["parameters"]
    assert parameters["type"] == "object"
    assert parameters["required"] == ["order"]
    assert parameters["properties"]["order"] == {"$ref": "#/$defs/Order"}
    assert parameters["$defs"]["Order"]["required"] == ["order_id", "amount"]
    assert parameters["properties"]["reason"] == {
        "default": "late",
        "enum": ["damaged", "late"],
        "type": "string",
    }
    assert parameters["properties"]["notes"]["items"] == {"type": "string"}  # *args: a list
    assert parameters["additionalProperties"] is True  # **extra


def test_a_method_tool_leaves_out_self():
    class Shop:
        def lookup(self, order_id: str, _internal: int = 0) -> dict[str, Any]:
            """Look an order up."""
            return {}

    parameters: Any = tool_schema("lookup", Shop.lookup)["parameters"]
    assert parameters == {
        "properties": {
            "order_id": {"type": "string"},
            "_internal": {"default": 0, "type": "integer"},
        },
        "required": ["order_id"],
        "type": "object",
    }


def test_the_agent_id_is_derived_from_the_content(no_tools):
    def profile(goal: str) -> chronicle.AgentProfile:
        return chronicle.AgentProfile(
            "Refund Agent", goal, instructions=["Follow policy"], model="gpt-4o", tools=[]
        )

    first, again, other = profile("Refund orders"), profile("Refund orders"), profile("Other")
    assert first.agent_id == again.agent_id != other.agent_id
    assert first.agent_id.startswith("agt_") and len(first.agent_id) == 24
    assert first.to_json()["model"] == {"name": "gpt-4o"}


def test_bad_profiles_are_refused_with_a_clear_error(no_tools):
    with pytest.raises(chronicle.ConfigurationError, match="AgentProfile name: is required"):
        chronicle.AgentProfile("", "goal")
    with pytest.raises(chronicle.ConfigurationError, match=r"tools\[0\].*needs a non-empty 'name'"):
        chronicle.AgentProfile("bot", tools=[{"description": "no name"}])
    with pytest.raises(chronicle.ConfigurationError, match="instructions: expects a list"):
        chronicle.AgentProfile("bot", instructions="be nice")
    with pytest.raises(chronicle.ConfigurationError, match="metadata: must be JSON"):
        chronicle.AgentProfile("bot", metadata={"when": object()})
    with pytest.raises(chronicle.ConfigurationError, match=r"expects a chronicle\.AgentProfile"):
        chronicle.configure(agent={"name": "bot"})


def test_a_tool_whose_schema_cannot_be_built_is_listed_without_that_type(no_tools, caplog):
    class Connection:  # not something a JSON Schema can describe
        pass

    @chronicle.boundary("query_db", kind="tool")
    def query_db(connection: Connection, sql: str) -> list[Any]:
        """Run a query."""
        return []

    class Local(BaseModel):  # local to this function: its annotation does not resolve
        x: int

    @chronicle.boundary("local_tool", kind="tool")
    def local_tool(item: Local, count: int = 1) -> None:
        """Use a local model."""

    profile = chronicle.AgentProfile("bot", "answer")
    chronicle.configure(agent=profile)  # deriving the tools never fails configure
    chronicle.configure(agent=chronicle.AgentProfile("bot", "answer"))  # nor a second time
    tools: Any = {t["name"]: t for t in cast(Any, profile.to_json()["tools"])}
    assert tools["query_db"]["parameters"]["properties"] == {
        "connection": {},
        "sql": {"type": "string"},
    }
    assert tools["local_tool"]["parameters"]["properties"] == {
        "item": {},
        "count": {"default": 1, "type": "integer"},
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len([w for w in warnings if "'query_db'" in w]) == 1  # one warning per tool
    (local,) = [w for w in warnings if "'local_tool'" in w]
    assert "item: its annotation 'Local' does not resolve" in local
    assert "AgentProfile(..., tools=[...])" in local  # what to do about it
    listed = chronicle.AgentProfile("bot", "answer", tools=[])
    chronicle.configure(agent=listed)
    assert listed.to_json()["tools"] == []  # tools=[...] still lists them explicitly


def test_a_constraint_carries_its_check_and_only_its_text_is_recorded(no_tools):
    def approved(calls: Any) -> bool:
        return True

    rule = "Refunds above 2500 cents need manager approval"
    with_check = chronicle.AgentProfile(
        "bot", constraints=[chronicle.Constraint(rule, check=approved)]
    )
    as_text = chronicle.AgentProfile("bot", constraints=[rule])
    assert with_check.agent_id == as_text.agent_id  # the callable is not part of the profile
    assert with_check.to_json()["constraints"] == [rule]
    assert with_check.checks[0].check is approved and as_text.checks[0].check is None
    with pytest.raises(chronicle.ConfigurationError, match="Constraint check: expects a function"):
        chronicle.Constraint(rule, check="yes")  # type: ignore[arg-type]


def test_the_tenant_comes_from_the_profile_or_the_environment(no_tools):
    plain = chronicle.AgentProfile("bot", tools=[])
    tenant = chronicle.AgentProfile("bot", tools=[], tenant_id="tenant_demo")
    assert "tenant_id" not in plain.to_json()  # a profile without one keeps its agent_id
    assert tenant.to_json()["tenant_id"] == "tenant_demo" and tenant.agent_id != plain.agent_id
    settings = load_settings({"agent": plain}, environ={"CHRONICLE_TENANT_ID": "tenant_env"})
    assert settings.agent is not None and settings.agent.tenant_id == "tenant_env"
    kept = load_settings({"agent": tenant}, environ={"CHRONICLE_TENANT_ID": "tenant_env"})
    assert kept.agent is not None and kept.agent.tenant_id == "tenant_demo"
    assert load_settings(environ={"CHRONICLE_TENANT_ID": "t"}).agent is None  # no agent: ignored
    again = chronicle.AgentProfile.from_json(tenant.to_json())
    assert again == tenant and again.agent_id == tenant.agent_id


def test_name_and_version_from_the_environment_or_the_file(no_tools, tmp_path):
    settings = load_settings(
        environ={"CHRONICLE_AGENT_NAME": "triage-bot", "CHRONICLE_AGENT_VERSION": "1.4.0"}
    )
    assert settings.agent is not None
    assert settings.agent.to_json()["name"] == "triage-bot"
    assert settings.agent.to_json()["metadata"] == {"version": "1.4.0"}
    config = tmp_path / "chronicle.json"
    config.write_text(json.dumps({"agent_name": "file-bot"}))
    from_file = load_settings(environ={"CHRONICLE_CONFIG": str(config)}).agent
    assert from_file is not None and from_file.name == "file-bot"
    # a profile in code wins over the name; the version fills in what the profile lacks
    code = chronicle.AgentProfile("code-bot", "goal", tools=[])
    resolved = load_settings(
        {"agent": code}, environ={"CHRONICLE_AGENT_NAME": "env-bot", "CHRONICLE_AGENT_VERSION": "2"}
    )
    assert resolved.agent is not None
    assert (resolved.agent.name, resolved.agent.metadata) == ("code-bot", {"version": "2"})
    with pytest.raises(chronicle.ConfigurationError, match="agent_version: needs an agent"):
        load_settings(environ={"CHRONICLE_AGENT_VERSION": "2"})


def test_the_first_function_under_a_tool_name_defines_it_unless_it_is_redecorated(no_tools):
    def delete_file(path: str) -> dict[str, Any]:
        """Delete a file."""
        return {}

    def delete_file_gated(path: str, force: bool = False) -> dict[str, Any]:
        """The fix, run in replay under the same name."""
        return {}

    register_tool("delete_file", delete_file)
    register_tool("delete_file", delete_file_gated)
    profile = chronicle.AgentProfile("bot")
    tools: Any = profile.to_json()["tools"]
    assert [t["description"] for t in tools] == ["Delete a file."]

    def delete_file(path: str, dry_run: bool = True) -> dict[str, Any]:  # type: ignore[no-redef]
        """Delete a file, or say what would go."""
        return {}

    register_tool("delete_file", delete_file)  # the same function again: a cell run twice
    (tool,) = cast(Any, profile.to_json()["tools"])
    assert tool["description"] == "Delete a file, or say what would go."
    assert set(tool["parameters"]["properties"]) == {"path", "dry_run"}


SERVICE = textwrap.dedent(
    '''
    import sys

    from pydantic import BaseModel

    import chronicle


    class Refund(BaseModel):
        order_id: str
        amount: int


    @chronicle.boundary("refund_api.create", kind="tool")
    def create_refund(refund: Refund, note: str = "") -> dict:
        """Issue a refund for an order.

        Amounts are in cents."""
        return {"refunded": refund.amount}


    @chronicle.boundary("escalation_api.request_approval", kind="tool")
    def request_approval(order_id: str, amount: int) -> dict:
        """Request manager approval for a high-value action."""
        return {"approved": False}


    @chronicle.boundary("model", kind="llm")
    def model(messages: list) -> dict:
        return {"content": "escalate"}


    chronicle.configure(
        control_plane_url=sys.argv[1],
        service_name="refunds",
        agent=chronicle.AgentProfile(
            "Refund Agent v2",
            "Process refund requests by policy, escalating above the threshold.",
            instructions=["Always verify order status before issuing a refund"],
            constraints=["Refunds above 2500 cents require manager approval"],
            model={"name": "gpt-4o", "temperature": 0.1},
            metadata={"team": "cx-automation"},
        ),
    )
    with chronicle.record("refund", labels={"session_id": sys.argv[2]}) as session:
        model([{"role": "user", "content": "refund order o-1, 3000 cents"}])
        request_approval("o-1", 3000)
    assert chronicle.flush(10)
    print(session.trace_id)
    '''
)


def test_the_span_read_back_carries_the_profile_with_the_services_tools(control_plane, tmp_path):
    script = tmp_path / "refunds.py"
    script.write_text(SERVICE)
    result = subprocess.run(
        [sys.executable, str(script), control_plane.url, "sess-agent-profile"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")},
            "CHRONICLE_AGENT_VERSION": "2.1.0",
        },
    )
    assert result.returncode == 0, result.stderr
    trace_id = result.stdout.strip()
    control_plane.wait_for_envelopes(trace_id, 2)
    (span,) = control_plane.trace(trace_id)["spans"]
    profile = span["metadata"]["chronicle.agent"]
    assert profile["name"] == "Refund Agent v2"
    assert profile["goal"].startswith("Process refund requests")
    assert profile["constraints"] == ["Refunds above 2500 cents require manager approval"]
    assert profile["model"] == {"name": "gpt-4o", "temperature": 0.1}
    assert profile["metadata"] == {"team": "cx-automation", "version": "2.1.0"}
    assert profile["agent_id"].startswith("agt_")
    tools = {tool["name"]: tool for tool in profile["tools"]}
    assert list(tools) == ["refund_api.create", "escalation_api.request_approval"]  # no llm
    assert tools["refund_api.create"]["description"] == "Issue a refund for an order."
    create = tools["refund_api.create"]["parameters"]
    assert create["required"] == ["refund"]
    assert create["$defs"]["Refund"]["properties"]["amount"]["type"] == "integer"
    assert create["properties"]["note"] == {"default": "", "type": "string"}
    assert tools["escalation_api.request_approval"]["parameters"] == {
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "integer"}},
        "required": ["order_id", "amount"],
        "type": "object",
    }
    (found,) = chronicle.find_traces(
        agent="Refund Agent v2", session_id="sess-agent-profile", url=control_plane.url
    )
    assert found.trace_id == trace_id and found.agents == ("Refund Agent v2",)
    by_id = chronicle.find_traces(
        agent=profile["agent_id"], session_id="sess-agent-profile", url=control_plane.url
    )
    assert [s.trace_id for s in by_id] == [trace_id]
