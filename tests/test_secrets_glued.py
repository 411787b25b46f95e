"""Secrets glued to a word, and values under a bare ``token``/``auth`` key (issue 40, item 5).

The keys are generated, not picked: for each provider prefix Chronicle knows, tails of the real
length and alphabet from a seeded generator, glued to generated words. So is the ordinary side:
hyphenated words glued to ``sk-``, a model's token lists, short config values. Recorded through
a real boundary to the real control plane where it matters to a user (``def login(user,
token)``)."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from typing import Any

import pytest

import chronicle
from chronicle.redaction import Redaction, redact_secrets
from tests.support.recording import Recording

ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
UPPER_DIGITS = string.ascii_uppercase + string.digits
SAMPLES = 150


def tail(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


# The prefixes Chronicle knows, each with a generator of a real key's shape.
KEYS: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    "sk-": ("openai_key", lambda r: "sk-" + tail(r, ALNUM, 48)),
    "sk-proj-": ("openai_key", lambda r: "sk-proj-" + tail(r, B64URL, 156)),
    "sk-svcacct-": ("openai_key", lambda r: "sk-svcacct-" + tail(r, B64URL, 156)),
    "sk-admin-": ("openai_key", lambda r: "sk-admin-" + tail(r, B64URL, 120)),
    "sk-ant-": ("anthropic_key", lambda r: "sk-ant-api03-" + tail(r, B64URL, 95)),
    "AIza": ("google_api_key", lambda r: "AIza" + tail(r, B64URL, 35)),
    "AKIA": ("aws_access_key", lambda r: "AKIA" + tail(r, UPPER_DIGITS, 16)),
    "ghp_": ("github_token", lambda r: "ghp_" + tail(r, ALNUM, 36)),
    "gho_": ("github_token", lambda r: "gho_" + tail(r, ALNUM, 36)),
    "xoxb-": (
        "slack_token",
        lambda r: (
            f"xoxb-{tail(r, string.digits, 12)}-{tail(r, string.digits, 13)}-" + tail(r, ALNUM, 24)
        ),
    ),
}


def word(rng: random.Random, low: int = 2, high: int = 9) -> str:
    """A pronounceable made-up word (consonant-vowel pairs)."""
    size = rng.randint(low, high)
    return "".join(rng.choice("bcdfghjklmnprstvwz" if i % 2 == 0 else "aeiou") for i in range(size))


@pytest.mark.parametrize("prefix", sorted(KEYS))
def test_a_key_glued_to_a_word_is_masked_for_every_prefix(prefix):
    kind, make = KEYS[prefix]
    rng = random.Random(f"glued {prefix}")
    missed = []
    for _ in range(SAMPLES):
        key = make(rng)
        glue = rng.choice([word(rng), word(rng).upper(), word(rng) + str(rng.randint(0, 99))])
        masked = redact_secrets(f"config: {glue}{key} then more")
        if key[len(prefix) :][-12:] in masked or f"[REDACTED:{kind}]" not in masked:
            missed.append(glue + key)
    assert missed == []


@pytest.mark.parametrize("prefix", sorted(KEYS))
def test_a_key_at_a_word_start_is_still_masked(prefix):
    kind, make = KEYS[prefix]
    rng = random.Random(f"free {prefix}")
    for _ in range(SAMPLES):
        key = make(rng)
        assert redact_secrets(f"use {key}.") == f"use [REDACTED:{kind}]."


def test_hyphenated_words_glued_to_a_prefix_stay_as_they_are():
    rng = random.Random("ordinary glued")
    for _ in range(SAMPLES * 4):
        words = [word(rng) for _ in range(rng.randint(2, 6))]
        if rng.random() < 0.5:
            words.append(str(rng.randint(1990, 2030)))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), word(rng).upper())  # an acronym: "AWS"
        for prefix in ("sk-", "sk-proj-", "sk-ant-", "sk-svcacct-"):
            text = f"the {word(rng)}{prefix}{'-'.join(words)} folder"
            assert redact_secrets(text) == text


# ---- bare token, auth, secret, password keys ---------------------------------------------------


def token_value(rng: random.Random) -> str:
    """A token as services issue them: an optional prefix and 16-40 random characters."""
    prefix = rng.choice(["", "tok_", "at-", "v2.", "sess_"])
    return prefix + tail(rng, ALNUM, rng.randint(16, 40))


@pytest.mark.parametrize("key", ["token", "Token", "TOKEN", "auth", "Auth", "secret", "password"])
def test_a_value_under_a_bare_credential_key_is_masked_in_dicts_and_json_text(key):
    rng = random.Random(f"bare {key}")
    redaction = Redaction.default()
    for _ in range(SAMPLES):
        value = token_value(rng)
        assert redaction.json({key: value, "user": "ann"}) == {
            key: "[REDACTED:credential]",
            "user": "ann",
        }
        text = json.dumps({"user": "ann", key: value, "n": 2})
        masked = redact_secrets(text)
        assert value not in masked and json.loads(masked)[key] == "[REDACTED:credential]"
        escaped = json.dumps({"arguments": text})  # JSON text inside JSON text
        assert value not in redact_secrets(escaped)


def test_a_models_token_lists_and_short_config_values_are_not_credentials():
    rng = random.Random("logprobs")
    redaction = Redaction.default()
    for _ in range(SAMPLES):
        tokens = [
            rng.choice([word(rng, 1, 6), " " + word(rng, 1, 9), word(rng, 1, 6).title(), "."])
            for _ in range(rng.randint(3, 12))
        ]
        logprobs: Any = {
            "content": [{"token": t, "logprob": -rng.random(), "top_logprobs": []} for t in tokens]
        }
        assert redaction.json(logprobs) is logprobs
        text = json.dumps(logprobs)
        assert redact_secrets(text) == text
    for value in ("none", "basic", "oauth2", "bearer", "the", "sso"):
        config: Any = {"auth": value, "token": value}
        assert redaction.json(config) is config
        assert redact_secrets(json.dumps(config)) == json.dumps(config)


def test_a_recorded_call_stores_no_bare_token_or_auth_value(recording: Recording) -> None:
    rng = random.Random("recorded")
    token, auth, issued = token_value(rng), token_value(rng), token_value(rng)

    @chronicle.boundary("login", kind="tool")
    def login(user: str, token: str, auth: str) -> dict[str, Any]:
        return {"user": user, "token": issued}

    @chronicle.boundary("complete", kind="tool")
    def complete() -> dict[str, Any]:
        return {"text": "Hello", "logprobs": [{"token": "Hello", "logprob": -0.1}]}

    with chronicle.record("login") as session:
        login("ann", token, auth)
        complete()
    envelope, completion = recording.saved(session.trace_id, 2)
    stored = json.dumps(envelope)
    assert token not in stored and auth not in stored and issued not in stored
    assert envelope["input"]["raw"] == {
        "user": "ann",
        "token": "[REDACTED:credential]",
        "auth": "[REDACTED:credential]",
    }
    assert envelope["output"]["raw"]["token"] == "[REDACTED:credential]"
    # a model's token list is kept as it came
    assert completion["output"]["raw"]["logprobs"] == [{"token": "Hello", "logprob": -0.1}]
