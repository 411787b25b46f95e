"""Incidents as a regression suite: recordings of one agent, replayed as a corpus against its code.

The agent is ``examples/triage_agent.py``: the ``triage`` entry runs a ``research`` sub-agent
(a knowledge-base tool and a model call) and a model call of its own, through a real
``openai.OpenAI`` client talking to the local model server. Its recordings are made in this
process with ``chronicle.testing.capture()`` (the real delivery path, kept in memory) and written
as incident files by the real code, one per request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chronicle
from chronicle import wire
from chronicle.save.incident import Incident
from chronicle.testing import capture
from examples import triage_agent
from tests.support.llm_server import LlmServer, chat_text

ENTRY = "examples.triage_agent:triage"
LLM = "openai.chat.completions.create"
TICKETS = [
    "I cannot reset my password, the link expired",
    "Your service has an outage since this morning",
    "Please refund my order from last week",
    "My invoice shows the wrong currency",
    "How do I change my billing address?",
]
TIERS = ["standard", "enterprise"]


def request(n: int) -> dict[str, str]:
    """The n-th recorded request's input (the corpus varies the ticket and the tier)."""
    return {
        "ticket": f"{TICKETS[n % len(TICKETS)]} (ticket {n})",
        "customer_tier": TIERS[n % len(TIERS)],
    }


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def record_corpus(server: LlmServer, folder: Path, count: int) -> list[Path]:
    """``count`` live requests of the triage agent, each written as ``folder/request-NN.json``."""
    paths = []
    for n in range(count):
        server.reply_with(
            chat_text(f"Notes for ticket {n}: see the articles."),
            chat_text(f"Hello, here is what to do about ticket {n}."),
        )
        with capture() as sent:
            with chronicle.record(f"triage-{n}", labels={"suite": "corpus"}):
                triage_agent.triage(**request(n))
        path = folder / f"request-{n:02d}.json"
        Incident.of(sent.envelopes).write(path)
        paths.append(path)
    return paths


# ---- the entry is recorded --------------------------------------------------------------------


def test_the_outermost_boundary_records_its_import_path_and_nested_ones_do_not(agent, tmp_path):
    (path,) = record_corpus(agent, tmp_path, 1)
    envelopes = json.loads(path.read_text(encoding="utf-8"))["envelopes"]
    tree = [(e["name"], e.get("parent_envelope_id") is None) for e in envelopes]
    assert tree == [
        ("triage", True),
        ("research", False),
        ("search_kb", False),
        (LLM, False),
        (LLM, False),
    ]
    entries = {e["name"]: e["metadata"].get(wire.ENTRY) for e in envelopes}
    assert entries == {"triage": ENTRY, "research": None, "search_kb": None, LLM: None}
    assert envelopes[0]["input"]["raw"] == request(0)


def test_a_boundary_called_at_the_top_level_of_a_span_is_an_entry_too(tmp_path):
    with capture() as sent:
        with chronicle.record("search only"):
            triage_agent.search_kb("refund my order")
    (envelope,) = sent.envelopes
    assert envelope.metadata[wire.ENTRY] == "examples.triage_agent:search_kb"
