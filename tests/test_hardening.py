"""Hardening from an adversarial run: what is recorded, what may leave, what may break a call.

One test (or a few) per finding of issue 12, each against the real control plane or a small
misbehaving local server (``tests/support/misbehaving.py``). The numbers are the issue's items;
delivery's items (batches, signals, fork, timeouts, fairness) are in
``test_hardening_delivery.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import chronicle
from chronicle import runtime
from chronicle.integrations.httpx import instrument_httpx, uninstrument_httpx
from chronicle.save.client import HttpControlPlane
from chronicle.testing import LocalControlPlane, capture
from tests.support.llm_server import chat_text
from tests.support.misbehaving import (
    Answer,
    Request,
    ScriptedServer,
    html_page,
    invalid_json,
    redirect_to,
)

# Fake credentials shaped like the real ones: seven kinds the default redactor knows.
OPENAI = "sk-proj-" + "Ab_3dE5-gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ7kL9mN1pQ3sT5"
ANTHROPIC = "sk-ant-api03-" + "Qw3eR5tY7uI9oP1aS3dF5gH7jK9lZ1xC3vB5nM7-Qw3eR5tY7uI9oP1aS3dF5gH7AA"
AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
URL_PASSWORD = "hunter2-correct-horse-battery"
DSN = f"postgres://admin:{URL_PASSWORD}@db.internal:5432/app"
SECRETS = (OPENAI, ANTHROPIC, AWS, GITHUB, SLACK, JWT, DSN)
# What must not survive of each: a distinctive piece that no mask contains.
SECRET_PIECES = (
    OPENAI[8:24],
    ANTHROPIC[13:29],
    AWS,
    GITHUB[4:20],
    SLACK[5:20],
    JWT[:20],
    "hunter2",
)


def compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def leaked(text: str) -> list[str]:
    return [piece for piece in SECRET_PIECES if piece in text]


@pytest.fixture
def user_exporter() -> Iterator[InMemorySpanExporter]:
    """A TracerProvider of the user's own with an in-memory exporter (another backend)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    provider.shutdown()


def exported_text(exporter: InMemorySpanExporter) -> str:
    """Everything the user's exporter received, as one text: names, attributes, events."""
    parts: list[str] = []
    for span in exporter.get_finished_spans():
        parts.append(span.name)
        parts.append(json.dumps(dict(span.attributes or {}), default=str))
        if span.status.description:
            parts.append(span.status.description)
        for event in span.events:
            parts.append(event.name)
            parts.append(json.dumps(dict(event.attributes or {}), default=str))
    return "\n".join(parts)


def provider_of(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


# ---- 1. one unencodable value loses nothing ---------------------------------------------------


@chronicle.boundary("echo", kind="tool")
def echo(text: str) -> str:
    return text


def test_1_a_lone_surrogate_is_recorded_flagged_and_costs_no_other_envelope(recording):
    with chronicle.record("surrogates") as run:
        for i in range(201):
            echo(f"call {i}" if i != 100 else "cut emoji \ud83d")
    saved = recording.saved(run.trace_id, 201)
    assert len(saved) == 201
    (odd,) = [e for e in saved if e["input"]["raw"]["text"].startswith("cut emoji")]
    assert odd["input"]["raw"]["text"] == "cut emoji \\ud83d"
    assert odd["metadata"]["chronicle.lossy_input"] is True


def test_1_a_surrogate_in_a_label_never_raises_into_the_agent(recording):
    with chronicle.record("label", labels={"session_id": "s-\udcff"}) as run:
        echo("hi")
    recording.saved(run.trace_id, 1)
    labels = recording.control_plane.trace(run.trace_id)["metadata"]
    assert labels["session_id"] == "s-\\udcff"
    assert labels["chronicle.lossy"] == "true"


def test_1_a_surrogate_in_an_exception_message_is_still_a_recorded_failure(recording):
    @chronicle.boundary("read_file", kind="tool")
    def read_file(path: str) -> str:
        raise FileNotFoundError(f"no such file: {path}")

    with chronicle.record("failure") as run:
        with pytest.raises(FileNotFoundError):
            read_file("/tmp/caf\udce9")
    (saved,) = recording.saved(run.trace_id, 1)
    assert saved["envelope_status"]["status"] == "failure"
    assert saved["output"]["error"]["message"] == "no such file: /tmp/caf\\udce9"
    with chronicle.replay_trace(run.trace_id, run.span_id):
        with pytest.raises(FileNotFoundError, match="no such file") as replayed:
            read_file("/tmp/caf\udce9")
    assert isinstance(replayed.value.__cause__, chronicle.RecordedCallError)


def test_1_a_record_hook_that_corrupts_its_envelope_costs_nothing(recording):
    def corrupt(call: chronicle.CallInfo, envelope: Any) -> None:
        envelope.metadata["note"] = object()  # not JSON
        envelope.input.raw["text"] = "\ud800"

    chronicle.default_hooks.register(chronicle.FunctionHook(record=corrupt))
    with chronicle.record("corrupting hook") as run:
        for i in range(150):
            echo(f"call {i}")
    saved = recording.saved(run.trace_id, 150)
    assert sorted(e["input"]["raw"]["text"] for e in saved) == sorted(
        f"call {i}" for i in range(150)
    )
    assert all("note" not in e["metadata"] for e in saved)


# ---- 4. every recorded value has a bound ------------------------------------------------------


def test_4_every_recorded_value_is_bounded_flagged_and_accepted(control_plane):
    chronicle.configure(control_plane_url=control_plane.url, max_payload_bytes=1000)

    @chronicle.boundary("ingest", kind="tool")
    def ingest(**values: object) -> str:
        return "ok"

    @chronicle.boundary("note", kind="tool", extract_metadata=lambda _: {"note": "m" * 50_000})
    def note() -> str:
        return "ok"

    with chronicle.record(
        "n" * 5000, labels={"session_id": "s" * 100_000}, metadata={"blob": "b" * 100_000}
    ) as run:
        ingest(data=b"\x00" * 1_000_000)
        ingest(amount=Decimal("1" * 10_000))
        ingest(**{"k" * 5000: 1})
        ingest(numbers=list(range(1_000_000)))
        ingest(big=10**5000)
        note()
    assert chronicle.flush(20)  # nothing rejected by the server
    saved = control_plane.wait_for_envelopes(run.trace_id, 6)
    for envelope in saved:
        assert len(compact(envelope["input"]["raw"])) < 1300
        assert len(compact(envelope["metadata"])) < 1300
    cut = [e for e in saved if e["metadata"].get("chronicle.truncated")]
    assert len(cut) == 5  # all but the huge int, which cannot be cut
    (big,) = [e for e in saved if "big" in e["input"]["raw"]]
    assert big["input"]["raw"]["big"] == {"$repr": "<int of about 5001 digits>"}
    assert big["metadata"]["chronicle.lossy_input"] is True
    trace = control_plane.trace(run.trace_id)
    assert len(trace["metadata"]["session_id"]) < 1100
    assert trace["metadata"]["chronicle.truncated"] == "true"
    assert len(trace["name"]) < 1100
    (span,) = trace["spans"]
    assert len(compact(span["metadata"])) < 1300
    assert span["metadata"]["chronicle.truncated"] is True


# ---- 5. everything Chronicle sends or sets is redacted ----------------------------------------


def test_5_labels_metadata_extract_metadata_and_trace_names_are_redacted(
    control_plane, user_exporter
):
    chronicle.configure(
        control_plane_url=control_plane.url,
        tracer_provider=provider_of(user_exporter),
        flush_interval=0.05,
    )
    joined = " ".join(SECRETS)

    @chronicle.boundary("lookup", kind="tool", extract_metadata=lambda _: {"note": joined})
    def lookup(query: str) -> str:
        return "found"

    labels = {"session_id": joined, "user_id": OPENAI, "api_key": "plain-looking-key"}
    with chronicle.record(f"chat {joined}", labels=labels, metadata={"note": joined}) as run:
        lookup("weather")
    assert chronicle.flush(10)
    saved = control_plane.wait_for_envelopes(run.trace_id, 1)
    trace = control_plane.trace(run.trace_id)
    sent = json.dumps([trace, saved])
    assert leaked(sent) == []
    assert "plain-looking-key" not in sent  # a credential-named label is masked whole
    assert trace["metadata"]["session_id"].startswith("[REDACTED:openai_key] ")  # keys kept
    assert leaked(exported_text(user_exporter)) == []


# ---- 6. redact, then cut ----------------------------------------------------------------------


@pytest.mark.parametrize("secret", [DSN, OPENAI, JWT], ids=["url_password", "openai", "jwt"])
def test_6_a_secret_straddling_the_cut_is_masked_whole(control_plane, secret):
    chronicle.configure(control_plane_url=control_plane.url, max_payload_bytes=64)
    # The cut at 64 bytes falls inside the secret: 40 characters of prose come first.
    text = "x" * 40 + " " + secret + " and the rest of the message"
    with chronicle.record("straddle") as run:
        echo(text)
    assert chronicle.flush(10)
    (saved,) = control_plane.wait_for_envelopes(run.trace_id, 1)
    kept = saved["input"]["raw"]["text"]
    assert "…[truncated" in kept
    assert leaked(kept) == []
    if secret is not DSN:  # a URL keeps its user name; only the password is a secret
        assert secret[:12] not in kept


# ---- 7. user code cannot write secrets onto Chronicle's spans ---------------------------------


def test_7_exceptions_and_attributes_user_code_puts_on_chronicles_spans_are_redacted(
    control_plane, user_exporter
):
    chronicle.configure(
        control_plane_url=control_plane.url, tracer_provider=provider_of(user_exporter)
    )

    @chronicle.boundary("call_api", kind="tool")
    def call_api() -> str:
        span = trace_api.get_current_span()
        try:
            raise PermissionError(f"rejected token {OPENAI} for {DSN}")
        except PermissionError as exc:
            span.record_exception(exc, attributes={"hint": f"Bearer {JWT}"})
        span.set_attribute("debug.key", GITHUB)
        span.set_attribute("debug.keys", [SLACK, "plain"])
        span.add_event("retry", {"aws": AWS})
        span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, f"bad {ANTHROPIC}"))
        span.update_name(f"call_api {AWS}")
        return "ok"

    with chronicle.record("spans"):
        trace_api.get_current_span().set_attribute("request.key", OPENAI)
        call_api()
    text = exported_text(user_exporter)
    assert "exception" in text and "PermissionError" in text and "debug.keys" in text
    assert leaked(text) == []


# ---- 8. no secret in Chronicle's log lines ----------------------------------------------------


def test_8_log_lines_carry_no_url_password_query_key_or_hook_exception_secret(caplog):
    caplog.set_level(logging.DEBUG, logger="chronicle")
    with ScriptedServer(lambda _: Answer(503, b"down for maintenance")) as server:
        url = server.url.replace("http://", "http://admin:s3cret-pw@") + "/?api_key=k3y-in-query"
        chronicle.configure(control_plane_url=url, flush_interval=0.05)

        class Leaky(chronicle.Hook):
            def enter(self, call: chronicle.CallInfo) -> None:
                raise ValueError(f"the key {OPENAI} was refused")

        chronicle.default_hooks.register(Leaky())
        with chronicle.record("logs"):
            echo("hi")
        assert chronicle.flush(0.5) is False
    logged = "\n".join(
        record.getMessage() + (caplog_text(record) or "")
        for record in caplog.records
        if record.name.startswith("chronicle")
    )
    assert "s3cret-pw" not in logged
    assert "k3y-in-query" not in logged
    assert leaked(logged) == []
    assert "ValueError" in logged and "503" in logged  # the lines still say what happened


def caplog_text(record: logging.LogRecord) -> str | None:
    if record.exc_info:
        return logging.Formatter().formatException(record.exc_info)
    return None


# ---- 9. traceparent never follows a redirect to a host that is not listed ---------------------


def test_9_traceparent_is_stripped_on_a_redirect_to_an_unlisted_host():
    with ScriptedServer(lambda _: Answer(200, b"{}", {"content-type": "application/json"})) as b:
        with ScriptedServer(redirect_to(b.url, 302)) as a:
            a_host = a.url.removeprefix("http://")
            chronicle.configure(inject_hosts=[a_host])
            instrument_httpx()
            try:
                with chronicle.record("redirect"), httpx.Client(follow_redirects=True) as client:
                    response = client.get(a.url + "/start")
                    manual = client.get(a.url + "/manual", follow_redirects=False)
                    assert manual.next_request is not None
                    hop = client.send(manual.next_request)
            finally:
                uninstrument_httpx()
    assert response.status_code == 200 and hop.status_code == 200
    assert all("traceparent" in r.headers for r in a.requests)  # the listed host gets it
    assert b.requests and all("traceparent" not in r.headers for r in b.requests)
    assert all("tracestate" not in r.headers for r in b.requests)


# ---- 12. hook return values never break the call ----------------------------------------------


class KeysRaise(Mapping[str, object]):
    def __getitem__(self, key: str) -> object:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("keys() is broken")

    def __len__(self) -> int:
        return 1


@chronicle.boundary("plan", kind="llm")
def plan(model: str, prompt: str) -> str:
    return f"{model}: {prompt}"


@pytest.mark.parametrize(
    "patch",
    [{"temperature": 0.2}, {1: "x"}, KeysRaise()],
    ids=["unknown-argument", "non-string-key", "raising-mapping"],
)
def test_12_an_invalid_patch_is_logged_and_ignored(recording, caplog, patch):
    caplog.set_level(logging.WARNING, logger="chronicle")

    class Patcher(chronicle.Hook):
        def enter(self, call: chronicle.CallInfo) -> Any:
            return patch

    chronicle.default_hooks.register(Patcher())
    with chronicle.record("patches") as run:
        assert plan(model="m", prompt="p") == "m: p"
    recording.saved(run.trace_id, 1)
    (line,) = [r.getMessage() for r in caplog.records if "Patcher" in r.getMessage()]
    assert "ignored" in line


def test_12_an_invalid_patch_fails_the_call_in_strict_hook_mode(control_plane):
    chronicle.configure(control_plane_url=control_plane.url, hooks_fail_call_on_error=True)
    chronicle.default_hooks.register(chronicle.FunctionHook(lambda call: {"temperature": 0.2}))
    with pytest.raises(TypeError, match="temperature"):
        plan(model="m", prompt="p")


def test_12_valid_patches_still_apply(recording):
    chronicle.default_hooks.register(chronicle.FunctionHook(lambda call: {"model": "small"}))
    with chronicle.record("patched") as run:
        assert plan(model="big", prompt="p") == "small: p"
    (saved,) = recording.saved(run.trace_id, 1)
    assert saved["input"]["model"] == "small"


def test_12_hooks_get_copies_they_cannot_use_to_change_what_is_sent():
    def meddle(call: chronicle.CallInfo, envelope: Any) -> None:
        envelope.input.raw["text"] = "changed by a hook"
        envelope.metadata["injected"] = True

    chronicle.default_hooks.register(chronicle.FunctionHook(record=meddle))
    with capture() as sent:
        echo("original")
    (envelope,) = sent.envelopes
    assert envelope.input.raw == {"text": "original"}
    assert "injected" not in envelope.metadata


# ---- 13. a configuration mistake never raises into a request ----------------------------------


def test_13_an_unknown_environment_variable_is_one_warning_and_never_turns_recording_off(
    monkeypatch, caplog, control_plane
):
    from chronicle import config

    config._warned.clear()  # said once per process: start this test's count afresh
    caplog.set_level(logging.WARNING, logger="chronicle")
    monkeypatch.setenv("CHRONICLE_CONTROL_PLANE_ULR", "http://127.0.0.1:9")
    monkeypatch.setenv("CHRONICLE_STORE", "sqlite")  # a 0.x leftover
    monkeypatch.setenv("CHRONICLE_CONTROL_PLANE_URL", control_plane.url)
    monkeypatch.setenv("CHRONICLE_SERVICE_NAME", "typo-check")
    calls = []
    chronicle.default_hooks.register(chronicle.FunctionHook(lambda call: calls.append(call.name)))
    with chronicle.record("typo") as session:
        assert echo("still works") == "still works"
    with chronicle.record("again"):
        echo("twice")
    assert session.trace_id and session.service == "typo-check"  # the rest of the environment
    assert chronicle.is_enabled() is True  # a stray variable does not switch recording off
    assert calls == ["echo", "echo"]
    typo = [
        r.getMessage() for r in caplog.records if "CHRONICLE_CONTROL_PLANE_ULR" in r.getMessage()
    ]
    assert len(typo) == 1  # once, not at every configure
    assert "did you mean CHRONICLE_CONTROL_PLANE_URL?" in typo[0]
    chronicle.configure()  # in code too: a warning, not an error
    assert len([r for r in caplog.records if "ULR" in r.getMessage()]) == 1
    assert chronicle.flush(10)
    assert control_plane.trace(session.trace_id) is not None  # recorded and saved


# ---- 15. replay serves recorded calls whatever the current settings ---------------------------


def test_15_a_recorded_http_call_is_served_from_the_recording_without_inject_hosts():
    answers = iter([b'{"rate": 1.1}', b'{"rate": 9.9}'])

    def rate(_: Request) -> Answer:
        return Answer(200, next(answers), {"content-type": "application/json"})

    with ScriptedServer(rate) as server:
        host = server.url.removeprefix("http://")

        @chronicle.boundary("convert", kind="tool")
        def convert(amount: float) -> float:
            found = httpx.get(server.url + "/rate").json()
            return float(amount * found["rate"])

        instrument_httpx()
        try:
            with capture(inject_hosts=[host]) as sent:
                with chronicle.record("fx"):
                    assert convert(10) == 11.0
            runtime.reset()
            chronicle.configure()  # the replaying process: no inject_hosts at all
            with chronicle.replay(sent.envelopes, chronicle.ReplayPlan().run("convert")):
                assert convert(10) == 11.0
        finally:
            uninstrument_httpx()
    assert len(server.requests) == 1  # the replay sent nothing


def test_15_a_tampered_llm_output_gives_a_replay_error_naming_the_envelope(llm_server):
    llm_server.reply_with(chat_text("hello"))
    client = chronicle.wrap(
        openai.OpenAI(base_url=llm_server.openai_base_url, api_key="test-key", max_retries=0)
    )
    with client:
        with capture() as sent:
            with chronicle.record("tampered"):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
        (envelope,) = sent.envelopes
        body = envelope.model_dump(mode="json")
        body["output"]["raw"]["choices"] = "not a list"
        with chronicle.replay([body]):
            with pytest.raises(chronicle.ReplayError, match=envelope.envelope_id):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )


# ---- 2. only the control plane's own success answer counts as stored --------------------------


@pytest.mark.parametrize(
    "answer",
    [html_page, invalid_json, "redirect"],
    ids=["html-200", "invalid-json-200", "301"],
)
def test_2_a_garbage_or_redirecting_answer_is_never_counted_as_stored(
    control_plane: LocalControlPlane, caplog: pytest.LogCaptureFixture, answer: Any
) -> None:
    caplog.set_level(logging.WARNING, logger="chronicle")
    script = redirect_to(control_plane.url) if answer == "redirect" else answer
    with ScriptedServer(script) as server:
        url = server.url.replace("http://", "http://ops:pa55word@")
        chronicle.configure(control_plane_url=url, trace_registration="lazy", flush_interval=0.05)
        with chronicle.record("garbage") as run:
            echo("hi")
        assert chronicle.flush(1) is False  # not stored, and flush says so
        assert server.requests
    assert control_plane.trace(run.trace_id) is None  # the redirect was not followed
    lines = [r.getMessage() for r in caplog.records if "answer" in r.getMessage()]
    assert len(lines) == 1, lines
    assert server.url.removeprefix("http://") in lines[0] and "pa55word" not in lines[0]


# ---- issue 24, item 8: small breaks of "never breaks the call" ----------------------------------


class _Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __str__(self) -> str:
        raise RuntimeError("no str")


def test_24_labels_of_any_type_are_recorded_as_strings_and_never_raise(recording, caplog):
    labels: dict[Any, Any] = {"user_id": 42, "ratio": 0.5, 7: "seven", "bad": _Unprintable()}
    with caplog.at_level(logging.WARNING, logger="chronicle"):
        with chronicle.record("typed labels", labels=labels) as run:
            echo("hi")
    recording.saved(run.trace_id, 1)
    stored = recording.control_plane.trace(run.trace_id)["metadata"]
    assert stored["user_id"] == "42"
    assert stored["ratio"] == "0.5"
    assert stored["7"] == "seven"
    assert "bad" not in stored  # its str() failed: dropped, with a warning
    assert "could not be turned into a string" in caplog.text
    assert "recorded as its str()" in caplog.text


@chronicle.boundary("gather", kind="tool")
def gather(first: str, *rest: str) -> list[str]:
    return [first, *rest]


def test_24_a_hook_patch_of_star_args_with_a_non_list_is_refused_not_applied(recording, caplog):
    chronicle.default_hooks.register(chronicle.FunctionHook(lambda call: {"rest": 5}))
    with caplog.at_level(logging.WARNING, logger="chronicle"):
        with chronicle.record("star args") as run:
            assert gather("a", "b") == ["a", "b"]  # the call runs unpatched
    (envelope,) = recording.saved(run.trace_id, 1)
    assert envelope["envelope_status"]["status"] == "success"
    assert envelope["input"]["raw"] == {"first": "a", "rest": ["b"]}
    assert "'rest' (*rest takes a list, got int)" in caplog.text


def test_24_an_abort_in_crossing_reaches_the_caller_and_is_recorded_as_a_failure(recording):
    def refuse(call: chronicle.CallInfo, result: object) -> None:
        raise chronicle.AbortCall("result refused by policy")

    chronicle.default_hooks.register(chronicle.FunctionHook(crossing=refuse))
    with chronicle.record("crossing abort") as run:
        with pytest.raises(chronicle.AbortCall, match="refused by policy"):
            echo("hi")
    (envelope,) = recording.saved(run.trace_id, 1)
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "AbortCall"
    assert envelope["output"]["error"]["message"] == "result refused by policy"


# ---- issue 24, item 6: replay checks what it is given ----------------------------------------


def recorded_envelopes(text: str = "hello") -> list[dict[str, Any]]:
    """The envelopes of one recorded request with one call, as the control plane returns them."""
    with capture() as sent:
        with chronicle.record("replay input"):
            echo(text)
    return [e.model_dump(mode="json", exclude_none=True) for e in sent.envelopes]


def serving(body: bytes, headers: Mapping[str, str] | None = None) -> ScriptedServer:
    """A control plane that answers every request with ``body``."""
    kept = {"content-type": "application/json", **(headers or {})}
    return ScriptedServer(lambda _: Answer(200, body, kept))


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_24_6_replay_trace_refuses_envelopes_of_another_trace_or_span():
    mine, other = recorded_envelopes("mine"), recorded_envelopes("other")
    with serving(compact({"envelopes": other})) as server:
        chronicle.configure(control_plane_url=server.url)
        with pytest.raises(chronicle.ReplayError) as raised:
            chronicle.replay_trace(mine[0]["trace_id"], mine[0]["span_id"])
    said = str(raised.value)
    assert other[0]["trace_id"] in said and mine[0]["trace_id"] in said
    assert other[0]["envelope_id"] in said


@pytest.mark.parametrize("where", ["answer", "nested output"])
def test_24_6_json_too_deep_in_an_answer_is_a_replay_error_not_a_recursion_error(where):
    (envelope,) = recorded_envelopes()
    if where == "answer":
        body = b'{"envelopes": ' + DEEP + b"}"
    else:
        body = compact({"envelopes": [{**envelope, "output": {"raw": "HERE"}}]})
        body = body.replace(b'"HERE"', DEEP)
    with serving(body) as server:
        chronicle.configure(control_plane_url=server.url)
        with pytest.raises(chronicle.ReplayError, match="nested"):
            chronicle.replay_trace(envelope["trace_id"], envelope["span_id"])


def test_24_6_a_saved_file_or_list_too_deep_is_a_replay_error_naming_the_item(tmp_path):
    (envelope,) = recorded_envelopes()
    saved = tmp_path / "deep.json"
    saved.write_bytes(b'{"envelopes": [' + DEEP + b"]}")
    with pytest.raises(chronicle.ReplayError, match="nested"):
        chronicle.replay(saved)
    deep: Any = "bottom"
    for _ in range(5000):  # deep enough to break a recursive walk, shallow enough to build
        deep = [deep]
    with pytest.raises(chronicle.ReplayError, match=r"item 1 .*nested"):
        chronicle.replay([envelope, {**envelope, "output": {"raw": deep}}])


def test_24_6_a_huge_answer_is_refused_past_the_bound_not_buffered_whole():
    import gzip

    bomb = gzip.compress(b'{"envelopes": [' + b" " * 50_000_000 + b"]}")  # 50 MB as 50 KB
    with serving(bomb, {"content-encoding": "gzip"}) as server:
        runtime.install(HttpControlPlane(server.url, None, 5, max_answer_bytes=1_000_000))
        with pytest.raises(chronicle.ReplayError, match="over the 1000000 bytes"):
            chronicle.replay_trace("0" * 31 + "1", "0" * 15 + "1")


def test_24_6_an_item_that_is_not_an_object_is_a_damaged_recording_not_dropped():
    (envelope,) = recorded_envelopes()
    with serving(compact({"envelopes": [envelope, 5]})) as server:
        chronicle.configure(control_plane_url=server.url)
        with pytest.raises(chronicle.ReplayError, match=r"damaged recording: item 1 .* 5"):
            chronicle.replay_trace(envelope["trace_id"], envelope["span_id"])
    with pytest.raises(chronicle.ReplayError, match=r"item 1 is the value 5, not an envelope"):
        chronicle.replay([envelope, 5])
