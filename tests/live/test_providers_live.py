"""One real call per provider, recorded and replayed offline (see ``conftest.py``: opt-in)."""

from __future__ import annotations

import os
from typing import Any

import chronicle
from chronicle.testing.network import block_network
from tests.live.conftest import live_key

OPENAI_MODEL = os.environ.get("CHRONICLE_LIVE_OPENAI_MODEL", "gpt-4.1-mini")
ANTHROPIC_MODEL = os.environ.get("CHRONICLE_LIVE_ANTHROPIC_MODEL", "claude-3-5-haiku-latest")
PROMPT = "Reply with the single word: ready"


def record_then_replay(recording: Any, call: Any) -> None:
    """Record ``call()`` in a request span, then replay the saved span with no network."""
    with chronicle.record("live") as session:
        live = call()
    [envelope] = recording.saved(session.trace_id, 1)
    assert envelope["kind"] == "llm" and envelope["envelope_status"]["status"] == "success"
    with block_network(), chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        replayed = call()
    assert type(replayed) is type(live)
    assert replayed.model_dump(mode="json") == live.model_dump(mode="json")


def test_openai_chat_records_and_replays_offline(recording):
    import openai  # the dev extra installs it

    client = chronicle.wrap(openai.OpenAI(api_key=live_key("OPENAI_API_KEY")))
    try:
        record_then_replay(
            recording,
            lambda: client.chat.completions.create(
                model=OPENAI_MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=5
            ),
        )
    finally:
        client.close()


def test_anthropic_messages_records_and_replays_offline(recording):
    import anthropic  # the dev extra installs it

    client = chronicle.wrap(anthropic.Anthropic(api_key=live_key("ANTHROPIC_API_KEY")))
    try:
        record_then_replay(
            recording,
            lambda: client.messages.create(
                model=ANTHROPIC_MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=5
            ),
        )
    finally:
        client.close()
