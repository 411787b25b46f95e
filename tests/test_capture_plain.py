"""The C-speed path for plain data (``_plain_form``) records exactly what the walk records.

``json_form`` and ``json_arguments`` try it first for nested dicts and lists; whatever it returns
must be the walk's result to the byte and flag, for every value, every limit and every
redaction. Each case below is compared with ``plain_first=False`` (the walk alone).
"""

from __future__ import annotations

import enum
import json
import random
from typing import Any

import pytest

from chronicle.recording.capture import (
    MAX_DEPTH,
    JsonForm,
    _plain_form,
    json_arguments,
    json_form,
)
from chronicle.redaction import (
    _CREDENTIAL_ENDINGS,
    _CREDENTIAL_NAMES,
    _CREDENTIAL_SUFFIXES,
    Redaction,
    json_text_is_clean,
)

DEFAULT = Redaction.default()
LIMIT = 256 * 1024


class Color(enum.IntEnum):
    RED = 1


class Mood(str, enum.Enum):
    CALM = "calm"


class Text(str):
    pass


class Number(int):
    pass


def both(value: object, **options: Any) -> tuple[JsonForm, JsonForm]:
    """``json_form`` with the plain path tried first, and the walk alone."""
    return json_form(value, plain_first=True, **options), json_form(
        value, plain_first=False, **options
    )


def exact(form: JsonForm) -> tuple[str, bool, bool, bool]:
    """A form as its JSON text (types and key order included) and its flags."""
    return (
        json.dumps(form.value, ensure_ascii=False),
        form.lossy,
        form.truncated,
        form.binary,
    )


def assert_same(value: object, **options: Any) -> JsonForm:
    plain, walked = both(value, **options)
    assert exact(plain) == exact(walked)
    return plain


def nested(leaf: object, key: object = "k") -> dict[str, Any]:
    return {"results": [{key: leaf, "n": 1}], "count": 1}


@pytest.mark.parametrize(
    "leaf",
    [
        "plain text",
        "naïve café ☕ 𝄞",
        'a "quoted" word',
        "line one\nline two\ttabbed",
        "back\\slash",
        3.25,
        -0.0,
        10**30,
        True,
        None,
        ("a", "tuple"),
        Text("a str subclass"),
        Number(7),
        Color.RED,
        Mood.CALM,
        float("nan"),
        float("inf"),
        "\ud800 lone surrogate",
        b"bytes",
        {1, 2},
        10**4050,
    ],
    ids=repr,
)
def test_every_leaf_kind_is_recorded_as_the_walk_records_it(leaf: object) -> None:
    assert_same(nested(leaf), max_string_bytes=LIMIT, max_total_bytes=LIMIT, redaction=DEFAULT)


@pytest.mark.parametrize("key", [True, None, 1, 2.5, Color.RED, Mood.CALM, Text("sub")], ids=repr)
def test_keys_that_are_not_plain_strings_are_named_as_the_walk_names_them(key: object) -> None:
    # The encoder writes a True key as "true"; the walk (and the docs) say "True".
    assert_same(nested("v", key=key), redaction=DEFAULT)


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-" + "a1B2" * 8,
        "token: Bearer abcdefgh12345678",
        "token: Bearer\tabcdefgh12345678",  # JSON writes the tab as an escape
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
        "see postgres://admin:hunter2@db.internal/app",
        "AKIA" + "ABCDEFGHIJKLMNOP",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
        'quoted "sk-' + "x" * 24 + '" inside',
    ],
)
def test_a_secret_anywhere_in_plain_data_is_masked(secret: str) -> None:
    form = assert_same(nested(secret), redaction=DEFAULT)
    assert "[REDACTED:" in json.dumps(form.value)


@pytest.mark.parametrize(
    "key", ["password", "api_key", "DB-Password", "x-api-key", "Set-Cookie", "refresh_token"]
)
def test_a_credential_named_key_anywhere_is_masked_whole(key: str) -> None:
    form = assert_same({"outer": [{key: "hunter2", "prompt_tokens": 3}]}, redaction=DEFAULT)
    assert json.dumps(form.value).count("[REDACTED:credential]") == 1


def test_every_credential_name_ends_as_the_whole_text_check_looks_for() -> None:
    endings = [ending.removesuffix('":') for ending in _CREDENTIAL_ENDINGS]
    for name in (*_CREDENTIAL_NAMES, *_CREDENTIAL_SUFFIXES):
        assert name.endswith(tuple(endings)), name


def test_token_counts_are_not_credentials_and_take_the_plain_path() -> None:
    usage: Any = {"usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}
    assert _plain_form(usage, LIMIT, LIMIT, DEFAULT) == JsonForm(usage)


def test_plain_nested_data_takes_the_plain_path_and_shares_no_container() -> None:
    value: Any = {"results": [{"title": "Paris", "temp_c": 18}], "count": 1}
    form = _plain_form(value, LIMIT, LIMIT, DEFAULT)
    assert form == JsonForm(value)
    assert form is not None
    recorded: Any = form.value
    value["results"][0]["title"] = "changed after the call"
    assert recorded["results"][0]["title"] == "Paris"


def test_cycles_and_deep_nesting_are_marked_as_the_walk_marks_them() -> None:
    cyclic: list[object] = [1]
    cyclic.append({"again": cyclic})
    assert assert_same({"x": cyclic}).lossy
    deep: object = "bottom"
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    assert assert_same({"deep": deep}).lossy


@pytest.mark.parametrize("limit", [8, 40, 100, 400])
def test_limits_cut_exactly_as_the_walk_cuts(limit: int) -> None:
    value = {
        "items": [{"text": "x" * 30, "score": 0.125} for _ in range(6)],
        "floats": [1.5] * 20,
    }
    assert_same(value, max_string_bytes=limit, max_total_bytes=limit * 4, redaction=DEFAULT)
    assert_same(value, max_string_bytes=LIMIT, max_total_bytes=limit, redaction=DEFAULT)


@pytest.mark.parametrize(
    "numbers",
    [
        [1] * 40 + [10**15],  # a long list of ints is charged by its longest
        [1, 2.5] * 20,  # a long list with a float is charged 24 a number
        [0.5] * 50,
        [2**53 + 1] * 3,
    ],
    ids=["ints", "mixed", "floats", "big-ints"],
)
def test_budget_charges_for_numbers_cut_exactly_as_the_walk_cuts(numbers: list[Any]) -> None:
    for budget in range(40, 1400, 7):
        assert_same({"n": numbers}, max_total_bytes=budget, redaction=DEFAULT)


def test_wide_plain_data_takes_the_plain_path_and_deep_data_is_marked() -> None:
    wide: Any = {"items": [{"id": i, "tags": ["a", "b"], "t": "[x]"} for i in range(200)]}
    assert _plain_form(wide, LIMIT, LIMIT, DEFAULT) == JsonForm(wide)
    for depth in (MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1):
        deep: object = {"leaf": "[{not a bracket}]"}
        for _ in range(depth):
            deep = [deep, {"side": 1}]
        assert_same({"deep": deep}, redaction=DEFAULT)


def test_a_users_redactor_sees_every_string_on_its_own() -> None:
    seen: list[str] = []

    def shout(text: str) -> str:
        seen.append(text)
        return text.upper()

    redaction = Redaction([shout])
    form = assert_same({"a": [{"b": "quiet"}]}, redaction=redaction)
    assert form.value == {"A": [{"B": "QUIET"}]}
    assert "quiet" in seen


def test_arguments_with_nested_values_are_recorded_as_the_walk_records_them() -> None:
    bound = {"query": "weather", "filters": {"city": "Paris", "api_key": "k-123456"}}
    plain = json_arguments(bound, redaction=DEFAULT)
    walked = json_arguments(bound, redaction=DEFAULT, plain_first=False)
    assert exact(plain) == exact(walked)
    assert plain.value == {
        "query": "weather",
        "filters": {"city": "Paris", "api_key": "[REDACTED:credential]"},
    }


def test_json_text_is_clean_never_vouches_for_escaped_text() -> None:
    # Escapes hide a string's real characters from the whole-text scan.
    assert not json_text_is_clean(json.dumps({"k": "a\nb"}))
    assert json_text_is_clean(json.dumps({"k": "a b"}, separators=(",", ":")))


_WORDS = [
    "Paris",
    "naïve",
    "sk-" + "Z9" * 12,
    "Bearer tok3n.value",
    "x@y.z",
    "://u:p@h",
    'say "hi"',
    "two\nlines",
    "password",
    "API-Key",
    "tokens",
    "",
]


def _random_value(rng: random.Random, depth: int) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.45:
        return rng.choice(
            [
                rng.choice(_WORDS),
                rng.randint(-(10**20), 10**20),
                rng.random() * 1e6,
                True,
                None,
                " ".join(rng.choices(_WORDS, k=rng.randint(1, 4))),
            ]
        )
    if roll < 0.75:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {
        rng.choice(_WORDS) + str(rng.randint(0, 3)) if rng.random() < 0.8 else rng.choice(_WORDS): (
            _random_value(rng, depth + 1)
        )
        for _ in range(rng.randint(0, 5))
    }


@pytest.mark.parametrize("seed", range(8))
def test_random_plain_data_is_recorded_exactly_as_the_walk_records_it(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(250):
        value = {"v": _random_value(rng, 0), "w": [_random_value(rng, 1)]}
        limit = rng.choice([None, 64, 512, LIMIT])
        assert_same(value, max_string_bytes=limit, max_total_bytes=limit, redaction=DEFAULT)
        assert_same(value, max_string_bytes=limit, max_total_bytes=limit)
