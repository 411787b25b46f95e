"""The calls a check reads, whatever was checked: a recorded trace's call tree as it is, or a
finished replay's calls turned into the same ``CallNode`` records (``evaluation_calls``), with
the readers every check shares (a call's raw input, the tool calls an ``llm`` output holds,
whether a call is the span's entry)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pydantic
from agentplane_primitives.models import Envelope

from chronicle.errors import ReplayError
from chronicle.read.traces import CallNode, TraceTree, envelope_node
from chronicle.replay.incident import IncidentRun
from chronicle.replay.run import ReplayRun, made_calls
from chronicle.wire import INVOCATION

__all__ = ["Replayed", "evaluation_calls", "is_entry", "raw_input", "tool_calls"]

Replayed = ReplayRun | IncidentRun
"""A finished replay: of one span, or of an incident of several."""


# ---- the calls ---------------------------------------------------------------------------------


def evaluation_calls(source: TraceTree | Replayed) -> list[CallNode]:
    """The calls of a trace or of a finished replay, in call order, as ``CallNode`` rows whose
    ``envelope`` holds what was recorded (for a replay: what the replay did, each served call
    as recorded with the calls recorded inside it, each live call with its live arguments and
    result; an incident of several spans, span by span). Raises ``ReplayError`` while the
    replay is running."""
    if isinstance(source, TraceTree):
        return [node for node in source.nodes if node.envelope is not None]
    if isinstance(source, IncidentRun):
        return [node for run in source.runs.values() for node in replay_calls(run)]
    return replay_calls(source)


def replay_calls(run: ReplayRun) -> list[CallNode]:
    try:
        made = made_calls(run)  # the diff reads a finished run the same way
    except ReplayError:
        raise ReplayError(
            f"evaluate: the replay of span {run.span_id} is still running; evaluate the run "
            "once its `with` block has ended (in a marked test: use the chronicle_replay "
            "fixture's `with` instead of the marker)"
        ) from None
    span = {"span_id": run.span_id, "service": "replay", "state": "closed"}
    calls: list[CallNode] = []
    for call in made:
        recorded = call.envelope
        if call.mode == "stub" and recorded is not None:
            calls.append(envelope_node(dumped(recorded), span))
            for inner in run.tree.descendants(recorded.envelope_id):
                calls.append(envelope_node(dumped(run.tree.by_id[inner]), span))
            continue
        kind = recorded.kind if recorded is not None else getattr(call.spec, "kind", "tool")
        body: dict[str, Any] = dumped(recorded) if recorded is not None else {}
        body.update(
            {
                "name": call.name,
                "kind": str(getattr(kind, "value", kind)),
                "metadata": {**(body.get("metadata") or {}), INVOCATION: call.n},
                "envelope_status": {
                    "state": "closed",
                    "status": "failure" if call.raised is not None else "success",
                },
            }
        )
        arguments = plain(call.arguments)
        result = plain(call.result) if call.returned else None
        error = (
            {"type": type(call.raised).__name__, "message": str(call.raised)}
            if call.raised is not None
            else None
        )
        adapter = getattr(call.spec, "adapter", None)
        if body["kind"] == "llm" and adapter is not None:
            llm_input = adapter.to_input(arguments if isinstance(arguments, dict) else {})
            body["input"] = llm_input.model_dump(mode="json", exclude_none=True)
            output = adapter.to_output(result, llm_input) if call.returned else None
            body["output"] = (
                output.model_dump(mode="json", exclude_none=True)
                if output is not None
                else {"error": error}
            )
        else:
            body["input"] = {"raw": arguments if isinstance(arguments, dict) else {}}
            body["output"] = {"raw": result} if error is None else {"error": error}
        calls.append(envelope_node(body, span))
    return calls


def dumped(envelope: Envelope) -> dict[str, Any]:
    return envelope.model_dump(mode="json", exclude_none=True)


def plain(value: object, depth: int = 0) -> Any:
    """``value`` as JSON values: models and dataclasses by their fields, the rest by ``repr``."""
    if depth > 50:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value), depth + 1)
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, depth + 1) for v in value]
    return repr(value)


def raw_input(node: CallNode) -> dict[str, Any]:
    """The call's recorded input (``input.raw``), ``{}`` when it has none."""
    body = (node.envelope or {}).get("input")
    raw = body.get("raw") if isinstance(body, dict) else None
    return raw if isinstance(raw, dict) else {}


def tool_calls(node: CallNode) -> list[dict[str, Any]]:
    """The tool calls a model call's output asked for (``type: tool_call`` blocks)."""
    output = (node.envelope or {}).get("output")
    content = output.get("content") if isinstance(output, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_call"]


def is_entry(node: CallNode) -> bool:
    """The span's top-level call: the agent itself, not a tool it called."""
    envelope = node.envelope or {}
    return (
        envelope.get("parent_envelope_id") is None and node.span.get("parent_envelope_id") is None
    )
