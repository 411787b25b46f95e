"""Chronicle: record what an AI agent does at each decision point, save it, replay it.

Boundaries (LLM and tool calls) are OpenTelemetry spans; ``ChronicleSpanProcessor`` saves them as
``agentplane_primitives`` entities to the control plane; ``replay_trace`` runs one recorded
request again with its calls stubbed; ``find_traces`` and ``show`` read traces back. Everything
public is imported from here.

The names are loaded when first used (PEP 562 ``__getattr__``): ``import chronicle`` loads the
errors and the logging set-up only, and an application that records loads the recording path,
not the replay engine, the checks, the readers or the diff. ``dir(chronicle)`` and ``__all__``
list every name, and type checkers see them all (the ``TYPE_CHECKING`` imports below).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from chronicle import log
from chronicle._version import __version__
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
from chronicle.lazy import loaded_on_use

if TYPE_CHECKING:
    from agentplane_primitives.models import Envelope, TraceContext

    from chronicle.agent import AgentProfile, Constraint
    from chronicle.check.checks import Evaluation, Verdict
    from chronicle.check.evaluate import evaluate
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

_FROM: dict[str, str] = {
    "Envelope": "agentplane_primitives.models",
    "TraceContext": "agentplane_primitives.models",
    "AgentProfile": "chronicle.agent",
    "Constraint": "chronicle.agent",
    "Evaluation": "chronicle.check.checks",
    "Verdict": "chronicle.check.checks",
    "evaluate": "chronicle.check.evaluate",
    "ChronicleMiddleware": "chronicle.integrations.asgi",
    "wrap": "chronicle.integrations.clients",
    "instrument_autogen": "chronicle.integrations.frameworks",
    "instrument_crewai": "chronicle.integrations.frameworks",
    "instrument_google_adk": "chronicle.integrations.frameworks",
    "instrument_langchain": "chronicle.integrations.frameworks",
    "instrument_llama_index": "chronicle.integrations.frameworks",
    "instrument_mcp": "chronicle.integrations.frameworks",
    "instrument_openai_agents": "chronicle.integrations.frameworks",
    "instrument_pydantic_ai": "chronicle.integrations.frameworks",
    "instrument_smolagents": "chronicle.integrations.frameworks",
    "uninstrument_autogen": "chronicle.integrations.frameworks",
    "uninstrument_crewai": "chronicle.integrations.frameworks",
    "uninstrument_google_adk": "chronicle.integrations.frameworks",
    "uninstrument_langchain": "chronicle.integrations.frameworks",
    "uninstrument_llama_index": "chronicle.integrations.frameworks",
    "uninstrument_mcp": "chronicle.integrations.frameworks",
    "uninstrument_openai_agents": "chronicle.integrations.frameworks",
    "uninstrument_pydantic_ai": "chronicle.integrations.frameworks",
    "uninstrument_smolagents": "chronicle.integrations.frameworks",
    "instrument_httpx": "chronicle.integrations.httpx",
    "uninstrument_httpx": "chronicle.integrations.httpx",
    "instrument": "chronicle.integrations.langgraph",
    "instrument_langgraph": "chronicle.integrations.langgraph",
    "aspan": "chronicle.integrations.propagation",
    "extract": "chronicle.integrations.propagation",
    "inject": "chronicle.integrations.propagation",
    "span": "chronicle.integrations.propagation",
    "ChronicleExecutor": "chronicle.integrations.threads",
    "propagate": "chronicle.integrations.threads",
    "ChronicleSpanProcessor": "chronicle.otel.processor",
    "ReplaySampler": "chronicle.otel.sampler",
    "AgentPage": "chronicle.read.agents",
    "AgentSummary": "chronicle.read.agents",
    "find_agents": "chronicle.read.agents",
    "TraceSummary": "chronicle.read.traces",
    "TraceTree": "chronicle.read.traces",
    "find_traces": "chronicle.read.traces",
    "show": "chronicle.read.traces",
    "boundary": "chronicle.recording.boundary",
    "wrap_llm": "chronicle.recording.boundary",
    "CallInfo": "chronicle.recording.hooks",
    "FunctionHook": "chronicle.recording.hooks",
    "Hook": "chronicle.recording.hooks",
    "HookRegistry": "chronicle.recording.hooks",
    "default_hooks": "chronicle.recording.hooks",
    "record": "chronicle.recording.request",
    "Session": "chronicle.recording.session",
    "attempt": "chronicle.recording.session",
    "current_session": "chronicle.recording.session",
    "default_redactors": "chronicle.redaction",
    "redact_secrets": "chronicle.redaction",
    "replay": "chronicle.replay.entry",
    "replay_trace": "chronicle.replay.entry",
    "ReplayPlan": "chronicle.replay.plan",
    "ReplayRun": "chronicle.replay.run",
    "configure": "chronicle.runtime",
    "flush": "chronicle.runtime",
    "is_enabled": "chronicle.runtime",
    "keep": "chronicle.runtime",
    "reset": "chronicle.runtime",
    "shutdown": "chronicle.runtime",
    "TraceDiff": "chronicle.whatif.diff",
    "diff": "chronicle.whatif.diff",
}
"""Each name loaded on first use, and the module it comes from."""


__getattr__ = loaded_on_use(
    __name__, _FROM, unknown="; the public names are listed in chronicle.__all__"
)
"""Load a name of ``_FROM`` from its module the first time it is asked for, and keep it here."""


def __dir__() -> list[str]:
    """Every public name, loaded or not, with the module's own."""
    return sorted(set(globals()) | set(__all__))


class _Facade(types.ModuleType):
    """The package's module type: ``chronicle.replay`` is always the ``replay`` function, though
    importing the ``chronicle.replay`` package binds its name here (as it did when every name
    was imported eagerly, after the package: the package is ``sys.modules["chronicle.replay"]``).
    """

    @property
    def replay(self) -> Any:
        """``chronicle.replay.entry.replay`` (or what a test patched in its place)."""
        value = globals().get("replay")
        if value is None or isinstance(value, types.ModuleType):
            value = globals()["replay"] = importlib.import_module("chronicle.replay.entry").replay
        return value

    @replay.setter
    def replay(self, value: object) -> None:
        """Kept, unless it is the import system binding the ``chronicle.replay`` package."""
        if not isinstance(value, types.ModuleType):
            globals()["replay"] = value

    @replay.deleter
    def replay(self) -> None:
        """Forget a patched value: the next read loads the function again."""
        globals().pop("replay", None)


sys.modules[__name__].__class__ = _Facade

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
