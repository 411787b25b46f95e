"""Volatile fields: input paths fresh on every run (ids, timestamps) are not held against a replay.

A user declares them with ``ignore=[...]`` (on ``replay``/``replay_trace``, the pytest marker and
``chronicle_config``); the built-in defaults cover what frameworks and providers mint per run
(``tests/test_langgraph_recipe.py`` shows them on a real LangGraph agent).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import JsonValue

import chronicle
from chronicle.replay.divergence import Volatile
from chronicle.save.incident import Incident
from chronicle.testing import capture

TICKS = itertools.count()


@chronicle.boundary("lookup", kind="tool")
def lookup(order: dict[str, Any]) -> str:
    return f"order {order['number']} is late"


@chronicle.boundary("answer", kind="tool")
def answer(note: str) -> str:
    return note.upper()


def agent(number: int) -> str:
    order = {"number": number, "request": {"sent_at": f"12:00:0{next(TICKS) % 10}", "id": "r"}}
    return answer(lookup(order))


def recorded_agent() -> list[Any]:
    with capture() as sent:
        with chronicle.record("volatile"):
            agent(7)
    return sent.envelopes


def test_an_ignored_path_is_not_compared_and_a_real_change_still_is():
    envelopes = recorded_agent()
    with pytest.raises(chronicle.ReplayDivergenceError, match=r"order\.request\.sent_at"):
        with chronicle.replay(envelopes, strict=True):
            agent(7)  # a fresh timestamp
    with chronicle.replay(envelopes, strict=True, ignore=["request.sent_at"]) as run:
        assert agent(7) == "ORDER 7 IS LATE"
    assert run.divergences() == []
    with chronicle.replay(envelopes, ignore=["*.sent_at"]) as run:
        agent(8)  # a real change
    (found,) = run.divergences()
    assert found.diff == "order.number: 7 -> 8"  # the ignored path is not in the diff


@pytest.mark.parametrize(
    ("pattern", "ignored"),
    [
        ("sent_at", True),  # a name alone: at any depth
        ("order.request.sent_at", True),
        ("order.**.sent_at", True),
        ("order.*.sent_at", True),
        ("order.sent_at", False),  # a path must match whole segments
        ("request", True),  # a whole subtree
        ("order.number", False),
    ],
)
def test_patterns_match_paths_that_end_with_them(pattern, ignored):
    recorded: JsonValue = {"order": {"number": 1, "request": {"sent_at": "a", "id": "r"}}}
    live: JsonValue = {"order": {"number": 1, "request": {"sent_at": "b", "id": "r"}}}
    strip = Volatile([pattern]).strip
    assert (strip(recorded) == strip(live)) is ignored


def test_list_items_and_quoted_keys():
    strip = Volatile(['messages[*].meta["trace id"]', "rows[1]"]).strip
    value: JsonValue = {
        "messages": [{"meta": {"trace id": "x", "k": 1}}, {"meta": {"trace id": "y"}}],
        "rows": [1, 2, 3],
    }
    assert strip(value) == {
        "messages": [{"meta": {"k": 1}}, {"meta": {}}],
        "rows": [1, "<ignored>", 3],
    }


@pytest.mark.parametrize("bad", ["", "a..b", "a[x]", ".a", "**", 3])
def test_a_bad_pattern_is_refused_before_anything_runs(bad):
    envelopes = recorded_agent()
    with pytest.raises((ValueError, TypeError), match=r"ignore pattern|path string"):
        chronicle.replay(envelopes, ignore=[bad])


def test_the_defaults_ignore_what_frameworks_and_providers_mint_per_run():
    import uuid

    from langchain_core.messages import AIMessage, HumanMessage

    @chronicle.boundary("summarize", kind="tool")
    def summarize(messages: list[Any], previous: dict[str, Any]) -> int:
        return len(messages)

    def run() -> int:
        fresh = str(uuid.uuid4())
        messages = [HumanMessage("hi", id=fresh), AIMessage("hello", id=f"run-{fresh}")]
        previous = {"object": "chat.completion", "id": f"chatcmpl-{fresh}", "created": 1, "n": 1}
        return summarize(messages, {**previous, "_request_id": fresh})

    with capture() as sent:
        with chronicle.record("defaults"):
            run()
    with chronicle.replay(sent.envelopes, strict=True) as replayed:
        assert run() == 2
    assert replayed.divergences() == []

    @chronicle.boundary("summarize", kind="tool")
    def summarize_changed(messages: list[Any], previous: dict[str, Any]) -> int:
        raise AssertionError("stubbed")

    with chronicle.replay(sent.envelopes) as replayed:
        summarize_changed([HumanMessage("bye", id="x")], {"object": "chat.completion", "n": 2})
    (found,) = replayed.divergences()
    first, second, third = found.diff.splitlines()  # no id, created or request id in it
    assert first == 'messages[0].content: "hi" -> "bye"'
    assert second.startswith('messages[1]: {"content": "hello"') and "(missing)" in second
    assert third == "previous.n: 1 -> 2"


def test_the_pytest_marker_and_chronicle_config_take_ignore(pytester):
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    with capture() as sent:
        with chronicle.record("late"):
            answer(lookup({"number": 7, "request": {"sent_at": "12:00:00", "id": "r"}}))
    Incident.of(sent.envelopes).write(pytester.path / "late.json")
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def chronicle_config():
            return {"ignore": ["request.id"]}
        """
    )
    pytester.makepyfile(
        test_late="""
        import itertools
        import pytest
        import chronicle

        TICKS = itertools.count(5)

        @chronicle.boundary("lookup", kind="tool")
        def lookup(order):
            raise AssertionError("stubbed")

        @chronicle.boundary("answer", kind="tool")
        def answer(note):
            raise AssertionError("stubbed")

        def agent(request_id):
            order = {"number": 7, "request": {"sent_at": f"12:00:0{next(TICKS)}", "id": request_id}}
            return answer(lookup(order))

        @pytest.mark.chronicle_replay("late.json", ignore=["sent_at"])
        def test_ignored():
            assert agent("fresh") == "ORDER 7 IS LATE"

        @pytest.mark.chronicle_replay("late.json")
        def test_not_ignored():
            agent("r")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*order.request.sent_at:*"])
