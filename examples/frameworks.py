"""The same small agent in seven frameworks, each recorded and then replayed with a cut-point.

The agent answers "What is the weather in Paris?" with a ``get_weather`` tool. The recorded
tool reports Fahrenheit; the fix reports Celsius. Each framework's run is recorded (the model
calls through the wrapped client, the tool as a ``@boundary``), then replayed strictly with the
fixed tool as the only live call: the model's answers come from the recording (no model
request), the tool runs the new code on the recorded arguments. The model's second call now
reads the Celsius result, a change the plan declares (``expect_change``): that call's recorded
answer is stale, so the proof is what the tool returned and that the model is now told it. Any
other departure from the recording (a changed input, a recording not used) fails the replay, and
there is none: each framework's values come back as they were recorded.

    python examples/frameworks.py            # a local scripted model, a local control plane
    python examples/frameworks.py --live     # the real OpenAI and Anthropic APIs

Where Chronicle hooks in, per framework:

- OpenAI SDK, Anthropic SDK: ``chronicle.wrap(client)``.
- LangChain: ``chronicle.wrap(ChatOpenAI(...).client)``, then the chat model as usual.
- LangGraph: the model client wrapped, and ``chronicle.instrument(graph)`` before ``compile()``
  (every node and the router become boundaries).
- OpenAI Agents SDK: ``chronicle.wrap(AsyncOpenAI(...))`` given to ``OpenAIChatCompletionsModel``.
- Pydantic AI: ``chronicle.wrap(AsyncOpenAI(...))`` given to ``OpenAIProvider(openai_client=...)``.
- No SDK: ``chronicle.wrap_llm("llm.chat", call_provider, provider="openai")``.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from agents import Agent as OpenAIAgent
from agents import OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from langchain_core.messages import AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from local_model import (
    ANTHROPIC_MODEL,
    LIVE,
    OPENAI_MODEL,
    Model,
    changed_as_expected,
    divergences,
    modes,
    names,
    running,
)
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import chronicle
from tests.support.llm_server import (
    chat_text,
    chat_tool_calls,
    messages_text,
    messages_tool_use,
    tool_call,
)

QUESTION = "What is the weather in Paris? Use the get_weather tool."
CHAT = "openai.chat.completions.create"
MESSAGES = "anthropic.messages.create"
FIXED = {"on": False}
"""The fix: ``get_weather`` reports Celsius (the recorded run reported Fahrenheit)."""


@chronicle.boundary("get_weather", kind="tool")
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    if FIXED["on"]:
        return {"city": city, "temp_c": 21}
    return {"city": city, "temp_f": 70}


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city"}},
    "required": ["city"],
}


@dataclass
class Outcome:
    framework: str
    recorded: str
    replayed: str
    requests_in_record: int
    requests_in_replay: int
    tool_in_replay: object
    unchanged: str
    """How a strict replay of the unchanged code (no fix, no plan) went: ``0 divergences``."""
    divergences: str
    """``0 unexpected, 1 expected (...)``, or why the strict replay failed."""
    changed_as_declared: bool
    """The replay diverged only where the plan expects, each time by the fixed result."""

    @property
    def holds(self) -> bool:
        return (
            self.requests_in_record >= 2  # the model was really called while recording ...
            and self.requests_in_replay == 0  # ... and not at all during the replay
            and "get_weather:run" in self.replayed
            and self.tool_in_replay == {"city": "Paris", "temp_c": 21}
            and self.unchanged == "0 divergences"  # every value came back as it was recorded
            and self.changed_as_declared  # the model now reads it, and nothing else changed
        )


def exercise(
    framework: str,
    model: Model,
    control_plane: str,
    agent: Callable[[], object],
    changed: tuple[tuple[str, int], ...],
) -> Outcome:
    """Record one run of ``agent``, replay it unchanged (strict, everything stubbed), then
    replay it (strict) with the fixed ``get_weather`` live.

    ``changed``: the calls downstream of the tool whose input the fix changes (declared with
    ``expect_change``): they read the Celsius result, and their recorded answers are stale.
    """
    FIXED["on"] = False
    before = model.requests
    with chronicle.record(f"frameworks-{framework}") as session:
        agent()
    requests_in_record = model.requests - before
    chronicle.flush(10)
    recorded = names(control_plane, session)

    before = model.requests
    try:
        with chronicle.replay_trace(session.trace_id, session.span_id, strict=True) as same:
            agent()
        unchanged = f"{len(same.divergences())} divergences"
    except chronicle.ReplayDivergenceError as error:
        unchanged = "the strict replay failed:\n" + textwrap.indent(str(error), "    ")

    FIXED["on"] = True
    plan = chronicle.ReplayPlan().run("get_weather")
    for name, n in changed:
        plan.expect_change(name, n)
    try:
        with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
            agent()
        found, declared = divergences(run), changed_as_expected(run, *changed, fixed="temp_c")
    except chronicle.ReplayDivergenceError as error:  # the replay departed from the recording
        found = "the strict replay failed:\n" + textwrap.indent(str(error), "    ")
        declared = False
    finally:
        FIXED["on"] = False
    ran = [call for call in run.call_log() if call.name == "get_weather"]
    return Outcome(
        framework,
        recorded,
        modes(run),
        requests_in_record,
        model.requests - before,
        run.captured_result("get_weather", 1) if ran else "(not called)",
        unchanged,
        found,
        declared,
    )


# ---- OpenAI SDK -----------------------------------------------------------------------------


def openai_sdk(model: Model, control_plane: str) -> Outcome:
    client = chronicle.wrap(model.openai())
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER_SCHEMA,
            },
        }
    ]

    def agent() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        for _ in range(4):
            reply = client.chat.completions.create(
                model=OPENAI_MODEL, messages=messages, tools=tools
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                return str(message.content)
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = get_weather(**json.loads(call.function.arguments))
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )
        return "gave up"

    model.script(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"})),
        chat_text("It is 70F in Paris."),
    )
    return exercise("openai-sdk", model, control_plane, agent, changed=((CHAT, 2),))


# ---- Anthropic SDK --------------------------------------------------------------------------


def anthropic_sdk(model: Model, control_plane: str) -> Outcome:
    client = chronicle.wrap(model.anthropic())
    tools = [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER_SCHEMA,
        }
    ]

    def agent() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        for _ in range(4):
            reply = client.messages.create(
                model=ANTHROPIC_MODEL, max_tokens=512, messages=messages, tools=tools
            )
            uses = [block for block in reply.content if block.type == "tool_use"]
            if not uses:
                return "".join(block.text for block in reply.content if block.type == "text")
            messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": json.dumps(get_weather(**use.input)),
                }
                for use in uses
            ]
            messages.append({"role": "user", "content": results})
        return "gave up"

    model.script(
        messages_tool_use(tool_call("get_weather", {"city": "Paris"})),
        messages_text("It is 70F in Paris."),
    )
    return exercise("anthropic-sdk", model, control_plane, agent, changed=((MESSAGES, 2),))


# ---- LangChain --------------------------------------------------------------------------------


def chat_openai(model: Model) -> Any:
    chat = ChatOpenAI(
        model=OPENAI_MODEL,
        base_url=model.openai_base_url,
        api_key=model.key("openai"),
        http_client=model.http(),
        use_responses_api=False,
        max_retries=0,
    )
    chronicle.wrap(chat.client)  # the OpenAI SDK resource LangChain calls
    return chat


def langchain_weather_tool() -> Any:
    @tool("get_weather")
    def weather(city: str) -> str:
        """Current weather for a city."""
        return json.dumps(get_weather(city))

    return weather


def langchain(model: Model, control_plane: str) -> Outcome:
    llm = chat_openai(model).bind_tools([langchain_weather_tool()])

    def agent() -> str:
        messages: list[Any] = [HumanMessage(QUESTION)]
        for _ in range(4):
            ai = llm.invoke(messages)
            messages.append(ai)
            if not ai.tool_calls:
                return str(ai.content)
            for call in ai.tool_calls:
                result = get_weather(**call["args"])
                messages.append(ToolMessage(json.dumps(result), tool_call_id=call["id"]))
        return "gave up"

    model.script(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"})),
        chat_text("It is 70F in Paris."),
    )
    return exercise("langchain", model, control_plane, agent, changed=((CHAT, 2),))


# ---- LangGraph --------------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def langgraph(model: Model, control_plane: str) -> Outcome:
    llm = chat_openai(model).bind_tools([langchain_weather_tool()])

    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    def run_tools(state: State) -> dict[str, Any]:
        calls = state["messages"][-1].tool_calls
        return {
            "messages": [
                ToolMessage(json.dumps(get_weather(**call["args"])), tool_call_id=call["id"])
                for call in calls
            ]
        }

    def next_step(state: State) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder = StateGraph(State)
    builder.add_node("agent", call_model)
    builder.add_node("tools", run_tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", next_step, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = chronicle.instrument(builder).compile()

    def agent() -> object:
        return graph.invoke({"messages": [HumanMessage(QUESTION)]})

    model.script(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"})),
        chat_text("It is 70F in Paris."),
    )
    # The tool is the cut-point, so the tools node that calls it runs too. The agent node holds
    # the model call and is stubbed whole: its second call (and the router's) reads the graph
    # state that now holds the Celsius result.
    changed = (("node agent", 2), ("route agent.next_step", 2))
    return exercise("langgraph", model, control_plane, agent, changed)


# ---- OpenAI Agents SDK ----------------------------------------------------------------------


def openai_agents(model: Model, control_plane: str) -> Outcome:
    set_tracing_disabled(True)  # the SDK's own tracing would export to OpenAI

    @function_tool
    def weather(city: str) -> str:
        """Current weather for a city."""
        return json.dumps(get_weather(city))

    weather.name = "get_weather"
    client = chronicle.wrap(model.async_openai())
    assistant = OpenAIAgent(
        name="weather",
        instructions="Answer with the get_weather tool.",
        model=OpenAIChatCompletionsModel(model=OPENAI_MODEL, openai_client=client),
        tools=[weather],
    )

    def agent() -> object:
        return Runner.run_sync(assistant, QUESTION).final_output

    model.script(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"})),
        chat_text("It is 70F in Paris."),
    )
    return exercise("openai-agents", model, control_plane, agent, changed=((CHAT, 2),))


# ---- Pydantic AI ------------------------------------------------------------------------------


def pydantic_ai(model: Model, control_plane: str) -> Outcome:
    client = chronicle.wrap(model.async_openai())
    provider = OpenAIProvider(openai_client=client)

    def weather(city: str) -> str:
        """Current weather for a city."""
        return json.dumps(get_weather(city))

    weather.__name__ = "get_weather"
    assistant = PydanticAgent(
        OpenAIChatModel(OPENAI_MODEL, provider=provider),
        instructions="Answer with the get_weather tool.",
        tools=[weather],
    )

    def agent() -> object:
        return assistant.run_sync(QUESTION).output

    model.script(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"})),
        chat_text("It is 70F in Paris."),
    )
    return exercise("pydantic-ai", model, control_plane, agent, changed=((CHAT, 2),))


# ---- a plain function: wrap_llm -----------------------------------------------------------------


def plain_function(model: Model, control_plane: str) -> Outcome:
    http = model.http()
    base_url = model.openai_base_url or "https://api.openai.com/v1"
    key = model.key("openai")

    def call_provider(model: str, messages: list[dict[str, Any]], tools: list[Any]) -> Any:
        response = http.post(
            f"{base_url}/chat/completions",
            json={"model": model, "messages": messages, "tools": tools},
            headers={"Authorization": f"Bearer {key}"},
        )
        response.raise_for_status()
        return response.json()

    chat = chronicle.wrap_llm("llm.chat", call_provider, provider="openai")
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA},
        }
    ]

    def agent() -> str:
        messages: list[Any] = [{"role": "user", "content": QUESTION}]
        for _ in range(4):
            message = chat(OPENAI_MODEL, messages, tools)["choices"][0]["message"]
            if not message.get("tool_calls"):
                return str(message["content"])
            messages.append(dict(message))
            for call in message["tool_calls"]:
                result = get_weather(**json.loads(call["function"]["arguments"]))
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
        return "gave up"

    model.script(
        chat_tool_calls(tool_call("get_weather", {"city": "Paris"})),
        chat_text("It is 70F in Paris."),
    )
    return exercise("wrap_llm", model, control_plane, agent, changed=(("llm.chat", 2),))


FRAMEWORKS = (
    openai_sdk,
    anthropic_sdk,
    langchain,
    langgraph,
    openai_agents,
    pydantic_ai,
    plain_function,
)


def main() -> int:
    with running("frameworks-demo") as (model, control_plane):
        print(f"model: {'the real APIs' if LIVE else 'local scripted server'}")
        print(f"control plane: {control_plane}")
        outcomes = [framework(model, control_plane) for framework in FRAMEWORKS]
    for outcome in outcomes:
        print(f"\n{outcome.framework}")
        print(f"  recorded: {outcome.recorded}")
        print(f"  replayed unchanged (strict): {outcome.unchanged}")
        print(f"  replayed with the fix: {outcome.replayed}")
        print(f"  get_weather returned {outcome.tool_in_replay}")
        print(f"  divergences: {outcome.divergences}")
        print(
            f"  the calls after the tool now read the fixed result: {outcome.changed_as_declared}"
        )
        print(
            f"  model requests: {outcome.requests_in_record} while recording, "
            f"{outcome.requests_in_replay} during the replays"
        )
    holds = all(outcome.holds for outcome in outcomes)
    print(
        "\nevery framework recorded, then replayed strictly with the fix as the cut-point and no "
        f"unexpected divergence: {holds}"
    )
    return 0 if holds else 1


if __name__ == "__main__":
    asyncio.set_event_loop(asyncio.new_event_loop())  # the Agents SDK's run_sync needs a loop
    raise SystemExit(main())
