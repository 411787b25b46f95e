"""Capture: arguments by name (SPEC section 6) and the recorded JSON form of live values."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import json
import math
import time
import uuid
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import pydantic
import pytest

from chronicle.recording import codecs
from chronicle.recording.arguments import ArgumentBinder
from chronicle.recording.capture import (
    MAX_DEPTH,
    JsonForm,
    dumps,
    json_arguments,
    json_form,
)


def loose(form: JsonForm) -> Any:
    """The captured JSON value, typed ``Any`` so that a test can index into it."""
    return form.value


# ---------------------------------------------------------------------------------------------
# Arguments by name


def sdk_create(
    model: Any,
    messages: Any,
    *,
    temperature: Any = 1.0,
    top_p: Any = 1.0,
    max_tokens: Any = None,
    stream: Any = False,
) -> tuple[Any, Any, Any]:
    return model, messages, temperature


def test_only_the_arguments_passed_are_recorded_not_the_defaults():
    binder = ArgumentBinder(sdk_create)
    bound = binder.bind(("gpt-4o",), {"messages": [], "temperature": 0.2})
    assert bound == {"model": "gpt-4o", "messages": [], "temperature": 0.2}


def test_positional_only_parameters_keep_their_names():
    def f(a, b, /, c):
        return a, b, c

    assert ArgumentBinder(f).bind((1, 2, 3), {}) == {"a": 1, "b": 2, "c": 3}


def test_star_args_keeps_its_name_and_holds_a_list():
    def f(first, *rest):
        return first, rest

    binder = ArgumentBinder(f)
    assert binder.bind((1, 2, 3), {}) == {"first": 1, "rest": [2, 3]}
    # No extra positionals passed: nothing to record under ``rest``.
    assert binder.bind((1,), {}) == {"first": 1}


def test_star_star_kwargs_is_flattened_into_top_level_keys():
    def f(query, **options):
        return query, options

    bound = ArgumentBinder(f).bind(("q",), {"limit": 3, "lang": "en"})
    assert bound == {"query": "q", "limit": 3, "lang": "en"}


def test_keyword_only_parameters_are_named():
    def f(a, *, flag, mode="x"):
        return a, flag, mode

    assert ArgumentBinder(f).bind((1,), {"flag": True}) == {"a": 1, "flag": True}


def test_self_of_a_method_decorated_in_the_class_body_is_skipped():
    class Agent:
        def step(self, goal, retries=0):
            return goal

    agent = Agent()
    # The decorator wraps the plain function, so ``self`` arrives as the first positional.
    binder = ArgumentBinder(Agent.__dict__["step"])
    assert binder.skips_first
    assert binder.positional_names == ("goal", "retries")
    assert binder.bind((agent, "plan"), {}) == {"goal": "plan"}
    # ``Agent.step(self=agent, goal=...)`` is legal Python, and ``self`` is still skipped.
    assert binder.bind((), {"self": agent, "goal": "plan"}) == {"goal": "plan"}


def test_a_first_parameter_named_cls_is_skipped():
    def make(cls, size):
        return cls, size

    assert ArgumentBinder(make).bind((object, 3), {}) == {"size": 3}


def test_classmethod_object_skips_its_first_parameter_whatever_its_name():
    class Factory:
        @classmethod
        def build(klass, size):
            return klass, size

    binder = ArgumentBinder(Factory.__dict__["build"])
    assert binder.bind((Factory, 3), {}) == {"size": 3}


def test_staticmethod_object_has_no_implicit_first_argument():
    class Tools:
        @staticmethod
        def add(a, b):
            return a + b

    assert ArgumentBinder(Tools.__dict__["add"]).bind((1, 2), {}) == {"a": 1, "b": 2}


def test_bound_method_signature_already_excludes_self():
    class Client:
        def get(self, url, timeout=5):
            return url

    binder = ArgumentBinder(Client().get)
    assert not binder.skips_first
    assert binder.bind(("https://x",), {"timeout": 1}) == {"url": "https://x", "timeout": 1}


def test_a_function_wrapped_with_functools_wraps_is_named_by_the_original():
    def original(city: str, units: str = "metric") -> str:
        return city

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return original(*args, **kwargs)

    assert ArgumentBinder(wrapper).bind(("Oslo",), {}) == {"city": "Oslo"}


def test_builtin_without_signature_puts_positionals_under_args():
    binder = ArgumentBinder(max)
    assert not binder.readable
    assert binder.bind((3, 7), {"default": 0}) == {"args": [3, 7], "default": 0}


def test_callable_whose_signature_raises_uses_the_fallback():
    class Odd:
        __signature__ = "not a signature"  # inspect.signature raises TypeError on this

        def __call__(self, *args, **kwargs):
            return args

    assert ArgumentBinder(Odd()).bind((1,), {"k": 2}) == {"args": [1], "k": 2}


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((1, 2, 3), {}, {"args": [1, 2, 3]}),  # too many positionals
        ((1,), {"bogus": 2}, {"args": [1], "bogus": 2}),  # unexpected keyword
        ((), {"b": 2}, {"b": 2}),  # missing required ``a``
        ((1,), {"a": 1}, {"args": [1], "a": 1}),  # two values for ``a``
    ],
)
def test_arguments_that_do_not_fit_use_the_fallback_and_the_call_still_raises(
    args, kwargs, expected
):
    def f(a: int, b: int = 0) -> int:
        return a + b

    assert ArgumentBinder(f).bind(args, kwargs) == expected
    with pytest.raises(TypeError):  # the caller still sees the real call's own error
        f(*args, **kwargs)


def test_fallback_moves_positionals_to_star_args_when_a_keyword_is_named_args():
    assert ArgumentBinder(max).bind((1, 2), {"args": 3}) == {"*args": [1, 2], "args": 3}


def test_fallback_of_a_method_still_leaves_out_self():
    class Agent:
        def step(self, goal):
            return goal

    binder = ArgumentBinder(Agent.__dict__["step"])
    assert binder.bind((Agent(), "a", "b"), {}) == {"args": ["a", "b"]}


def test_positional_only_name_also_passed_through_kwargs_cannot_be_flattened():
    def f(a, /, **kw):
        return a, kw

    # Legal Python: ``a`` is 1 and ``kw == {"a": 2}``; flattening would lose one of them.
    assert ArgumentBinder(f).bind((1,), {"a": 2}) == {"args": [1], "a": 2}


def test_bind_never_raises_on_a_hostile_mapping():
    class Hostile(Mapping[str, object]):
        def __getitem__(self, key: str) -> object:
            raise RuntimeError("no")

        def __iter__(self) -> Iterator[str]:
            raise RuntimeError("no")

        def __len__(self) -> int:
            return 1

    assert ArgumentBinder(sdk_create).bind(("m",), Hostile()) == {"args": ["m"]}


# Patching keyword arguments (hooks may return {"model": "gpt-4o-mini"})


def test_patch_replaces_an_argument_passed_by_position_in_place():
    binder = ArgumentBinder(sdk_create)
    args, kwargs = binder.patch(("gpt-4o", []), {}, {"model": "gpt-4o-mini"})
    assert (args, kwargs) == (("gpt-4o-mini", []), {})
    assert sdk_create(*args, **kwargs)[0] == "gpt-4o-mini"


def test_patch_replaces_a_keyword_and_adds_one_not_passed():
    binder = ArgumentBinder(sdk_create)
    original_kwargs = {"model": "gpt-4o", "messages": []}
    args, kwargs = binder.patch((), original_kwargs, {"model": "small", "temperature": 0.0})
    assert args == ()
    assert kwargs == {"model": "small", "messages": [], "temperature": 0.0}
    assert original_kwargs == {"model": "gpt-4o", "messages": []}  # the input is not modified


def test_patch_on_a_method_does_not_count_self_as_a_position():
    class Agent:
        def ask(self, model, prompt):
            return model

    agent = Agent()
    binder = ArgumentBinder(Agent.__dict__["ask"])
    args, kwargs = binder.patch((agent, "big", "hi"), {}, {"model": "small"})
    assert args == (agent, "small", "hi")
    assert Agent.__dict__["ask"](*args, **kwargs) == "small"


def test_patch_appends_a_positional_only_argument_filling_skipped_defaults():
    def f(a: Any, b: Any = 10, c: Any = 20, /) -> tuple[Any, Any, Any]:
        return a, b, c

    args, kwargs = ArgumentBinder(f).patch((1,), {}, {"c": 99})
    assert (args, kwargs) == ((1, 10, 99), {})
    assert f(*args, **kwargs) == (1, 10, 99)


def test_patch_of_the_star_args_name_replaces_the_extra_positionals():
    def f(first, *rest):
        return first, rest

    args, _ = ArgumentBinder(f).patch((1, 2, 3), {}, {"rest": [7]})
    assert args == (1, 7)


def test_patch_without_a_signature_adds_keywords():
    assert ArgumentBinder(max).patch((1, 2), {}, {"default": 0}) == ((1, 2), {"default": 0})


# ---------------------------------------------------------------------------------------------
# JSON form


def test_json_values_come_back_equal_and_not_lossy():
    value: dict[str, pydantic.JsonValue] = {
        "s": "x",
        "i": 3,
        "f": 1.5,
        "b": True,
        "n": None,
        "l": [1, [2]],
        "d": {"k": "v"},
    }
    form = json_form(value)
    assert form == JsonForm(value, lossy=False, truncated=False)


def test_recorded_value_does_not_change_when_the_caller_mutates_after_the_call():
    messages = [{"role": "user", "content": "hi"}]
    form = json_form({"messages": messages})
    # The classic agent loop: append the reply right after the call, before delivery runs.
    messages.append({"role": "assistant", "content": "hello"})
    messages[0]["content"] = "changed"
    assert form.value == {"messages": [{"role": "user", "content": "hi"}]}


def test_plain_scalars_are_returned_as_the_same_object():
    text = "a string"
    assert json_form(text).value is text


def test_a_large_flat_list_is_copied_too():
    numbers = list(range(100))
    form = json_form(numbers)
    numbers.append(100)
    assert form.value == list(range(100))


class Color(enum.Enum):
    RED = "red"
    COMPOSITE = (1, 2)


class Level(enum.IntEnum):
    HIGH = 3


class Mode(str, enum.Enum):  # noqa: UP042 (a str mixin is what this test captures)
    FAST = "fast"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ((1, "a"), [1, "a"]),
        ({3, 1, 2}, [1, 2, 3]),
        (frozenset({"b", "a"}), ["a", "b"]),
        (datetime.datetime(2024, 5, 1, 12, 30, 5), "2024-05-01T12:30:05"),
        (
            datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
            "2024-05-01T12:00:00+00:00",
        ),
        (datetime.date(2024, 5, 1), "2024-05-01"),
        (datetime.time(8, 15), "08:15:00"),
        (uuid.UUID("123e4567-e89b-12d3-a456-426614174000"), "123e4567-e89b-12d3-a456-426614174000"),
        (Decimal("12.50"), "12.50"),
        (Color.RED, "red"),
        (Color.COMPOSITE, [1, 2]),
        (Level.HIGH, 3),
        (Mode.FAST, "fast"),
        (b"\x00\xffhi", {"$bytes": "AP9oaQ=="}),
        (bytearray(b"hi"), {"$bytes": "aGk="}),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        ({1: "a", None: "b"}, {"1": "a", "None": "b"}),
        ({Color.RED: 1}, {"red": 1}),
    ],
)
def test_defined_forms(value, expected):
    form = json_form(value)
    assert form.value == expected
    assert type(form.value) is type(expected)
    assert not form.lossy
    assert form.binary is isinstance(value, (bytes, bytearray))


def test_subclasses_of_json_types_become_the_plain_type():
    class Name(str):
        def __str__(self) -> str:
            return "overridden"

    class Count(int):
        pass

    class Ratio(float):
        pass

    form = json_form([Name("ada"), Count(2), Ratio(0.5)])
    assert form.value == ["ada", 2, 0.5]
    assert [type(item) for item in form.value] == [str, int, float]


def test_a_set_that_cannot_be_sorted_keeps_every_item():
    form = json_form({1, "a"})
    assert sorted(loose(form), key=str) == [1, "a"]
    assert not form.lossy


def test_non_str_keys_that_collide_are_lossy():
    form = json_form({1: "int key", "1": "str key"})
    assert form.value == {"1": "str key"}
    assert form.lossy


class Address(pydantic.BaseModel):
    city: str


class User(pydantic.BaseModel):
    name: str
    joined: datetime.datetime
    address: Address
    score: float = 0.0


def test_pydantic_models_use_their_json_dump():
    user = User(name="ada", joined=datetime.datetime(2024, 1, 2), address=Address(city="Oslo"))
    form = json_form(user)
    assert form.value == {
        "name": "ada",
        "joined": "2024-01-02T00:00:00",
        "address": {"city": "Oslo"},
        "score": 0.0,
    }
    assert not form.lossy


def test_pydantic_dump_is_walked_too_so_nan_is_still_json():
    user = User(name="ada", joined=datetime.datetime(2024, 1, 2), address=Address(city="x"))
    user.score = float("nan")
    assert loose(json_form(user))["score"] == "NaN"


def test_pydantic_model_whose_dump_raises_becomes_a_lossy_marker():
    class Broken(pydantic.BaseModel):
        x: int = 1

        @pydantic.model_serializer
        def _dump(self) -> dict[str, int]:
            raise RuntimeError("cannot dump")

    form = json_form({"ok": 1, "bad": Broken()})
    assert loose(form)["ok"] == 1
    assert set(loose(form)["bad"]) == {"$repr"}
    assert form.lossy


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Shape:
    name: str
    points: list[Point]
    when: datetime.date
    label: str = dataclasses.field(init=False)


def test_dataclasses_become_a_dict_of_fields_recursively():
    shape = Shape("tri", [Point(0, 0), Point(1, 2)], datetime.date(2024, 1, 1))
    shape.label = "T"
    form = json_form(shape)
    assert form.value == {
        "name": "tri",
        "points": [{"x": 0, "y": 0}, {"x": 1, "y": 2}],
        "when": "2024-01-01",
        "label": "T",
    }
    assert not form.lossy


def test_a_dataclass_field_that_cannot_be_read_is_marked_and_the_rest_kept():
    shape = Shape("tri", [], datetime.date(2024, 1, 1))  # ``label`` is never set
    form = json_form(shape)
    assert loose(form)["name"] == "tri"
    assert loose(form)["label"] == {"$repr": "<unreadable field label>"}
    assert form.lossy


class Opaque:
    def __repr__(self) -> str:
        return "Opaque(7)"


def test_anything_else_is_its_repr_and_lossy():
    form = json_form({"thing": Opaque()})
    assert form.value == {"thing": {"$repr": "Opaque(7)"}}
    assert form.lossy


def test_a_huge_repr_is_bounded():
    class Huge:
        def __repr__(self) -> str:
            return "Huge(" + "x" * 1_000_000 + ")"

    marker = loose(json_form(Huge()))["$repr"]
    assert len(marker) <= 1000
    assert marker.startswith("Huge(xxx")
    assert marker.endswith("xxx)")


class Grumpy:
    def __repr__(self) -> str:
        raise ValueError("no repr for you")


def test_a_repr_that_raises_gives_the_unrepresentable_marker():
    form = json_form([Grumpy()])
    assert form.value == [{"$repr": "<unrepresentable Grumpy>"}]
    assert form.lossy


def test_objects_whose_eq_hash_and_repr_raise_never_break_capture():
    class Hostile:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("eq")

        def __hash__(self) -> int:
            raise RuntimeError("hash")

        def __repr__(self) -> str:
            raise RuntimeError("repr")

    form = json_form({"h": Hostile(), "items": [Hostile(), "ok"]})
    assert form.lossy
    assert loose(form)["items"][1] == "ok"
    assert loose(form)["h"]["$repr"].startswith("<unrepresentable")


def test_a_model_whose_computed_property_raises_never_breaks_capture():
    class Invoice(pydantic.BaseModel):
        amount: int

        @pydantic.computed_field  # type: ignore[prop-decorator]  # pydantic documents this form
        @property
        def total(self) -> int:
            raise RuntimeError("property failed")

        def __repr__(self) -> str:
            return "Invoice(amount=3)"

    form = json_form({"invoice": Invoice(amount=3), "note": "kept"})
    assert form.value == {"invoice": {"$repr": "Invoice(amount=3)"}, "note": "kept"}
    assert form.lossy


def test_a_mapping_whose_iteration_raises_becomes_a_marker_without_spoiling_the_rest():
    class Exploding(Mapping[str, object]):
        def __getitem__(self, key: str) -> object:
            return 1

        def __iter__(self) -> Iterator[str]:
            yield "a"
            raise RuntimeError("mid-iteration")

        def __len__(self) -> int:
            return 2

        def __repr__(self) -> str:
            return "Exploding()"

    form = json_form({"fine": [1, 2], "bad": Exploding()})
    assert form.value == {"fine": [1, 2], "bad": {"$repr": "Exploding()"}}
    assert form.lossy


@pytest.mark.parametrize(
    "items", [tuple(range(40)), ("x",) * 40, (1.5,) * 40], ids=["ints", "strings", "floats"]
)
def test_a_long_tuple_of_plain_values_is_a_list_described_as_a_tuple(items):
    # Long flat sequences take the C-speed copy, a tuple as well as a list.
    form = json_form({"t": items}, types=True)
    assert form.value == {"t": list(items)}
    assert form.types == {"/t": codecs.TUPLE}
    assert not form.lossy


@dataclasses.dataclass
class _Pair:
    left: int
    right: tuple[int, int]


def test_described_values_nested_in_each_other_are_each_described():
    form = json_form([_Pair(1, (2, 3))], types=True)
    assert form.value == [{"left": 1, "right": [2, 3]}]
    assert form.types is not None
    assert set(form.types) == {"/0", "/0/right"}
    assert form.types["/0/right"] == codecs.TUPLE
    assert not form.lossy


def test_cycles_become_a_cycle_marker():
    items: list[object] = [1]
    items.append(items)
    holder: dict[str, object] = {"name": "loop"}
    holder["self"] = holder
    form = json_form({"list": items, "dict": holder})
    assert form.value == {
        "list": [1, {"$repr": "<cycle>"}],
        "dict": {"name": "loop", "self": {"$repr": "<cycle>"}},
    }
    assert form.lossy


def test_a_dataclass_cycle_is_detected_too():
    @dataclasses.dataclass
    class Node:
        name: str
        next: object = None

    node = Node("a")
    node.next = node
    assert json_form(node).value == {"name": "a", "next": {"$repr": "<cycle>"}}


def test_a_shared_reference_is_not_a_cycle():
    shared = {"k": "v"}
    form = json_form([shared, shared, {"again": shared}])
    assert form.value == [{"k": "v"}, {"k": "v"}, {"again": {"k": "v"}}]
    assert not form.lossy


class _Step:
    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"_Step({self.number})"


class _OneMoreStep(codecs.Codec):
    """A broken codec: each value it encodes becomes another value it claims."""

    name = "test.one_more_step"

    def claims(self, cls: type) -> bool:
        return cls is _Step

    def encode(self, value: object) -> object:
        assert isinstance(value, _Step)
        return _Step(value.number + 1)


def test_a_codec_encoding_into_values_it_claims_forever_ends_in_a_marker(monkeypatch):
    # Also run against the compiled module (make test-compiled), whose calls Python's recursion
    # limit does not count: there the walk's own bound is what stops it.
    monkeypatch.setattr(codecs, "_CODECS", dict(codecs._CODECS))
    monkeypatch.setattr(codecs, "_CLAIMING", list(codecs._CLAIMING))
    monkeypatch.setattr(codecs, "_CLAIMED", {})
    codecs.register(_OneMoreStep())
    form = json_form({"step": _Step(0), "next": "fine"}, types=True)
    assert form.lossy
    value: Any = form.value
    assert value["next"] == "fine"
    assert set(value["step"]) == {"$repr"}


def test_nesting_beyond_the_depth_limit_becomes_a_bounded_marker():
    deep: list[object] = []
    current = deep
    for _ in range(200):
        inner: list[object] = []
        current.append(inner)
        current = inner
    form = json_form(deep)
    levels = 0
    value: Any = form.value
    while isinstance(value, list):
        value = value[0]
        levels += 1
    assert levels == MAX_DEPTH  # 64 levels kept, the 65th is the marker
    assert isinstance(value, dict)
    assert value["$repr"].startswith("[[[")
    assert len(value["$repr"]) < 100
    assert form.lossy


def fastest(runs: int, work: Any) -> float:
    """The shortest of ``runs`` timings of ``work()``, in seconds (the least disturbed)."""
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        timings.append(time.perf_counter() - start)
    return min(timings)


def test_a_million_ints_is_fast():
    """Faster than the standard library's JSON round trip of the same list, timed alongside."""
    numbers = list(range(1_000_000))
    form = json_form(numbers)
    assert form.value == numbers
    elapsed = fastest(2, lambda: json_form(numbers))
    baseline = fastest(2, lambda: json.loads(json.dumps(numbers)))
    assert elapsed < baseline, (elapsed, baseline)


def test_a_large_list_of_mixed_small_values_is_linear():
    """Ten times the rows take about ten times as long (quadratic would be a hundred)."""
    rows = [{"id": i, "name": f"row {i}"} for i in range(100_000)]
    form = json_form(rows, max_string_bytes=1024)
    assert len(loose(form)) == 100_000
    small = fastest(3, lambda: json_form(rows[:10_000], max_string_bytes=1024))
    large = fastest(2, lambda: json_form(rows, max_string_bytes=1024))
    assert large < 30 * small, (large, small)


def test_a_flat_list_with_a_non_finite_float_is_still_converted():
    values = [0.5] * 100 + [math.inf]
    assert loose(json_form(values))[-1] == "Infinity"


def test_a_huge_int_in_a_long_list_does_not_break_the_fast_copy():
    values = [1.5] * 100 + [10**400]
    assert loose(json_form(values))[-1] == 10**400


# Truncation


def test_a_long_string_is_cut_with_the_exact_suffix():
    form = json_form("a" * 100, max_string_bytes=10)
    assert form.value == "a" * 10 + "…[truncated 90 bytes]"
    assert form.truncated
    assert not form.lossy


def test_bytes_longer_than_the_limit_are_cut_and_flagged_lossy():
    form = json_form({"blob": b"\x00" * 30}, max_string_bytes=8)
    assert form.value == {"blob": {"$bytes": "AAAAAAAA…[truncated 24 bytes of binary data]"}}
    assert form.lossy and form.truncated and form.binary
    assert json_form(b"\x00" * 3, max_string_bytes=8) == JsonForm({"$bytes": "AAAA"}, binary=True)


def test_truncation_cuts_on_a_character_boundary_and_counts_bytes():
    # "é" is 2 bytes: 10 of them are 20 bytes; 5 bytes keep 2 characters (4 bytes).
    assert json_form("é" * 10, max_string_bytes=5).value == "éé…[truncated 16 bytes]"
    # "🙂" is 4 bytes: 3 bytes cannot hold one.
    assert json_form("🙂🙂", max_string_bytes=3).value == "…[truncated 8 bytes]"


def test_strings_within_the_limit_are_untouched_and_not_flagged():
    form = json_form({"a": "x" * 10, "b": "é" * 5}, max_string_bytes=10)
    assert form.value == {"a": "x" * 10, "b": "é" * 5}
    assert not form.truncated


def test_nested_strings_and_keys_are_cut():
    long_key = "k" * 50
    form = json_form({long_key: ["y" * 30, {"z": "w" * 30}]}, max_string_bytes=20)
    assert form.value == {
        "k" * 20 + "…[truncated 30 bytes]": [
            "y" * 20 + "…[truncated 10 bytes]",
            {"z": "w" * 20 + "…[truncated 10 bytes]"},
        ]
    }
    assert form.truncated


def test_strings_in_a_long_flat_list_are_cut_too():
    form = json_form(["short"] * 50 + ["x" * 100], max_string_bytes=10)
    assert loose(form)[-1] == "x" * 10 + "…[truncated 90 bytes]"
    assert loose(form)[0] == "short"


def test_a_lone_surrogate_is_written_out_before_truncation():
    form = json_form("\ud800" * 10, max_string_bytes=6)
    assert form.value == "\\ud800…[truncated 54 bytes]"
    assert form.lossy


# Arguments as JSON


def test_json_arguments_converts_each_argument_on_its_own():
    form = json_arguments({"query": "weather", "when": datetime.date(2024, 1, 1), "x": Grumpy()})
    assert loose(form)["query"] == "weather"
    assert loose(form)["when"] == "2024-01-01"
    assert loose(form)["x"]["$repr"].startswith("<unrepresentable")
    assert form.lossy


def test_json_arguments_cuts_a_long_string_argument_and_keeps_short_ones():
    form = json_arguments({"query": "q" * 40, "lang": "en", "n": 3}, max_string_bytes=8)
    assert form.value == {"query": "q" * 8 + "…[truncated 32 bytes]", "lang": "en", "n": 3}
    assert form.truncated
    assert not form.lossy


def test_json_arguments_of_plain_values_is_not_lossy_or_truncated():
    form = json_arguments({"query": "weather", "limit": 5, "exact": False, "cursor": None})
    assert form == JsonForm({"query": "weather", "limit": 5, "exact": False, "cursor": None})


def test_json_arguments_end_to_end_with_a_binder():
    binder = ArgumentBinder(sdk_create)
    bound = binder.bind(("gpt-4o",), {"messages": [{"role": "user", "content": "x" * 40}]})
    form = json_arguments(bound, max_string_bytes=8)
    assert form.value == {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "x" * 8 + "…[truncated 32 bytes]"}],
    }
    assert form.truncated


# dumps


def test_dumps_is_compact_and_keeps_non_ascii():
    assert dumps({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'


def test_dumps_never_raises_on_values_that_are_not_json():
    assert dumps({"x": float("nan")}) == '{"x":"NaN"}'
    not_json: Any = {"o": Opaque()}
    assert dumps(not_json) == '{"o":{"$repr":"Opaque(7)"}}'
