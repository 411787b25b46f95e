"""Chronicle beside the OpenTelemetry tools its users run: Phoenix, Langfuse, Logfire, plain OTLP.

Each case runs ``tests/support/tool_scenario.py`` in a fresh interpreter (providers are global),
with the real package set up its documented way and its exporter pointed at a local OTLP
receiver, the real control plane, and a real OpenAI client talking to the local model server.
Whatever the order of setup, the receiver must get the app's span with Chronicle's spans nested
under it, carrying both the GenAI and the OpenInference attributes, and the tool's own spans,
each once; the control plane gets the envelopes; and the model call's tokens are counted once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from chronicle.testing import LocalControlPlane
from tests.support.llm_server import LlmServer
from tests.support.otlp import OtlpReceiver, ReceivedSpan

ROOT = Path(__file__).resolve().parents[2]
LLM_SPAN = "openai.chat.completions.create"
"""The model call's boundary: the envelope's name and the span's ``chronicle.boundary``."""
CHAT_SPAN = "chat gpt-4o-mini"
TOOL_SPAN = "execute_tool lookup"
BOUNDARY = "chronicle.boundary"
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
USAGE_KEYS = {
    SpanAttributes.LLM_TOKEN_COUNT_PROMPT,
    SpanAttributes.LLM_TOKEN_COUNT_COMPLETION,
    SpanAttributes.LLM_TOKEN_COUNT_TOTAL,
    gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
    gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
}
ONE_CALL = {"prompt": 10, "completion": 5}  # what the local model server reports per call


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def run_scenario(
    tool: str,
    order: str,
    otlp: OtlpReceiver,
    control_plane: LocalControlPlane,
    llm_server: LlmServer,
) -> tuple[dict[str, str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CHRONICLE_"))}
    env.update(OTLP_URL=otlp.url, CONTROL_PLANE_URL=control_plane.url, LLM_URL=llm_server.url)
    env.update(OTEL_SERVICE_NAME="citizen")  # the tool's provider and Chronicle name it alike
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.tool_scenario", tool, order],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def only(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"expected one {name!r} span, got {len(found)}: {spans}"
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("order", ["tool-first", "chronicle-first"])
@pytest.mark.parametrize("tool", ["phoenix", "langfuse", "logfire", "otlp"])
def test_the_tools_backend_shows_chronicle_nested_in_the_app_and_loses_nothing(
    tool, order, otlp, control_plane, llm_server
):
    out, stderr = run_scenario(tool, order, otlp, control_plane, llm_server)
    trace_id = out["trace_id"]
    # Spans named by the GenAI convention; with Phoenix, OpenInference's span of the request is
    # the model call, so Chronicle's is named by its boundary (demoted: see counted_once).
    llm_span = LLM_SPAN if tool == "phoenix" else CHAT_SPAN
    spans = otlp.wait_for("app-request", "citizen-run", llm_span, TOOL_SPAN, "tool-span-2")

    # The app's span, Chronicle's request span under it, the boundaries under that: one trace.
    app, run = only(spans, "app-request"), only(spans, "citizen-run")
    llm, lookup = only(spans, llm_span), only(spans, TOOL_SPAN)
    assert (llm.attributes[BOUNDARY], lookup.attributes[BOUNDARY]) == (LLM_SPAN, "lookup")
    assert app.trace_id == run.trace_id == llm.trace_id == lookup.trace_id == trace_id
    assert run.parent_span_id == app.span_id
    assert llm.parent_span_id == lookup.parent_span_id == run.span_id

    # Both conventions on Chronicle's spans.
    assert run.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert run.attributes[gen_ai.GEN_AI_CONVERSATION_ID] == "conv-1"
    assert run.attributes[KIND] == OpenInferenceSpanKindValues.CHAIN.value
    assert lookup.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert lookup.attributes[gen_ai.GEN_AI_TOOL_NAME] == "lookup"
    assert lookup.attributes[KIND] == OpenInferenceSpanKindValues.TOOL.value
    assert lookup.kind == "SPAN_KIND_INTERNAL"
    assert llm.attributes[gen_ai.GEN_AI_PROVIDER_NAME] == "openai"
    assert llm.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert llm.attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]
    assert llm.attributes[SpanAttributes.LLM_MODEL_NAME] == "gpt-4o-mini"

    # The tool's own spans, from before and after Chronicle joined, still arrive.
    only(spans, "tool-span-1")
    only(spans, "tool-span-2")
    if tool == "langfuse":
        # Langfuse's default filter is on (it dropped the plain span) and kept Chronicle's.
        assert "plain-span" not in {s.name for s in spans}
        assert app.scope == "langfuse-sdk"
    else:
        only(spans, "plain-span")

    # Each model call counted once, whatever else traces it.
    with_usage = [s for s in spans if USAGE_KEYS & s.attributes.keys()]
    assert len(with_usage) == 1, with_usage
    (counted,) = with_usage
    if tool == "phoenix":  # OpenInference's instrumentor traced the same call, inside Chronicle's
        assert counted.scope.startswith("openinference.instrumentation.openai")
        assert counted.parent_span_id == llm.span_id
        assert counted.attributes[SpanAttributes.LLM_TOKEN_COUNT_TOTAL] == sum(ONE_CALL.values())
        assert llm.attributes[KIND] == OpenInferenceSpanKindValues.CHAIN.value
        assert gen_ai.GEN_AI_OPERATION_NAME not in llm.attributes  # no model call of its own
        assert llm.kind == "SPAN_KIND_INTERNAL"
    else:
        assert counted is llm
        assert llm.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
        assert llm.kind == "SPAN_KIND_CLIENT"
        if tool == "logfire":  # the message Logfire's view shows for the span
            assert llm.attributes["logfire.msg"] == CHAT_SPAN
        assert llm.attributes[KIND] == OpenInferenceSpanKindValues.LLM.value
        assert llm.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == ONE_CALL["prompt"]
        assert llm.attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == ONE_CALL["completion"]
        assert llm.attributes[SpanAttributes.LLM_TOKEN_COUNT_TOTAL] == sum(ONE_CALL.values())

    # The control plane got the recording, and the session links to its page.
    envelopes = control_plane.wait_for_envelopes(trace_id, 2)
    assert [e["name"] for e in envelopes] == [LLM_SPAN, "lookup"]
    assert out["url"] == f"{control_plane.url}/#chronicle/{trace_id}"
    assert "Overriding of current TracerProvider" not in stderr
    assert "chronicle" not in stderr.lower(), stderr  # no warning from Chronicle
