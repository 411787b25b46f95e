"""Secrets inside serialized or encoded text leave the process in no form (issue 24, items 1-3).

What users run: an OpenAI tool call whose JSON-text arguments hold a password, a tool result
passed back as ``json.dumps(result)`` in a ``role: tool`` message, URLs with credential query
parameters, names built at run time, streams. Each is recorded through the real SDK client against
the local model server, saved to the real control plane and read back, and exported through an
``InMemorySpanExporter``: the secret is in neither.

The widened matching (after escapes, URL-encoded, glued to a word, a cut tail) is measured on a
corpus of ordinary text (``ORDINARY``): its false-positive rate is 1 of 60 texts (1.7 %, see
the test).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from chronicle.integrations.httpx import instrument_httpx, uninstrument_httpx
from chronicle.redaction import redact_secrets
from chronicle.testing import LocalControlPlane
from chronicle.wire import CHUNKS_REBUILT
from tests.support.llm_server import chat_text, chat_tool_calls, streamed, tool_call

PASSWORD = "correct-horse-battery-staple"
KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789"
GITHUB = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"  # 36 characters after the prefix
USER: list[Any] = [{"role": "user", "content": "Log me in as ann."}]

# The secret kinds of the check, one value each.
SECRETS = {
    "openai_key": KEY,
    "anthropic_key": "sk-ant-api03-" + "Zx9Yw8Vu7T" * 4,
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": GITHUB,
    "slack_token": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "bearer": "Bearer abcDEF123456ghiJKL789",
}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def setup(control_plane: Any, exporter: InMemorySpanExporter, **settings: Any) -> None:
    """Configure Chronicle saving to the control plane and exporting through ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    chronicle.configure(
        control_plane_url=control_plane.url,
        flush_interval=0.05,
        tracer_provider=provider,
        **settings,
    )


@pytest.fixture
def traced(control_plane: Any, exporter: InMemorySpanExporter) -> Iterator[Any]:
    """Chronicle saving to the control plane and exporting through ``exporter``."""
    setup(control_plane, exporter)
    try:
        yield control_plane
    finally:
        chronicle.reset()


def saved(control_plane: LocalControlPlane, trace_id: str, count: int) -> list[dict[str, Any]]:
    assert chronicle.flush(10)
    return control_plane.wait_for_envelopes(trace_id, count)


def exported(exporter: InMemorySpanExporter) -> str:
    """Everything the exporter got: span names, attributes and events, as one text."""
    parts = []
    for span in exporter.get_finished_spans():
        parts.append(span.name)
        parts.append(json.dumps(dict(span.attributes or {})))
        parts.extend(json.dumps(dict(event.attributes or {})) for event in span.events)
    return "\n".join(parts)


# ---- item 1: tool-call arguments and tool results as JSON text ---------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_password_in_tool_call_arguments_and_in_a_tool_result_text_is_stored_nowhere(
    oai, llm_server, traced, exporter, stream
):
    arguments = {"user": "ann", "password": PASSWORD}
    reply = chat_tool_calls(tool_call("login", arguments, id="call_1"))
    llm_server.reply_with(streamed(reply, deltas=9) if stream else reply, chat_text("Done."))
    # What the tool gave back, passed to the model as text: a key after a newline too.
    result = {"status": "ok", "api_key": SECRETS["anthropic_key"], "note": f"keys:\n{KEY}"}
    with chronicle.record("login") as session:
        first = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=stream)
        if stream:
            calls = [c.choices[0].delta.tool_calls for c in first if c.choices]
            live = "".join(d[0].function.arguments or "" for d in calls if d)
        else:
            live = first.choices[0].message.tool_calls[0].function.arguments
        assert json.loads(live) == arguments  # the caller gets the real arguments
        messages = [
            *USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "login", "arguments": live},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(result)},
        ]
        oai.chat.completions.create(model="gpt-4o-mini", messages=messages)

    envelopes = saved(traced, session.trace_id, 2)
    stored = json.dumps(envelopes) + exported(exporter)
    for secret in (PASSWORD, KEY, SECRETS["anthropic_key"]):
        assert secret not in stored
    (block,) = envelopes[0]["output"]["content"]
    assert block["arguments"] == {"user": "ann", "password": "[REDACTED:credential]"}
    if stream:
        assert envelopes[0]["metadata"][CHUNKS_REBUILT] is True
    sent = envelopes[1]["input"]["messages"]
    assistant = json.dumps(sent[1])
    assert PASSWORD not in assistant and "[REDACTED:credential]" in assistant
    tool = json.dumps(sent[2])
    assert "[REDACTED:credential]" in tool and "[REDACTED:openai_key]" in tool
    assert "ann" in assistant and '\\"status\\": \\"ok\\"' in tool  # the rest is kept


# ---- item 2: escapes, URL encoding, glued words ------------------------------------------------


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_secret_after_an_escape_in_json_text_is_masked(kind):
    # A tool result passed as json.dumps(result): the newline before the secret becomes "\n".
    text = json.dumps({"output": f"here it is:\n{SECRETS[kind]}\nbye"})
    masked = redact_secrets(text)
    assert SECRETS[kind].split()[-1] not in masked
    assert f"[REDACTED:{kind}]" in masked
    json.loads(masked)  # still JSON


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_url_encoded_secret_is_masked(kind):
    from urllib.parse import quote

    text = "https://hooks.example.com/relay?next=" + quote(f"https://x.io/?k={SECRETS[kind]}")
    masked = redact_secrets(text)
    assert quote(SECRETS[kind].split()[-1], safe="") not in masked
    assert SECRETS[kind].split()[-1] not in masked
    assert f"[REDACTED:{kind}]" in masked
    # A URL password, encoded whole.
    assert (
        redact_secrets("u=https%3A%2F%2Fann%3Ahunter2hunter2%40db.example.com").count("hunter2")
        == 0
    )


@pytest.mark.parametrize(
    ("glued", "kind"),
    [
        ("xAKIAIOSFODNN7EXAMPLE", "aws_access_key"),
        (f"token{GITHUB}", "github_token"),
        ("idxoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", "slack_token"),
        ("keysk-ant-api03-" + "Zx9Yw8Vu7T" * 4, "anthropic_key"),
        ("keysk-proj-Ab12T3BlbkFJcd34EfGhIjKlMnOp", "openai_key"),
    ],
)
def test_a_secret_glued_to_a_word_is_masked_where_its_shape_is_unambiguous(glued, kind):
    assert redact_secrets(f"value: {glued} end").count(f"[REDACTED:{kind}]") == 1


def test_a_text_cut_inside_a_key_keeps_none_of_it():
    # A stream stopped 16 characters into a key (too short for the whole shape).
    for cut in (KEY[:16], SECRETS["anthropic_key"][:16], GITHUB[:16], "AKIAIOSFODNN"):
        masked = redact_secrets(f"Use {cut}")
        assert cut[4:] not in masked, cut


# Ordinary text, none of it a secret: prose, code, JSON, URLs, hashes, UUIDs, encoded text.
ORDINARY = [
    "The task-list is in the disk-proj-management folder; ask-ant-colony people about it.",
    "Use scikit-learn (sk-learn) for the baseline and report the risk-adjusted return.",
    "Bearer instruments were sold at auction. Basic understanding is required.",
    "The AKIA prefix marks AWS access keys; ASIA marks temporary ones.",
    "def get_token(self) -> str:\n    return self._token_cache.get('key')",
    "for (const key of Object.keys(obj)) { console.log(key, obj[key]); }",
    "SELECT password_hash, api_key_id FROM users WHERE id = 42;",
    '{"key": "value", "token": "the", "tokens": 12, "max_tokens": 256}',
    '{"keyboard": "qwerty", "monkey": "banana", "turkey": "roast"}',
    '{"password_policy": {"min_length": 12}, "secret_santa": true}',
    '{"author": "Ann", "title": "On keys", "body": "A key opens a lock.\\nTwo keys."}',
    json.dumps({"messages": [{"role": "user", "content": "What?\nWhy?"}], "n": 2}),
    json.dumps({"url": "https://example.com/search?q=keys&page=2&sort=desc"}),
    "https://example.com/search?q=password+reset&lang=en",
    "https://docs.python.org/3/library/urllib.parse.html#urllib.parse.quote",
    "https://www.google.com/maps/place/Paris?hl=en&entry=ttu&g_ep=EgoyMDI0",
    "https://cdn.example.com/img/a%20b%20c.png?w=640&h=480&fit=crop",
    "https://example.com/api/v1/items?sort=created_at&order=desc&limit=50&offset=100",
    "https://example.com/login?next=%2Fdashboard%3Ftab%3Dkeys&lang=fr",
    "mailto:ann@example.com?subject=Hello%20there&body=Key%20points",
    "git@github.com:openai/openai-python.git",
    "postgres://db.example.com:5432/app?sslmode=require",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "d41d8cd98f00b204e9800998ecf8427e",
    "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "123e4567-e89b-12d3-a456-426614174000",
    "f47ac10b-58cc-4372-a567-0e02b2c3d479 and 6fa459ea-ee8a-3ca4-894e-db77e160355e",
    "4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7",
    "call_abc123XYZ456 toolu_01A09q90qw90lq917835lq9 msg_01XFDUDYJgAACzvnptvVoYEL",
    "chatcmpl-9aBcDeFgHiJkLmNoPqRsTuVwXyZ resp_67ccd2bed1ec8190b14f964abc054267",
    "ord_8f2a1c SKU-0001 INV-2024-000123 PO#4471",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Per cent: 50% off, 100%, 3%D is not an escape, %zz neither.",
    "Form data: name=Ann%20Lee&city=Paris&note=ask%20about%20keys",
    "C:\\Users\\ann\\Documents\\notes.txt and \\\\server\\share",
    'print("line one\\nline two\\tand a tab")',
    "regex: ^[A-Za-z0-9_-]{20,}$ and (?<=sk-)",
    "EXAMPLEAKIA is not a key, nor is AKIATOOSHORT, nor AKIAlowercaseletters12",
    "ghp_ is GitHub's prefix; gho_ too. xoxb- is Slack's.",
    "eyJ starts every JWT header; eyJhbG alone is nothing.",
    "SecretAccessKey is a field name; secret_access_key=<your key here>",
    "aws configure set aws_secret_access_key",
    "Authorization: see the docs. Cookie banner accepted.",
    "KEY_PREFIX = 'cfg'; TOKEN_TTL = 3600; SECRET_NAME = 'db-creds'",
    "?api_version=2024-02-01&deployment=gpt-4o",
    "the ?key=value syntax, with key left empty: ?token=&code=",
    "base64: SGVsbG8gd29ybGQhIFRoaXMgaXMgYSB0ZXN0Lg==",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    "Version 1.2.3-beta+exp.sha.5114f85, build 20240101T000000Z",
    "IPv6 2001:0db8:85a3:0000:0000:8a2e:0370:7334 and 192.168.0.1:8080",
    "Time 2024-05-09T07:35:25.123456+00:00, duration PT1H30M",
    "Émile a dit : « bonjour » — 東京は晴れ。",
    "JSON in JSON: " + json.dumps(json.dumps({"user": "ann", "role": "admin"})),
    json.dumps({"tool": "search", "arguments": json.dumps({"query": "best keys for pianos"})}),
    "x" * 300,
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 2,
    "0123456789abcdef" * 8,
    "ERROR 2024-01-01 worker-3 task=refund-7781 status=failed retry=2",
    '<a href="https://example.com/?ref=nav&utm_source=mail">keys</a>',
    "sk-8 is a model number; sk-learn again; risk-averse sk-",
]


def test_the_widened_matching_has_no_false_positive_on_ordinary_text():
    changed = [text for text in ORDINARY if redact_secrets(text) != text]
    rate = len(changed) / len(ORDINARY)
    assert len(ORDINARY) == 60
    # False-positive rate: 1 of 60 texts (1.7 %). The one is prose quoting a query string:
    # "?key=value" has the parameter name Google's API keys travel under, masked by rule.
    assert changed == ["the ?key=value syntax, with key left empty: ?token=&code="]
    assert rate == pytest.approx(1 / 60)


# ---- item 3: URLs, run-time names, streams -----------------------------------------------------


def test_credential_query_parameters_are_masked_in_httpx_requests_and_url_arguments(
    llm_server, traced, exporter
):
    url = f"{llm_server.openai_base_url}/models?api_key=abc123secret&token=t0ken99&limit=5"

    @chronicle.boundary("fetch", kind="tool")
    def fetch(target: str) -> str:
        with httpx.Client() as client:
            client.get(target)
        return target

    setup(traced, exporter, inject_hosts=["127.0.0.1"])  # the requests it records
    instrument_httpx()
    try:
        with chronicle.record("urls") as session:
            assert fetch(url) == url  # the caller gets the real URL
    finally:
        uninstrument_httpx()
    envelopes = saved(traced, session.trace_id, 2)
    stored = json.dumps(envelopes) + exported(exporter)
    assert "abc123secret" not in stored and "t0ken99" not in stored
    by_name = {e["name"]: e for e in envelopes}
    assert by_name["fetch"]["input"]["raw"]["target"].endswith(
        "/models?api_key=[REDACTED:credential]&token=[REDACTED:credential]&limit=5"
    )
    (http,) = [e for e in envelopes if e["name"] != "fetch"]
    assert "api_key=[REDACTED:credential]" in http["input"]["raw"]["url"]


def test_a_boundary_name_built_at_run_time_is_redacted(traced, exporter):
    def lookup(order: str) -> str:
        return order

    tool = chronicle.boundary(f"lookup with {KEY}", kind="tool")(lookup)
    with chronicle.record("names") as session:
        tool("o-1")
    (envelope,) = saved(traced, session.trace_id, 1)
    assert envelope["name"] == "lookup with [REDACTED:openai_key]"
    assert KEY not in json.dumps(envelope) + exported(exporter)


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def audio_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-audio-preview",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_a_key_split_across_an_unknown_delta_field_is_not_stored_in_pieces(traced, exporter):
    # ``delta.audio.transcript`` is not folded into the output: its chunks carry the key in
    # pieces no single redaction sees whole.
    pieces = [KEY[i : i + 6] for i in range(0, len(KEY), 6)]
    body = sse(
        audio_chunk({"role": "assistant", "content": None}),
        *(audio_chunk({"audio": {"id": "audio_1", "transcript": p}}) for p in pieces),
        audio_chunk({}, finish="stop"),
    )

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = openai.OpenAI(
        base_url="http://model.test/v1",
        api_key="test",
        max_retries=0,
        # openai types its client against its own httpx fork; httpx's Client serves it the same
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),  # type: ignore[arg-type]
    )
    wrapped = chronicle.wrap(client)
    with chronicle.record("audio") as session:
        chunks = list(wrapped.chat.completions.create(model="m", messages=USER, stream=True))
    assert len(chunks) == len(pieces) + 2
    (envelope,) = saved(traced, session.trace_id, 1)
    stored = json.dumps(envelope) + exported(exporter)
    assert "".join(pieces[1:4]) not in stored.replace('", "', "")
    transcript = "".join(
        (c["choices"][0]["delta"].get("audio") or {}).get("transcript", "")
        for c in envelope["metadata"].get("chronicle.chunks") or []
        if c.get("choices")
    )
    assert KEY not in transcript
    assert envelope["metadata"][CHUNKS_REBUILT] is True


def test_a_stream_cut_sixteen_characters_into_a_key_stores_none_of_them(
    oai, llm_server, traced, exporter
):
    text = f"Your key is {KEY} and keep it safe."
    llm_server.reply_with(streamed(chat_text(text), deltas=len(text)))
    with chronicle.record("cut") as session:
        stream = oai.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
        received = ""
        for chunk in stream:
            received += chunk.choices[0].delta.content or "" if chunk.choices else ""
            if received.endswith(KEY[:16]):
                break
        stream.close()
    (envelope,) = saved(traced, session.trace_id, 1)
    stored = json.dumps(envelope) + exported(exporter)
    assert KEY[8:16] not in stored
    assert envelope["output"]["content"] == [
        {"type": "text", "text": "Your key is [REDACTED:openai_key]"}
    ]
