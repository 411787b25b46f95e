"""The agents the recorded traces carry: listed with paging, one retrieved, against the real
control plane (a fresh one per test, so the listing holds only this test's agents)."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime

import pytest

import chronicle
from chronicle.testing import LocalControlPlane
from tests.support import cli, policy_agent


def record_traces(
    control_plane: LocalControlPlane, profile: chronicle.AgentProfile, n: int
) -> None:
    """``n`` traces of one tool call each, recorded by a service running ``profile``."""
    chronicle.configure(control_plane_url=control_plane.url, agent=profile, flush_interval=0.05)
    try:
        for _ in range(n):
            with chronicle.record("ticket"):
                policy_agent.lookup_order("o-1")
        assert chronicle.flush(10)
    finally:
        chronicle.reset()


def run_cli(control_plane: LocalControlPlane, *argv: str) -> subprocess.CompletedProcess[str]:
    """``chronicle ARGV --url`` the control plane (in this process: tests/support/cli.py)."""
    return cli.run_cli(*argv, "--url", control_plane.url)


def test_two_versions_of_one_agent_and_another_are_listed_with_paging(fresh_control_plane):
    began = datetime.now(UTC)
    older = policy_agent.PROFILE
    newer = older.with_version("2.2.0")
    other = chronicle.AgentProfile("Triage Bot", "Route tickets", tools=[], model="gpt-4o-mini")
    record_traces(fresh_control_plane, older, 2)
    record_traces(fresh_control_plane, newer, 1)
    record_traces(fresh_control_plane, other, 1)

    first = chronicle.find_agents(limit=2, url=fresh_control_plane.url)
    assert [a.agent_id for a in first.agents] == [other.agent_id, newer.agent_id]
    assert first.has_more is True and first.count == 2 and first.complete
    second = chronicle.find_agents(limit=2, offset=2, url=fresh_control_plane.url)
    assert [a.agent_id for a in second.agents] == [older.agent_id]
    assert second.has_more is False

    (row,) = second.agents
    assert (row.name, row.version, row.tenant_id) == ("Refund Agent", "2.1.0", "tenant_demo")
    assert row.model == {"name": "gpt-4o", "temperature": 0.1, "max_tokens": 512}
    assert (row.tools_count, row.constraints_count, row.traces) == (3, 1, 2)
    assert row.first_seen is not None and row.last_seen is not None
    assert began <= row.first_seen <= row.last_seen <= datetime.now(UTC)
    listed = row.to_json()
    assert listed["created_at"] == row.first_seen.isoformat()
    assert listed["model"] == {"name": "gpt-4o"}  # a listing shows the model's name
    assert first.agents[1].version == "2.2.0" and first.agents[1].name == "Refund Agent"
    only = chronicle.find_agents(agent="Refund Agent", url=fresh_control_plane.url)
    assert {a.version for a in only.agents} == {"2.1.0", "2.2.0"}  # a name: both versions
    tenant = chronicle.find_agents(tenant_id="tenant_demo", url=fresh_control_plane.url)
    assert [a.agent_id for a in tenant.agents] == [newer.agent_id, older.agent_id]
    since = chronicle.find_agents(since=datetime.now(UTC), url=fresh_control_plane.url)
    assert since.agents == [] and since.scanned == 0  # every trace is older: none read


def test_the_cli_lists_pages_and_shows_one_agent_as_recorded(fresh_control_plane):
    record_traces(fresh_control_plane, policy_agent.PROFILE, 1)
    other = chronicle.AgentProfile("Triage Bot", "Route tickets", tools=[])
    record_traces(fresh_control_plane, other, 1)

    page = run_cli(fresh_control_plane, "agents", "--json", "--limit", "1")
    assert page.returncode == 0, page.stderr
    body = json.loads(page.stdout)
    assert body["count"] == 1 and body["has_more"] is True
    assert body["agents"][0]["name"] == "Triage Bot"
    rest = json.loads(run_cli(fresh_control_plane, "agents", "--json", "--offset", "1").stdout)
    assert [a["agent_id"] for a in rest["agents"]] == [policy_agent.PROFILE.agent_id]
    assert rest["has_more"] is False

    table = run_cli(fresh_control_plane, "agents")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["AGENT_ID", "NAME", "VERSION"]
    assert rows[1].startswith(policy_agent.PROFILE.agent_id) and "2.1.0" in rows[1]

    shown = run_cli(fresh_control_plane, "agents", "show", policy_agent.PROFILE.agent_id)
    assert shown.returncode == 0, shown.stderr
    profile = json.loads(shown.stdout)
    recorded = policy_agent.PROFILE.to_json()
    for key in ("agent_id", "tenant_id", "name", "goal", "instructions", "constraints", "tools"):
        assert profile[key] == recorded[key]
    assert profile["traces"] == 1 and profile["created_at"] and profile["updated_at"]

    missing = run_cli(fresh_control_plane, "agents", "show", "agt_00000000000000000000")
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "chronicle agents lists" in missing.stderr
    bad = run_cli(fresh_control_plane, "agents", "--offset", "-1")
    assert bad.returncode == 2 and "--offset from 0" in bad.stderr


def test_a_bad_page_is_refused_before_anything_is_read():
    with pytest.raises(ValueError, match="limit must be a whole number from 1 to 1000"):
        chronicle.find_agents(limit=0, url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="offset must be"):
        chronicle.find_agents(offset=-1, url="http://127.0.0.1:9")
