"""A support triage agent with a research sub-agent: the agent a corpus replay calls again.

``triage(ticket, customer_tier)`` is the request's entry, the outermost boundary: it asks the
``research`` sub-agent (itself a boundary, which searches the knowledge base with the
``search_kb`` tool and has the model summarise what it found), then asks the model for the reply
to send, and decides the priority in plain code. Every recording of it keeps ``triage``'s import
path and its input, so a whole folder of recorded requests replays against new code with::

    chronicle replay tests/incidents --entry examples.triage_agent:triage

The model is a real ``openai.OpenAI`` client, wrapped; ``TRIAGE_LLM_URL`` names the
OpenAI-compatible server it talks to (the test suite's local model server, say). During a replay
it is never called: its answers come from the recording.
"""

from __future__ import annotations

import os
from typing import Any

import openai

import chronicle

MODEL = "gpt-4o-mini"
KNOWLEDGE_BASE = {
    "kb-1": "Password resets: send the reset link from the account page; it expires in 1 hour.",
    "kb-2": "Outages: check the status page, then page the on-call engineer for enterprise.",
    "kb-3": "Refunds: orders under 30 days are refunded in full to the original card.",
    "kb-4": "Invoices: invoices are issued in the customer's billing currency on the 1st.",
}

client = chronicle.wrap(
    openai.OpenAI(
        base_url=os.environ.get("TRIAGE_LLM_URL", "http://127.0.0.1:9/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "local"),
        max_retries=0,
    )
)


@chronicle.boundary("search_kb", kind="tool")
def search_kb(query: str, limit: int = 2) -> list[dict[str, str]]:
    """The knowledge-base articles sharing the most words with ``query``, best first."""
    words = {word.strip(".,?!").lower() for word in query.split()}
    scored = sorted(
        (
            (len(words & {w.strip(".,:;").lower() for w in text.split()}), key, text)
            for key, text in KNOWLEDGE_BASE.items()
        ),
        key=lambda found: (-found[0], found[1]),
    )
    return [{"id": key, "text": text} for score, key, text in scored[:limit] if score]


@chronicle.boundary("research")
def research(question: str) -> dict[str, Any]:
    """The sub-agent: find the articles, have the model turn them into notes."""
    hits = search_kb(question)
    articles = "\n".join(f"[{hit['id']}] {hit['text']}" for hit in hits) or "(none found)"
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Summarise what the articles say about the question."},
            {"role": "user", "content": f"Question: {question}\nArticles:\n{articles}"},
        ],
    )
    return {"sources": [hit["id"] for hit in hits], "notes": answer.choices[0].message.content}


@chronicle.boundary("triage")
def triage(ticket: str, customer_tier: str = "standard") -> dict[str, Any]:
    """The entry: research the ticket, draft the reply, set the priority."""
    found = research(ticket)
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": f"You answer {customer_tier} customers' tickets."},
            {"role": "user", "content": ticket},
            {"role": "assistant", "content": f"Notes: {found['notes']}"},
        ],
    )
    urgent = customer_tier == "enterprise" or "outage" in ticket.lower()
    return {
        "priority": "high" if urgent else "normal",
        "reply": reply.choices[0].message.content,
        "sources": list(found["sources"]),
    }
