"""Replay follows the recorded call tree: sub-agents nested in sub-agents, as users build them.

The agent: an ``orchestrator`` runs two ``researcher`` sub-agents; each asks a ``planner`` (a
model call through a wrapped OpenAI client, against the local model server) and then a
``web_search`` tool. Everything is recorded to the real control plane and replayed from it.

What the recording holds, span-wide numbering as ``chronicle show`` prints it::

    orchestrator#1
      researcher#1   planner#1  web_search#1   (topic "refunds A")
      researcher#2   planner#2  web_search#2   (topic "refunds B")
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

import chronicle
from tests.support.llm_server import LlmServer, chat_text, streamed
from tests.support.stored import stored

INDEX: dict[str, list[str]] = {}
"""What ``web_search`` finds: changed after recording, so a live search would be noticed."""
LIVE: list[str] = []
"""The boundaries whose code actually ran, in order."""


class Agent:
    def __init__(self, server: LlmServer) -> None:
        self.client = chronicle.wrap(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-local", max_retries=0)
        )
        self.extra_plan = False  # a changed sub-agent: asks its planner twice
        self.stream = False  # the planner's answer streamed (read chunk by chunk)

        @chronicle.boundary("web_search", kind="tool")
        def web_search(query: str) -> dict[str, Any]:
            LIVE.append("web_search")
            return {"hits": list(INDEX.get(query, []))}

        @chronicle.boundary("researcher", kind="tool")
        def researcher(topic: str) -> dict[str, Any]:
            LIVE.append("researcher")
            plan = self.plan(topic)
            if self.extra_plan:
                plan = self.plan(plan)
            found = web_search(plan)
            return {"topic": topic, "query": plan, "hits": found["hits"]}

        @chronicle.boundary("orchestrator", kind="tool")
        def orchestrator(topics: list[str]) -> list[dict[str, Any]]:
            LIVE.append("orchestrator")
            return [researcher(topic) for topic in topics]

        self.web_search, self.researcher, self.orchestrator = web_search, researcher, orchestrator

    def plan(self, topic: str) -> str:
        messages: Any = [
            {"role": "system", "content": "Turn the topic into one search query."},
            {"role": "user", "content": topic},
        ]
        if self.stream:
            chunks = self.client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, stream=True
            )
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        answer = self.client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        return answer.choices[0].message.content or ""


PLANNER = "openai.chat.completions.create"
Recorded = tuple[Agent, Any, list[dict[str, Any]]]
TOPICS = ["refunds A", "refunds B"]


@pytest.fixture
def recorded(recording: Any, llm_server: LlmServer) -> Iterator[Recorded]:
    """The orchestrator's run, recorded: ``(agent, session, result)``; then the world changes."""
    INDEX.clear()
    INDEX.update({"query A": ["refunds A"], "query B": ["refunds B"]})
    agent = Agent(llm_server)
    llm_server.reply_with(chat_text("query A"), chat_text("query B"))
    with chronicle.record("research") as session:
        result = agent.orchestrator(TOPICS)
    assert result == [
        {"topic": "refunds A", "query": "query A", "hits": ["refunds A"]},
        {"topic": "refunds B", "query": "query B", "hits": ["refunds B"]},
    ]
    saved = recording.saved(session.trace_id, 7)
    by_id = {e["envelope_id"]: e for e in saved}
    parents = {
        f"{e['name']}#{e['metadata']['chronicle.invocation_index']}": (
            by_id[e["parent_envelope_id"]]["name"] if e.get("parent_envelope_id") else None
        )
        for e in saved
    }
    assert parents == {
        "orchestrator#1": None,
        "researcher#1": "orchestrator",
        "researcher#2": "orchestrator",
        f"{PLANNER}#1": "researcher",
        f"{PLANNER}#2": "researcher",
        "web_search#1": "researcher",
        "web_search#2": "researcher",
    }
    INDEX.clear()  # a live search now finds nothing: a replay must not search
    LIVE.clear()
    requests = llm_server.request_count
    try:
        yield agent, session, result
    finally:
        agent.client.close()
    assert llm_server.request_count == requests, "a replay called the model"


def log(run: Any) -> list[tuple[str, int, str]]:
    return [(c.name, c.invocation_index, c.mode) for c in run.call_log()]


def test_unchanged_nested_agents_replay_strictly_with_zero_divergences(recorded):
    agent, session, result = recorded
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        assert agent.orchestrator(TOPICS) == result
    assert run.divergences() == []
    assert log(run) == [("orchestrator", 1, "stub")]  # its subtree was consumed with it
    assert LIVE == []


def test_a_sub_agent_run_live_is_served_its_own_branch_of_the_recording(recorded):
    agent, session, result = recorded
    plan = chronicle.ReplayPlan().run("researcher", 2)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        assert agent.orchestrator(TOPICS) == result
    # researcher#2 ran; what it called was served what researcher#2 called, not researcher#1's
    assert run.captured_result("researcher", 2) == result[1]
    planned = run.captured_result(PLANNER, 2)
    assert isinstance(planned, ChatCompletion) and planned.choices[0].message.content == "query B"
    assert run.captured_result("web_search", 2) == {"hits": ["refunds B"]}
    assert log(run) == [
        ("orchestrator", 1, "run"),  # on the path to the cut-point: a child needs its parent
        ("researcher", 1, "stub"),
        ("researcher", 2, "run"),
        (PLANNER, 2, "stub"),
        ("web_search", 2, "stub"),
    ]
    assert LIVE == ["orchestrator", "researcher"]
    assert run.divergences() == []


def test_streamed_planners_inside_sub_agents_replay_from_their_own_branch_and_run_live(
    recording, llm_server
):
    """A sub-agent whose model call streams: stubbed inside a live sub-agent it is served that
    sub-agent's recorded chunks; run live there, it streams from the model and is captured."""
    INDEX.clear()
    INDEX.update({"query A": ["refunds A"], "query B": ["refunds B"]})
    agent = Agent(llm_server)
    agent.stream = True
    llm_server.reply_with(
        streamed(chat_text("query A"), deltas=3), streamed(chat_text("query B"), deltas=3)
    )
    try:
        with chronicle.record("research-streamed") as session:
            result = agent.orchestrator(TOPICS)
        assert [r["query"] for r in result] == ["query A", "query B"]
        recording.saved(session.trace_id, 7)
        LIVE.clear()
        before = llm_server.request_count
        plan = chronicle.ReplayPlan().run("researcher", 2)
        with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
            assert agent.orchestrator(TOPICS) == result
        assert llm_server.request_count == before  # the stream was served, not requested
        assert log(run) == [
            ("orchestrator", 1, "run"),
            ("researcher", 1, "stub"),
            ("researcher", 2, "run"),
            (PLANNER, 2, "stub"),
            ("web_search", 2, "stub"),
        ]
        assert run.divergences() == []

        llm_server.reply_with(streamed(chat_text("query B, fresh"), deltas=4))
        INDEX["query B, fresh"] = ["refunds B (fresh)"]
        plan = chronicle.ReplayPlan().run(PLANNER, 2)
        with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
            live = agent.orchestrator(TOPICS)
        assert llm_server.request_count == before + 1  # only planner#2 reached the model
        assert live[0] == result[0]
        assert live[1] == {**result[1], "query": "query B, fresh"}  # the search is stubbed
        assert log(run)[-2:] == [(PLANNER, 2, "run"), ("web_search", 2, "stub")]
        assert run.captured_result(PLANNER, 2) is not None  # the live stream was captured
        # the stubbed search after the cut-point was asked something new: said, not failed
        assert [(d.name, d.index) for d in run.divergences()] == [("web_search", 2)]
    finally:
        agent.client.close()


def test_a_cut_point_deep_in_the_tree_runs_its_ancestors_and_stubs_its_siblings(recorded):
    agent, session, result = recorded
    INDEX["query B"] = ["refunds B", "refunds B (new)"]  # the live search finds more now
    plan = chronicle.ReplayPlan().run("web_search", 2)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        live = agent.orchestrator(TOPICS)
    assert live == [result[0], {**result[1], "hits": ["refunds B", "refunds B (new)"]}]
    assert log(run) == [
        ("orchestrator", 1, "run"),
        ("researcher", 1, "stub"),
        ("researcher", 2, "run"),
        (PLANNER, 2, "stub"),
        ("web_search", 2, "run"),
    ]
    assert run.captured_input("web_search", 2) == {"query": "query B"}
    assert run.divergences() == []


def test_a_rule_naming_the_parent_itself_wins_over_the_path_to_a_cut_point(recorded):
    agent, session, result = recorded
    plan = chronicle.ReplayPlan().run("web_search", 2).stub("researcher", 2)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
        assert agent.orchestrator(TOPICS) == result
    assert [c for c in log(run) if c[0] == "researcher"] == [
        ("researcher", 1, "stub"),
        ("researcher", 2, "stub"),
    ]
    (found,) = run.divergences()  # web_search#2 could not be reached: said, not hidden
    assert (found.kind, found.name, found.index) == ("plan", "web_search", 2)


def test_an_extra_call_under_a_live_sub_agent_names_the_call_that_made_it(recorded):
    agent, session, _ = recorded
    agent.extra_plan = True  # researcher now asks its planner twice
    plan = chronicle.ReplayPlan().run("researcher", 2)
    with pytest.raises(chronicle.ReplayMismatchError) as raised:
        with chronicle.replay_trace(session.trace_id, session.span_id, plan):
            agent.orchestrator(TOPICS)
    message = str(raised.value)
    assert f"call 3 of {PLANNER!r} made by researcher#2 has no recording" in message
    assert f"the recorded researcher#2 has only 1 call to {PLANNER!r}" in message
    assert f"ReplayPlan().run({PLANNER!r}, 3)" in message
    assert (raised.value.parent, raised.value.invocation) == ("researcher#2", 3)


def test_a_call_a_live_sub_agent_no_longer_makes_is_reported_alone(recorded):
    agent, session, _ = recorded
    plan = chronicle.ReplayPlan().run("researcher", 2)
    # The changed sub-agent no longer searches.
    calls: list[str] = []

    @chronicle.boundary("researcher", kind="tool")
    def researcher(topic: str) -> dict[str, Any]:
        calls.append(topic)
        return {"topic": topic, "query": agent.plan(topic), "hits": []}

    @chronicle.boundary("orchestrator", kind="tool")
    def orchestrator(topics: list[str]) -> list[dict[str, Any]]:
        return [researcher(topic) for topic in topics]

    with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
        orchestrator(TOPICS)
    assert calls == ["refunds B"]
    found = [(d.kind, d.name, d.index) for d in run.divergences()]
    # researcher#1 was stubbed (its subtree consumed); researcher#2 ran and skipped one call
    assert found == [("unused", "web_search", 2)]


def test_parallel_sub_agents_match_by_input_within_their_own_branch(recorded):
    agent, session, result = recorded

    @chronicle.boundary("orchestrator", kind="tool")
    def orchestrator(topics: list[str]) -> list[dict[str, Any]]:
        start = threading.Barrier(len(topics))

        def one(topic: str) -> Any:
            start.wait(5)
            return agent.researcher(topic)

        with ThreadPoolExecutor(max_workers=len(topics)) as pool:
            return list(pool.map(one, topics))

    plan = chronicle.ReplayPlan().run("researcher")
    for _ in range(5):  # threads interleave differently each time
        with chronicle.replay_trace(
            session.trace_id, session.span_id, plan, match="input", strict=True
        ) as run:
            assert orchestrator(list(reversed(TOPICS))) == list(reversed(result))
        assert run.divergences() == []
        served = {(c.name, c.invocation_index) for c in run.call_log()}
        assert served == {
            ("orchestrator", 1),
            ("researcher", 1),
            ("researcher", 2),
            (PLANNER, 1),
            (PLANNER, 2),
            ("web_search", 1),
            ("web_search", 2),
        }
        assert run.captured_result("web_search", 1) == {"hits": ["refunds A"]}


def test_async_sub_agents_gathered_replay_their_own_branches(recording, llm_server):
    clients: list[openai.AsyncOpenAI] = []  # one per event loop: its connections belong to it

    @chronicle.boundary("lookup", kind="tool")
    async def lookup(query: str) -> str:
        await asyncio.sleep(0.01 if query.endswith("A") else 0)
        return INDEX[query][0]

    @chronicle.boundary("researcher", kind="tool")
    async def researcher(topic: str) -> str:
        # The scripted model answers in arrival order: A asks first, B finishes its lookup first.
        await asyncio.sleep(0 if topic.endswith("A") else 0.05)
        answer = await clients[-1].chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": topic}]
        )
        return await lookup(answer.choices[0].message.content or "")

    async def main() -> list[str]:
        base_url = llm_server.openai_base_url
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
        async with chronicle.wrap(client):
            clients.append(client)
            return list(await asyncio.gather(researcher("refunds A"), researcher("refunds B")))

    INDEX.clear()
    INDEX.update({"query A": ["found A"], "query B": ["found B"]})
    llm_server.reply_with(chat_text("query A"), chat_text("query B"))
    with chronicle.record("async research") as session:
        assert asyncio.run(main()) == ["found A", "found B"]
    recording.saved(session.trace_id, 6)
    INDEX.clear()
    requests = llm_server.request_count
    plan = chronicle.ReplayPlan().run("researcher")
    with chronicle.replay_trace(
        session.trace_id, session.span_id, plan, match="input", strict=True
    ) as run:
        assert asyncio.run(main()) == ["found A", "found B"]
    assert run.divergences() == []
    assert llm_server.request_count == requests
    assert {run.captured_result("lookup", n) for n in (1, 2)} == {"found A", "found B"}


def test_a_generator_sub_agent_with_children_replays_stubbed_and_live(recording):
    @chronicle.boundary("fetch", kind="tool")
    def fetch(page: int) -> dict[str, Any]:
        return {"page": page, "rows": INDEX.get(f"page {page}", [])}

    @chronicle.boundary("pages", kind="tool")
    def pages(count: int) -> Iterator[dict[str, Any]]:
        for page in range(1, count + 1):
            yield fetch(page)

    @chronicle.boundary("crawler", kind="tool")
    def crawler() -> list[dict[str, Any]]:
        first = list(pages(2))
        second = list(pages(1))
        return first + second

    INDEX.clear()
    INDEX.update({"page 1": ["a"], "page 2": ["b"]})
    with chronicle.record("crawl") as session:
        result = crawler()
    assert [r["rows"] for r in result] == [["a"], ["b"], ["a"]]
    recording.saved(session.trace_id, 6)
    INDEX.clear()

    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as run:
        assert crawler() == result
    assert log(run) == [("crawler", 1, "stub")]

    plan = chronicle.ReplayPlan().run("pages", 2)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        assert crawler() == result
    assert log(run) == [
        ("crawler", 1, "run"),
        ("pages", 1, "stub"),
        ("pages", 2, "run"),
        ("fetch", 3, "stub"),  # pages#2's own fetch: recorded as the span's third
    ]
    assert run.divergences() == []


def test_an_in_process_service_answers_normally_during_another_requests_replay(recording):
    """A service in a uvicorn thread (its own request spans, through the middleware), reached on
    a host outside ``inject_hosts``, is not claimed by the replay running in the test."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.support.agents import AppServer

    @chronicle.boundary("price", kind="tool")
    def price(sku: str) -> int:
        LIVE.append("price")
        return {"A": 5, "B": 7}[sku]

    async def quote(request: Request) -> JSONResponse:
        return JSONResponse({"total": price(request.query_params["sku"]) * 2})

    app = chronicle.ChronicleMiddleware(Starlette(routes=[Route("/quote", quote)]), service="shop")

    @chronicle.boundary("checkout", kind="tool")
    def checkout(sku: str, url: str) -> int:
        total: int = httpx.get(f"{url}/quote", params={"sku": sku}, timeout=10).json()["total"]
        return total

    @chronicle.boundary("summarize", kind="tool")
    def summarize(total: int) -> str:
        return f"total {total}"

    with AppServer(app) as server:
        with chronicle.record("order") as session:
            assert summarize(checkout("A", server.url)) == "total 10"
        recording.saved(session.trace_id, 2)
        LIVE.clear()
        before = stored(recording.control_plane, session.trace_id)
        plan = chronicle.ReplayPlan().run("checkout")  # the call into the service runs live
        with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
            assert summarize(checkout("A", server.url)) == "total 10"
        assert LIVE == ["price"]  # the service ran its own code, unclaimed by the replay
        assert run.divergences() == []
        assert [(c.name, c.mode) for c in run.call_log()] == [
            ("checkout", "run"),
            ("summarize", "stub"),
        ]
        assert chronicle.flush(10)
        assert stored(recording.control_plane, session.trace_id) == before  # and wrote nothing
