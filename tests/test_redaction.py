"""Redaction: secrets never leave the process, and ordinary text is left alone."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import JsonValue

from chronicle import redaction
from chronicle.redaction import (
    FAILED,
    Redaction,
    default_redactors,
    is_credential_key,
    is_secret_header,
    redact_secrets,
)

# Fake credentials, shaped like the real ones.
OPENAI_LEGACY = "sk-" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ7kL9mN1pQ"
OPENAI_PROJECT = "sk-proj-" + "Ab_3dE5-gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ7kL9mN1pQ3sT5"
OPENAI_SERVICE = "sk-svcacct-" + "Zy9xW7vU5tS3rQ1pO9nM7lK5jI3hG1fE9dC7bA5"
ANTHROPIC = "sk-ant-api03-" + "Qw3eR5tY7uI9oP1aS3dF5gH7jK9lZ1xC3vB5nM7-Qw3eR5tY7uI9oP1aS3dF5gH7AA"
AWS_ACCESS = "AKIAIOSFODNN7EXAMPLE"
AWS_TEMPORARY = "ASIAQWERTYUIOP123456"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB_CLASSIC = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GITHUB_FINE = "github_pat_" + "11ABCDEFG0" + "123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEA7bq9sl0c2YQ8T1m0aL2Xk0o5gQ3r6b2nA9sJdVZ1wq0T\n"
    "-----END RSA PRIVATE KEY-----"
)

SECRETS_IN_PROSE = [
    # (kind, text with a secret, the text after redaction)
    (
        "openai_key",
        f"my key is {OPENAI_LEGACY}, keep it",
        "my key is [REDACTED:openai_key], keep it",
    ),
    ("openai_key", f"use {OPENAI_PROJECT} here", "use [REDACTED:openai_key] here"),
    ("openai_key", f"svc={OPENAI_SERVICE}", "svc=[REDACTED:openai_key]"),
    (
        "anthropic_key",
        f"ANTHROPIC_API_KEY={ANTHROPIC}",
        "ANTHROPIC_API_KEY=[REDACTED:anthropic_key]",
    ),
    ("aws_access_key", f"id {AWS_ACCESS} ok", "id [REDACTED:aws_access_key] ok"),
    ("aws_access_key", f"temp {AWS_TEMPORARY}.", "temp [REDACTED:aws_access_key]."),
    (
        "aws_secret_key",
        f"aws_secret_access_key = {AWS_SECRET}\nregion = eu",
        "aws_secret_access_key = [REDACTED:aws_secret_key]\nregion = eu",
    ),
    (
        "aws_secret_key",
        f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
        "export AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_key]",
    ),
    (
        "aws_secret_key",
        f'{{"SecretAccessKey": "{AWS_SECRET}"}}',
        '{"SecretAccessKey": "[REDACTED:aws_secret_key]"}',
    ),
    (
        "github_token",
        f"git clone with {GITHUB_CLASSIC} now",
        "git clone with [REDACTED:github_token] now",
    ),
    ("github_token", f"token: {GITHUB_FINE}", "token: [REDACTED:github_token]"),
    ("slack_token", f"slack says {SLACK}", "slack says [REDACTED:slack_token]"),
    (
        "bearer",
        "Authorization: Bearer abc123.def456-ghi789",
        "Authorization: Bearer [REDACTED:bearer]",
    ),
    ("bearer", "authorization: bearer t0k3nV4lu3xyz", "authorization: bearer [REDACTED:bearer]"),
    (
        "basic_auth",
        "Authorization: Basic dXNlcjpodW50ZXIy",  # user:hunter2
        "Authorization: Basic [REDACTED:basic_auth]",
    ),
    ("jwt", f"session {JWT} expires", "session [REDACTED:jwt] expires"),
    ("private_key", f"key:\n{PEM}\ndone", "key:\n[REDACTED:private_key]\ndone"),
    (
        "url_password",
        "connect to postgres://admin:s3cr3t!@db.internal:5432/app now",
        "connect to postgres://admin:[REDACTED:url_password]@db.internal:5432/app now",
    ),
    ("url_password", "redis://:pw@cache", "redis://:[REDACTED:url_password]@cache"),
]


@pytest.mark.parametrize(("kind", "text", "expected"), SECRETS_IN_PROSE)
def test_each_secret_kind_is_masked_in_prose(kind, text, expected):
    out = redact_secrets(text)
    assert out == expected
    assert f"[REDACTED:{kind}]" in out


@pytest.mark.parametrize(("kind", "text", "expected"), SECRETS_IN_PROSE)
def test_masking_is_idempotent(kind, text, expected):
    assert redact_secrets(redact_secrets(text)) == expected


def test_a_password_containing_an_at_sign_is_masked_whole():
    out = redact_secrets("mysql://root:p@ss@db/main")
    assert out == "mysql://root:[REDACTED:url_password]@db/main"


def test_a_private_key_cut_off_before_its_end_line_is_still_masked():
    truncated = PEM[:60]
    assert redact_secrets(f"here: {truncated}") == "here: [REDACTED:private_key]"


def test_several_secrets_in_one_text_are_all_masked():
    text = f"{AWS_ACCESS} {OPENAI_LEGACY} Bearer {JWT}"
    assert redact_secrets(text) == (
        "[REDACTED:aws_access_key] [REDACTED:openai_key] Bearer [REDACTED:bearer]"
    )


@pytest.mark.parametrize(
    "text",
    [
        "Please update the task-list and ask-the-expert pages before Friday.",
        "We used sk-learn and risk-adjusted returns; desk-based work.",
        "trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7",
        "request 123e4567-e89b-12d3-a456-426614174000 finished",
        "The Bearer instruments are listed. A basic understanding of bearer bonds helps.",
        "Visit https://example.com/docs?page=2 or write to ops@example.com",
        "Result: 42 items, 3 pages; see AKIA docs and ghost_town_population_count.",
        "def handle(request): return {'status': 'ok', 'eyJ': 1}",
        "ISO time 2024-05-01T12:30:05Z and ratio 3:2",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert redact_secrets(text) is text


def test_short_strings_are_returned_unchanged():
    for text in ("", "user", "assistant", "content", "tool_calls"):
        assert redact_secrets(text) is text


# Redaction over JSON


def test_a_tuple_slipping_into_json_does_not_carry_a_secret_out():
    not_json: Any = {"pair": ("ok", f"key {AWS_ACCESS}")}
    out = Redaction.default().json(not_json)
    assert out == {"pair": ["ok", "key [REDACTED:aws_access_key]"]}


def test_json_masks_secrets_in_nested_values_and_dict_keys():
    redaction = Redaction.default()
    value: dict[str, JsonValue] = {
        "messages": [
            {"role": "user", "content": f"my key is {OPENAI_LEGACY}"},
            {"role": "tool", "content": {"headers": [f"Bearer {GITHUB_CLASSIC}"]}},
        ],
        f"note {AWS_ACCESS}": 1,
        "count": 3,
    }
    assert redaction.json(value) == {
        "messages": [
            {"role": "user", "content": "my key is [REDACTED:openai_key]"},
            {"role": "tool", "content": {"headers": ["Bearer [REDACTED:bearer]"]}},
        ],
        "note [REDACTED:aws_access_key]": 1,
        "count": 3,
    }


def test_json_returns_the_same_object_when_nothing_needs_masking():
    redaction = Redaction.default()
    value: dict[str, JsonValue] = {
        "messages": [{"role": "user", "content": "hello " * 100}],
        "n": 1.5,
        "ok": None,
    }
    assert redaction.json(value) is value


def test_a_long_clean_text_is_scanned_once_and_what_is_remembered_is_bounded(monkeypatch):
    """An agent sends its conversation again on every call: a long message found clean is not
    scanned again, a new secret still is, and the texts remembered stay within a bound."""
    message = "message 1: " + "the quick brown fox jumps over the lazy dog. " * 20
    assert redact_secrets(message) is message
    with_key = message + OPENAI_LEGACY
    assert redact_secrets(with_key) == message + "[REDACTED:openai_key]"
    with monkeypatch.context() as patched:
        patched.setattr(redaction, "_SECRETS", None)  # any scan would raise now
        assert redact_secrets("".join(list(message))) == message  # equal text, another object
    assert redact_secrets(with_key) == message + "[REDACTED:openai_key]"  # never remembered
    many = [f"{index:06d} " + "plain words in a long message " * 12 for index in range(4000)]
    assert all(redact_secrets(text) is text for text in many)  # 1.5M characters in all
    assert 0 < redaction._clean_chars <= redaction.REMEMBER_CHARS
    assert redaction._clean_chars == sum(map(len, redaction._clean))


def test_json_never_modifies_its_input():
    redaction = Redaction.default()
    inner: dict[str, JsonValue] = {"content": f"key {OPENAI_LEGACY}"}
    value: dict[str, JsonValue] = {"clean": {"a": "b"}, "dirty": [inner]}
    out: Any = redaction.json(value)
    assert inner == {"content": f"key {OPENAI_LEGACY}"}
    assert out["dirty"] == [{"content": "key [REDACTED:openai_key]"}]
    assert out["clean"] is value["clean"]  # untouched parts are shared, not copied


def test_json_masks_whatever_is_stored_under_a_credential_key():
    redaction = Redaction.default()
    value: dict[str, JsonValue] = {
        "username": "ada",
        "password": "hunter2",
        "client_secret": "abc",
        "X-Api-Key": "k-123",
        "nested": {"db_password": "tiger", "apiKey": "plain"},
    }
    assert redaction.json(value) == {
        "username": "ada",
        "password": "[REDACTED:credential]",
        "client_secret": "[REDACTED:credential]",
        "X-Api-Key": "[REDACTED:credential]",
        "nested": {"db_password": "[REDACTED:credential]", "apiKey": "[REDACTED:credential]"},
    }


def test_logprob_tokens_and_token_counts_are_not_credentials():
    redaction = Redaction.default()
    value: dict[str, JsonValue] = {
        "logprobs": [{"token": "Hello", "logprob": -0.1}],
        "usage": {"max_tokens": 10, "total_tokens": 12},
        "tokenizer": "cl100k_base",
        "key": "a-key-name",
    }
    assert redaction.json(value) is value


def test_turning_the_defaults_off_turns_credential_keys_off_too():
    redaction = Redaction([str.strip])
    assert redaction.json({"password": " hunter2 "}) == {"password": "hunter2"}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("password", True),
        ("Password", True),
        ("api-key", True),
        ("OPENAI_API_KEY", True),
        ("access_token", True),
        ("SecretAccessKey", True),
        ("token", False),
        ("max_tokens", False),
        ("key", False),
        ("pwd", False),
    ],
)
def test_credential_key_names(key, expected):
    assert is_credential_key(key) is expected


def test_none_redaction_changes_nothing():
    redaction = Redaction.none()
    text = f"key {OPENAI_LEGACY}"
    value: dict[str, JsonValue] = {"password": text}
    assert redaction.text(text) is text
    assert redaction.json(value) is value


def test_user_redactors_run_after_the_defaults_in_order():
    redaction = Redaction([*default_redactors(), lambda s: s.replace("Ada", "[NAME]"), str.upper])
    assert redaction.text(f"Ada {AWS_ACCESS}") == "[NAME] [REDACTED:AWS_ACCESS_KEY]"


def test_default_redactors_is_a_fresh_list_each_time():
    first = default_redactors()
    first.append(str.upper)
    assert default_redactors() == [redact_secrets]


# A failing user redactor


@pytest.fixture
def chronicle_log():
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("chronicle")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def leaky_redactor(text: str) -> str:
    if any(ch.isdigit() for ch in text):
        raise ValueError(f"cannot handle {text!r}")  # the message quotes the secret
    return text


def test_a_raising_redactor_masks_the_string_and_warns_once(chronicle_log):
    redaction = Redaction([*default_redactors(), leaky_redactor])
    secret_text = "my pin is 4242"
    out = redaction.json({"a": secret_text, "b": ["another 4242", "plain"], "key 1": 1})
    # Keys are strings too: a key the redactor fails on is masked like any value.
    assert out == {"a": FAILED, "b": [FAILED, "plain"], FAILED: 1}
    assert FAILED == "[REDACTED:redactor_failed]"
    assert len(chronicle_log) == 1
    message = chronicle_log[0].getMessage()
    assert "leaky_redactor" in message
    assert "ValueError" in message
    assert "fix" in message
    assert "4242" not in message  # the warning must not leak what the redactor was given
    assert chronicle_log[0].exc_info is None  # nor through a traceback


def test_a_redactor_returning_a_non_str_is_a_failure(chronicle_log):
    def returns_none(text: str) -> str:
        return None  # type: ignore[return-value]

    redaction = Redaction([returns_none])
    assert redaction.text("hello world") == FAILED
    assert redaction.text("again") == FAILED
    assert len(chronicle_log) == 1
    assert "returned NoneType, not str" in chronicle_log[0].getMessage()


def test_a_redactor_failing_on_one_string_still_runs_on_the_others(chronicle_log):
    calls: list[str] = []

    def picky(text: str) -> str:
        calls.append(text)
        if text == "boom":
            raise RuntimeError("boom")
        return text

    redaction = Redaction([picky])
    assert redaction.json({"ok": "boom", "fine": "fine"}) == {"ok": FAILED, "fine": "fine"}
    assert "fine" in calls


def test_a_redactor_returning_an_equal_copy_counts_as_unchanged():
    redaction = Redaction([lambda s: "".join(s)])
    value: dict[str, JsonValue] = {"a": ["some text here"]}
    assert redaction.json(value) is value


def test_json_too_deep_to_walk_fails_closed():
    redaction = Redaction.default()
    deep: list[JsonValue] = [f"key {OPENAI_LEGACY}"]
    for _ in range(100_000):
        deep = [deep]
    assert redaction.json(deep) == FAILED


# Header names


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "Set-Cookie",
        "x-api-key",
        "api-key",
        "anthropic-api-key",
        "OpenAI-Api-Key",
        "X-Auth-Token",
        "x-amz-security-token",
        "X-Client-Secret",
        "X-Password",
        "x-goog-apikey",
        "X_API_KEY",
    ],
)
def test_credential_headers_are_secret(name):
    assert is_secret_header(name)


@pytest.mark.parametrize(
    "name", ["content-type", "accept", "user-agent", "x-request-id", "traceparent", "host"]
)
def test_ordinary_headers_are_not_secret(name):
    assert not is_secret_header(name)


@pytest.mark.parametrize(
    "name",
    ["api_key", "access_token", "token", "sig", "X-Amz-Signature", "client_secret", "passphrase"],
)
def test_a_url_in_a_log_line_loses_the_value_of_every_credential_parameter(name):
    # safe_url (log lines, error messages) and redact_secrets (recorded text) follow one rule
    # for which query parameters carry a credential: redaction.is_credential_parameter.
    url = f"https://user:pw@api.example.com/v1/items?{name}=s3cr3tvalue&max_tokens=5&q=cats"
    shown = redaction.safe_url(url)
    assert "s3cr3tvalue" not in shown and "pw@" not in shown
    assert f"{name}=***" in shown
    assert "max_tokens=5" in shown and "q=cats" in shown  # counts and ordinary values stay
    assert redaction.is_credential_parameter(name)
    assert "s3cr3tvalue" not in redaction.redact_secrets(f"GET {url}")


def test_every_named_credential_parameter_is_masked_in_recorded_text():
    # The text scan only looks at parameters whose name ends like a credential; every name the
    # rule (is_credential_parameter) lists must end so, or its value would be recorded.
    names = redaction._CREDENTIAL_NAMES | redaction._SECRET_QUERY_NAMES | redaction._SECRET_HEADERS
    missed = [
        name
        for name in sorted(names)
        if redaction.is_credential_parameter(name)
        and "s3cr3tvalue" in redaction.redact_secrets(f"GET /x?a=1&{name}=s3cr3tvalue")
    ]
    assert missed == []
