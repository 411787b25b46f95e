"""The public surface is what ``chronicle/__init__.py`` exports, and nothing moves silently."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import chronicle
import chronicle.testing

EXPECTED = {
    "instrument_autogen",
    "instrument_crewai",
    "instrument_google_adk",
    "instrument_langchain",
    "instrument_llama_index",
    "instrument_mcp",
    "instrument_openai_agents",
    "instrument_pydantic_ai",
    "instrument_smolagents",
    "uninstrument_autogen",
    "uninstrument_crewai",
    "uninstrument_google_adk",
    "uninstrument_langchain",
    "uninstrument_llama_index",
    "uninstrument_mcp",
    "uninstrument_openai_agents",
    "uninstrument_pydantic_ai",
    "uninstrument_smolagents",
    "AbortCall",
    "AgentPage",
    "AgentProfile",
    "AgentSummary",
    "CallInfo",
    "ChronicleError",
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
    "find_agents",
    "find_traces",
    "show",
    "diff",
    "evaluate",
    "__version__",
    "aspan",
    "attempt",
    "boundary",
    "configure",
    "current_session",
    "default_hooks",
    "default_redactors",
    "flush",
    "is_enabled",
    "keep",
    "record",
    "redact_secrets",
    "replay",
    "replay_trace",
    "reset",
    "shutdown",
    "span",
    "wrap",
    "wrap_llm",
    "ChronicleMiddleware",
    "instrument_httpx",
    "uninstrument_httpx",
    "instrument",
    "instrument_langgraph",
    "extract",
    "inject",
    "ChronicleExecutor",
    "propagate",
}


def test_the_exported_names_are_pinned():
    assert set(chronicle.__all__) == EXPECTED
    assert chronicle.__all__ == sorted(chronicle.__all__)


def test_what_type_checkers_see_is_what_a_name_loads():
    """The facade's names are written three times (the ``TYPE_CHECKING`` imports type checkers
    read, the map ``__getattr__`` loads from, ``__all__``): each lazy name is imported for type
    checkers from the module it is loaded from, and every name is one of the two."""
    tree = ast.parse(Path(chronicle.__file__).read_text(encoding="utf-8"))
    (guarded,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    seen = {
        alias.asname or alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    eager = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert seen == chronicle._FROM
    assert set(chronicle.__all__) == set(chronicle._FROM) | (eager & set(chronicle.__all__))
    assert not set(chronicle._FROM) & eager


@pytest.mark.pure_python  # mypyc drops the docstrings of what it compiles (default_redactors)
def test_every_exported_name_exists_and_is_documented():
    for name in chronicle.__all__:
        value = getattr(chronicle, name)
        if callable(value) and name != "__version__":
            assert (value.__doc__ or "").strip(), f"{name} has no docstring"


def test_errors_say_what_to_do_and_abort_call_is_not_a_chronicle_error():
    assert not issubclass(chronicle.AbortCall, chronicle.ChronicleError)
    assert issubclass(chronicle.DeliveryError, chronicle.ControlPlaneError)
    assert issubclass(chronicle.ReplayMismatchError, LookupError)
    text = str(chronicle.ReplayMismatchError("search", 3, 2))
    assert "only 2 calls" in text and "ReplayPlan().run('search', 3)" in text
    assert issubclass(chronicle.ReplayDivergenceError, chronicle.ReplayError)


def test_public_classes_show_no_plumbing():
    """What a user reads with dir() is the class's contract, not the pipeline behind it."""
    session_names = {n for n in dir(chronicle.Session) if not n.startswith("_")}
    assert session_names == {"keep", "next_call", "url"}
    run_names = {n for n in dir(chronicle.ReplayRun) if not n.startswith("_")}
    assert run_names == {
        "call_log",
        "captured_input",
        "captured_result",
        "divergences",
        "episodes",
        "recorded",
        "url",  # the recorded trace's page, when it was read from a control plane
    }
    with chronicle.testing.capture(), chronicle.record("plumbing") as session:
        public = {n for n in vars(session) if not n.startswith("_")}
    assert public == {
        "trace_id",
        "span_id",
        "parent_envelope_id",
        "service",
        "metadata",
        "labels",
        "hooks",
        "unsampled",  # the sampler dropped it (read-only state a hook may look at)
        "dropped",  # ... and nothing holds it: its calls record nothing
    }
