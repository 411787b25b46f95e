"""A secret a model streams across several deltas leaves the process in no form.

The assembled output of a stream is redacted as a whole; what is kept of the stream's chunks for
replay must not let the secret be put back together (joining the deltas), and the recording must
still replay as a stream, equal to the redacted output.
"""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic
from openai.types.chat import ChatCompletion

import chronicle
from chronicle.llm.openai_streams import ChatStreamAssembler
from chronicle.recording.stream import StreamCapture, StreamFormat
from chronicle.redaction import Redaction
from chronicle.wire import CHUNKS_REBUILT
from tests.support.llm_server import (
    chat_text,
    messages_tool_use,
    responses_text,
    streamed,
    tool_call,
)

CHAT = "openai.chat.completions.create"
USER: list[Any] = [{"role": "user", "content": "Which key do I use?"}]
KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789"
REPLY = f"Use {KEY} for the staging project."
MASKED = "Use [REDACTED:openai_key] for the staging project."
PASSWORD = "correct-horse-battery-staple"


def anthropic_stream(claude: anthropic.Anthropic) -> tuple[str, Any]:
    """The text and final message of one ``messages.stream()`` call."""
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=USER) as stream:
        text = "".join(stream.text_stream)
        return text, stream.get_final_message()


def chat_text_of(chunks: list[Any]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_a_key_split_across_chat_deltas_is_recoverable_from_nothing_stored(
    oai, llm_server, recording
):
    llm_server.reply_with(streamed(chat_text(REPLY), deltas=12))
    with chronicle.record("chat-secret") as session:
        chunks = list(oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True))
    live = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert live == REPLY  # the caller gets the real text
    assert max(len(c.choices[0].delta.content or "") for c in chunks if c.choices) < len(KEY)

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["content"] == [{"type": "text", "text": MASKED}]
    metadata = envelope["metadata"]
    stored = metadata.get("chronicle.chunks") or []
    assert KEY not in chat_text_of(stored)
    assert KEY not in json.dumps(envelope)  # nowhere else either
    assert metadata[CHUNKS_REBUILT] is True  # the live chunks were not kept as they came
    assert metadata["chronicle.chunk_count"] == len(chunks)

    before = llm_server.request_count
    with chronicle.replay_trace(session.trace_id, session.span_id) as run:
        again = list(oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True))
    assert llm_server.request_count == before
    assert "".join(c.choices[0].delta.content or "" for c in again if c.choices) == MASKED
    completion = run.captured_result(CHAT, 1)
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == MASKED


def test_a_key_and_a_credential_split_across_anthropic_deltas_stay_masked(
    claude, llm_server, recording
):
    arguments = {"user": "ann", "password": PASSWORD}
    llm_server.reply_with(
        streamed(messages_tool_use(tool_call("login", arguments), text=REPLY), deltas=10)
    )
    with chronicle.record("anthropic-secret") as session:
        text, final = anthropic_stream(claude)
    assert text == REPLY
    assert final.content[1].input == arguments

    (envelope,) = recording.saved(session.trace_id, 1)
    output = envelope["output"]
    assert output["content"][0] == {"type": "text", "text": MASKED}
    assert output["content"][1]["arguments"] == {"user": "ann", "password": "[REDACTED:credential]"}
    metadata = envelope["metadata"]
    deltas = [
        event["delta"] for event in metadata.get("chronicle.chunks") or [] if "delta" in event
    ]
    joined = "".join(d.get("text") or d.get("partial_json") or "" for d in deltas)
    assert KEY not in joined
    assert PASSWORD not in joined
    assert KEY not in json.dumps(envelope)
    assert PASSWORD not in json.dumps(envelope)
    assert metadata[CHUNKS_REBUILT] is True

    with chronicle.replay_trace(session.trace_id, session.span_id):
        text_again, final_again = anthropic_stream(claude)
    assert text_again == MASKED
    assert final_again.content[1].input == {"user": "ann", "password": "[REDACTED:credential]"}


def test_a_key_in_responses_events_is_stored_in_no_event(oai, llm_server, recording):
    # Responses events carry the text in deltas and again whole (output_text.done, completed).
    llm_server.reply_with(streamed(responses_text(REPLY), deltas=12))
    with chronicle.record("responses-secret") as session:
        events = list(oai.responses.create(model="gpt-4o-mini", input="Key?", stream=True))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == REPLY

    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["output"]["content"] == [{"type": "text", "text": MASKED}]
    assert envelope["metadata"][CHUNKS_REBUILT] is True
    assert "chronicle.chunks" not in envelope["metadata"]
    assert KEY not in json.dumps(envelope)

    with chronicle.replay_trace(session.trace_id, session.span_id):
        again = list(oai.responses.create(model="gpt-4o-mini", input="Key?", stream=True))
    assert "".join(e.delta for e in again if e.type == "response.output_text.delta") == MASKED


def test_a_stream_with_nothing_masked_keeps_its_chunks_as_they_came(oai, llm_server, recording):
    llm_server.reply_with(streamed(chat_text("Use the staging key from the vault."), deltas=6))
    with chronicle.record("chat-clean") as session:
        chunks = list(oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True))

    (envelope,) = recording.saved(session.trace_id, 1)
    metadata = envelope["metadata"]
    assert CHUNKS_REBUILT not in metadata
    assert len(metadata["chronicle.chunks"]) == len(chunks)
    assert chat_text_of(metadata["chronicle.chunks"]) == "Use the staging key from the vault."


def test_a_stream_stopped_early_mid_key_keeps_no_piece_of_it(oai, llm_server, recording):
    llm_server.reply_with(streamed(chat_text(REPLY + " " + REPLY), deltas=24))
    with chronicle.record("chat-secret-early") as session:
        stream = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        received = ""
        for chunk in stream:
            received += chunk.choices[0].delta.content or "" if chunk.choices else ""
            if KEY in received:
                break
        stream.close()

    (envelope,) = recording.saved(session.trace_id, 1)
    metadata = envelope["metadata"]
    assert metadata["chronicle.incomplete"] is True
    assert KEY not in chat_text_of(metadata.get("chronicle.chunks") or [])
    assert KEY not in json.dumps(envelope)
    assert "[REDACTED:openai_key]" in envelope["output"]["content"][0]["text"]


def with_logprobs(reply: Any, text: str) -> Any:
    """``reply`` (a chat completion) with its text's token list, a few characters a token."""
    tokens = [text[i : i + 3] for i in range(0, len(text), 3)]
    choice = reply.body["choices"][0]
    choice["logprobs"] = {
        "content": [
            {"token": t, "logprob": -0.1, "bytes": list(t.encode()), "top_logprobs": []}
            for t in tokens
        ],
        "refusal": None,
    }
    return reply


def test_a_key_spelled_token_by_token_in_logprobs_is_stored_nowhere(oai, llm_server, recording):
    # Each token is too short for any secret shape: only the masked text shows it was a secret.
    llm_server.reply_with(with_logprobs(chat_text(REPLY), REPLY))
    with chronicle.record("logprobs-secret") as session:
        live = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, logprobs=True)
    assert live.choices[0].logprobs is not None  # the caller gets them
    assert "".join(t.token for t in live.choices[0].logprobs.content or []) == REPLY

    (envelope,) = recording.saved(session.trace_id, 1)
    assert KEY[3:9] not in json.dumps(envelope)  # not even the key's pieces
    assert envelope["output"]["raw"]["choices"][0]["logprobs"] is None
    assert envelope["output"]["content"] == [{"type": "text", "text": MASKED}]

    with chronicle.replay_trace(session.trace_id, session.span_id):
        again = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, logprobs=True)
    assert again.choices[0].message.content == MASKED
    assert again.choices[0].logprobs is None


def test_token_lists_are_kept_when_nothing_was_masked(oai, llm_server, recording):
    text = "It is sunny in Paris today."
    llm_server.reply_with(with_logprobs(chat_text(text), text))
    with chronicle.record("logprobs-clean") as session:
        oai.chat.completions.create(model="gpt-4o-mini", messages=USER, logprobs=True)
    (envelope,) = recording.saved(session.trace_id, 1)
    kept = envelope["output"]["raw"]["choices"][0]["logprobs"]["content"]
    assert "".join(entry["token"] for entry in kept) == text


def _chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return {**head, "choices": [choice], **extra}


def _stored(chunks: list[Any]) -> Any:
    """What the end of a stream of these chat chunks stores of them (``stored_items``)."""
    fmt = StreamFormat(
        hand_off=lambda result, call: None,
        assembler=ChatStreamAssembler,
        replay=iter,
        keeps_items=True,
        item_json=lambda chunk: cast(Any, chunk),  # the chunks are JSON already
    )
    capture = StreamCapture(fmt, 1 << 20)
    for chunk in chunks:
        capture.add(chunk)
    redaction = Redaction.default()
    return capture.stored_items(capture.output(redaction), redaction)


def test_chunks_are_stored_redacted_where_one_holds_a_secret_the_output_does_not():
    opening = _chunk({"role": "assistant", "content": ""})
    noted = _chunk({"content": "Hello"}, x_note=f"key {KEY}")
    keyed = _chunk({"content": " there"}, x_api_key=PASSWORD)
    clean = [opening, _chunk({"content": "Hello"}), _chunk({"content": " there"})]

    shared, chunks = _stored([opening, noted, keyed])
    assert KEY not in json.dumps(chunks) and PASSWORD not in json.dumps(chunks)
    assert chunks[1]["x_note"] == "key [REDACTED:openai_key]"
    assert chunks[2]["x_api_key"] != PASSWORD
    assert shared == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
    }
    assert [c["choices"] for c in chunks] == [c["choices"] for c in clean]
    assert _stored(clean) == (shared, [{"choices": c["choices"]} for c in clean])

    # The same key spelled across two chunks in that field: no chunk is stored at all.
    split = [_chunk({"content": "a"}, x_note=KEY[:20]), _chunk({"content": "b"}, x_note=KEY[20:])]
    assert _stored([opening, *split]) is None
