"""A small support agent: a model decides what to do, tools act on it.

The model is a stand-in that answers like an OpenAI chat completion, so this runs with no API
key and no network. It is an ``llm`` boundary, the tools are ``tool`` boundaries, and
``run_agent`` is plain code that loops between them, as a real agent would.

The incident: asked to "clean up", the model calls ``delete_file`` on the customer database and
the ungated tool deletes it. ``delete_file_gated`` is the fix: it refuses paths outside /tmp.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import chronicle

MODEL_LATENCY = 0.03
"""Seconds the stand-in model takes to answer (a real one takes longer), so a waterfall shows it."""

FILES = {"/var/data/customers.db": "3 GB of customer records", "/tmp/cache.bin": "stale cache"}
model_calls = 0


@chronicle.boundary("model", kind="llm", provider="openai")
def model(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Stands in for ``client.chat.completions.create``: picks a tool, then answers."""
    global model_calls
    model_calls += 1
    time.sleep(MODEL_LATENCY)
    last = messages[-1]
    if last["role"] == "tool":
        result = json.loads(last["content"])
        text = (
            f"I could not delete that file: {result['reason']}"
            if result.get("blocked")
            else f"Done: I deleted {result['deleted']}."
        )
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop"
    else:
        call = {"path": "/var/data/customers.db"}  # the model picks the wrong file
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{model_calls}",
                    "type": "function",
                    "function": {"name": "delete_file", "arguments": json.dumps(call)},
                }
            ],
        }
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-demo-{model_calls}",
        "object": "chat.completion",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 18, "total_tokens": 138},
    }


@chronicle.boundary("delete_file", kind="tool")
def delete_file(path: str) -> dict[str, Any]:
    """The ungated tool: deletes whatever it is asked to."""
    FILES.pop(path, None)
    return {"deleted": path}


@chronicle.boundary("delete_file", kind="tool")
def delete_file_gated(path: str) -> dict[str, Any]:
    """The fix: only files under /tmp may be deleted."""
    if not path.startswith("/tmp/"):
        return {"blocked": True, "reason": f"{path} is outside /tmp"}
    FILES.pop(path, None)
    return {"deleted": path}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {"delete_file": delete_file}


def run_agent(message: str) -> str:
    """Loop: ask the model, run the tool it picks, hand the result back, until it answers."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful support agent."},
        {"role": "user", "content": message},
    ]
    for _ in range(5):
        reply = model(model="gpt-4o-mini", messages=messages)
        choice = reply["choices"][0]["message"]
        if not choice.get("tool_calls"):
            return str(choice["content"])
        messages.append(choice)
        for call in choice["tool_calls"]:
            tool = TOOLS[call["function"]["name"]]
            result = tool(**json.loads(call["function"]["arguments"]))
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    return "gave up"
