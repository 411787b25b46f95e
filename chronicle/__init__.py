"""Chronicle: record what an AI agent does at each decision point, save it, replay it.

Boundaries (LLM and tool calls) are OpenTelemetry spans; ``ChronicleSpanProcessor`` saves them as
``agentplane_primitives`` entities to the control plane; ``replay_trace`` runs one recorded
request again with its calls stubbed; ``find_traces`` and ``show`` read traces back. Everything
public is imported from here.
"""

from agentplane_primitives.models import Envelope, TraceContext

from chronicle import log
from chronicle._version import __version__
from chronicle.agent import AgentProfile, Constraint
from chronicle.check.checks import Evaluation, Verdict
from chronicle.check.evaluate import evaluate
from chronicle.errors import (
    AbortCall,
    ChronicleError,
    ConfigurationError,
    ControlPlaneError,
    DeliveryError,
    LossyReplayError,
    RecordedCallError,
    ReplayDivergenceError,
    ReplayError,
    ReplayMismatchError,
    ReplayRefusedError,
    ReservedMetadataError,
    UnrecordedOutputError,
)
from chronicle.integrations.asgi import ChronicleMiddleware
from chronicle.integrations.clients import wrap
from chronicle.integrations.frameworks import (
    instrument_autogen,
    instrument_crewai,
    instrument_google_adk,
    instrument_langchain,
    instrument_llama_index,
    instrument_mcp,
    instrument_openai_agents,
    instrument_pydantic_ai,
    instrument_smolagents,
    uninstrument_autogen,
    uninstrument_crewai,
    uninstrument_google_adk,
    uninstrument_langchain,
    uninstrument_llama_index,
    uninstrument_mcp,
    uninstrument_openai_agents,
    uninstrument_pydantic_ai,
    uninstrument_smolagents,
)
from chronicle.integrations.httpx import instrument_httpx, uninstrument_httpx
from chronicle.integrations.langgraph import instrument, instrument_langgraph
from chronicle.integrations.propagation import aspan, extract, inject, span
from chronicle.integrations.threads import ChronicleExecutor, propagate
from chronicle.otel.processor import ChronicleSpanProcessor
from chronicle.otel.sampler import ReplaySampler
from chronicle.read.agents import AgentPage, AgentSummary, find_agents
from chronicle.read.traces import TraceSummary, TraceTree, find_traces, show
from chronicle.recording.boundary import boundary, wrap_llm
from chronicle.recording.hooks import CallInfo, FunctionHook, Hook, HookRegistry, default_hooks
from chronicle.recording.request import record
from chronicle.recording.session import Session, attempt, current_session
from chronicle.redaction import default_redactors, redact_secrets
from chronicle.replay.entry import replay, replay_trace
from chronicle.replay.plan import ReplayPlan
from chronicle.replay.run import ReplayRun
from chronicle.runtime import configure, flush, is_enabled, keep, reset, shutdown
from chronicle.whatif.diff import TraceDiff, diff

log.install()  # warnings reach a person even when the application set up no logging

__all__ = [
    "AbortCall",
    "AgentPage",
    "AgentProfile",
    "AgentSummary",
    "CallInfo",
    "ChronicleError",
    "ChronicleExecutor",
    "ChronicleMiddleware",
    "ChronicleSpanProcessor",
    "ConfigurationError",
    "Constraint",
    "ControlPlaneError",
    "DeliveryError",
    "Envelope",
    "Evaluation",
    "FunctionHook",
    "Hook",
    "HookRegistry",
    "LossyReplayError",
    "RecordedCallError",
    "ReplayDivergenceError",
    "ReplayError",
    "ReplayMismatchError",
    "ReplayPlan",
    "ReplayRefusedError",
    "ReplayRun",
    "ReplaySampler",
    "ReservedMetadataError",
    "Session",
    "TraceContext",
    "TraceDiff",
    "TraceSummary",
    "TraceTree",
    "UnrecordedOutputError",
    "Verdict",
    "__version__",
    "aspan",
    "attempt",
    "boundary",
    "configure",
    "current_session",
    "default_hooks",
    "default_redactors",
    "diff",
    "evaluate",
    "extract",
    "find_agents",
    "find_traces",
    "flush",
    "inject",
    "instrument",
    "instrument_autogen",
    "instrument_crewai",
    "instrument_google_adk",
    "instrument_httpx",
    "instrument_langchain",
    "instrument_langgraph",
    "instrument_llama_index",
    "instrument_mcp",
    "instrument_openai_agents",
    "instrument_pydantic_ai",
    "instrument_smolagents",
    "is_enabled",
    "keep",
    "propagate",
    "record",
    "redact_secrets",
    "replay",
    "replay_trace",
    "reset",
    "show",
    "shutdown",
    "span",
    "uninstrument_autogen",
    "uninstrument_crewai",
    "uninstrument_google_adk",
    "uninstrument_httpx",
    "uninstrument_langchain",
    "uninstrument_llama_index",
    "uninstrument_mcp",
    "uninstrument_openai_agents",
    "uninstrument_pydantic_ai",
    "uninstrument_smolagents",
    "wrap",
    "wrap_llm",
]
