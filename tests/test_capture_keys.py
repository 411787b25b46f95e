"""The walk remembers clean dict keys (``_KNOWN_KEYS``) and records exactly what it would without.

A key the default redaction gave back unchanged is looked up the next time instead of scanned
and checked as a credential name. Whatever the memory holds, the recorded JSON, its flags and
the redaction must be the same as a walk that remembers nothing.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from chronicle.recording import capture
from chronicle.recording.capture import JsonForm, json_arguments, json_form
from chronicle.redaction import Redaction

DEFAULT = Redaction.default()
KEY_SECRET = "sk-proj-" + "a1B2" * 8


class Forgetful(dict[str, None]):
    """A ``_KNOWN_KEYS`` that never knows a key: the walk as it was before the memory."""

    def __contains__(self, key: object) -> bool:
        return False

    def __setitem__(self, key: str, value: None) -> None:
        pass


def exact(form: JsonForm) -> tuple[str, bool, bool, bool, bool]:
    return (
        json.dumps(form.value, ensure_ascii=False),
        form.lossy,
        form.truncated,
        form.binary,
        form.masked,
    )


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "_KNOWN_KEYS", {})


def without_memory(value: object, **options: Any) -> JsonForm:
    known = capture._KNOWN_KEYS
    capture._KNOWN_KEYS = Forgetful()
    try:
        return json_form(value, **options)
    finally:
        capture._KNOWN_KEYS = known


def assert_same_twice(value: object, **options: Any) -> JsonForm:
    """Walked with the memory cold, then warm: both as a walk without memory records it."""
    expected = exact(without_memory(value, **options))
    first = json_form(value, **options)
    second = json_form(value, **options)
    assert exact(first) == expected
    assert exact(second) == expected
    return second


def test_repeated_keys_are_remembered_and_recorded_the_same() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 3, "max_tokens": 5}
    form = assert_same_twice(chat, redaction=DEFAULT)
    assert form.value == chat
    assert {"role", "content", "model", "messages", "max_tokens"} <= set(capture._KNOWN_KEYS)


def test_a_key_holding_a_secret_is_masked_however_often_it_is_seen() -> None:
    value = {KEY_SECRET: 1, "x": {KEY_SECRET: "v"}}
    json_form(value)  # seen first with no redaction: it must not count as clean
    form = assert_same_twice(value, redaction=DEFAULT)
    assert KEY_SECRET not in json.dumps(form.value)
    assert form.masked
    assert KEY_SECRET not in capture._KNOWN_KEYS


def test_a_short_key_with_an_at_sign_seen_unredacted_is_still_scanned() -> None:
    key = "a://u:pw@h"  # shorter than the shortest shape, but a URL password needs its "@"
    json_form({key: 1})
    form = assert_same_twice({key: 1}, redaction=DEFAULT)
    assert "pw" not in json.dumps(form.value)


@pytest.mark.parametrize("key", ["password", "api_key", "Authorization", "client-secret"])
def test_credential_named_keys_are_never_remembered_and_always_masked(key: str) -> None:
    form = assert_same_twice({"outer": {key: "hunter2"}}, redaction=DEFAULT)
    assert form.value == {"outer": {key: "[REDACTED:credential]"}}
    assert key not in capture._KNOWN_KEYS


def test_a_users_redactor_sees_every_key_even_known_ones() -> None:
    assert_same_twice({"role": "user"}, redaction=DEFAULT)  # "role" is known now
    shout = Redaction([str.upper])
    assert json_form({"role": "user"}, redaction=shout).value == {"ROLE": "USER"}


def test_arguments_use_the_memory_and_record_the_same() -> None:
    bound = {"query": "weather", "api_key": "k-123456", KEY_SECRET: 2}
    first = json_arguments(bound, redaction=DEFAULT)
    second = json_arguments(bound, redaction=DEFAULT)
    assert exact(first) == exact(second)
    assert second.value == {
        "query": "weather",
        "api_key": "[REDACTED:credential]",
        "[REDACTED:openai_key]": 2,
    }
    assert "query" in capture._KNOWN_KEYS


def test_the_memory_is_bounded() -> None:
    json_form({f"key{i}": i for i in range(5000)}, redaction=DEFAULT)
    assert 0 < len(capture._KNOWN_KEYS) <= 4096


_WORDS = [
    "role",
    "content",
    "naïve",
    KEY_SECRET,
    "Bearer tok3n.value",
    "x@y.z",
    "://u:p@h",
    "two\nlines",
    "password",
    "API-Key",
    "prompt_tokens",
    "a_rather_long_key_name_that_is_still_under_sixty_four_chars",
    "k" * 70,
    "",
]


def _random_value(rng: random.Random, depth: int) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([rng.choice(_WORDS), rng.randint(-99, 10**20), 0.5, True, None])
    if roll < 0.65:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {rng.choice(_WORDS): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


@pytest.mark.parametrize("seed", range(6))
def test_random_data_is_recorded_exactly_as_without_the_memory(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        value = {"v": _random_value(rng, 0), "w": [_random_value(rng, 1)]}
        limit = rng.choice([None, 8, 40, 70, 512])
        redaction = rng.choice([DEFAULT, None, Redaction(())])
        options = {"max_string_bytes": limit, "max_total_bytes": limit, "redaction": redaction}
        assert_same_twice(value, **options)
