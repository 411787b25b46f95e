"""What the examples run against: a model and a control plane, local unless told otherwise.

By default every example runs with no API key and no network:

- the model is ``LlmServer`` (``tests/support/llm_server.py``, the scripted server the test suite
  uses), speaking the OpenAI and Anthropic wire formats on ``127.0.0.1``; each example scripts
  the replies that make its incident happen;
- the control plane is the one ``CHRONICLE_CONTROL_PLANE_URL`` names, else a real one started on
  a free port (``chronicle.testing.LocalControlPlane``, SQLite in a temporary folder).

With ``--live`` the examples call the real APIs instead (``OPENAI_API_KEY``, and
``ANTHROPIC_API_KEY`` where an example uses Claude); the scripted replies are ignored, the model
decides, and what it decided is what gets recorded and replayed.

Every model client an example builds goes through ``Model``'s HTTP clients, which count the
requests sent, so "model requests during the replay: 0" is measured the same way in both modes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # for tests.support.llm_server, the scripted model server

import chronicle  # noqa: E402
from chronicle.testing import LocalControlPlane  # noqa: E402
from tests.support.llm_server import LlmServer, Reply  # noqa: E402

LIVE = "--live" in sys.argv
"""Call the real providers (API keys from the environment) instead of the local server."""

OPENAI_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-sonnet-4-5"


class Model:
    """The model endpoint an example talks to: its base URLs, keys, script and request count."""

    def __init__(self, server: LlmServer | None) -> None:
        self.server = server
        self.requests = 0
        """Requests sent to the model so far, by every client made here (live or local)."""

    # ---- where and how ---------------------------------------------------------------------

    @property
    def openai_base_url(self) -> str | None:
        """``base_url`` for ``openai.OpenAI`` (``None`` live: the SDK's default)."""
        return self.server.openai_base_url if self.server is not None else None

    @property
    def anthropic_base_url(self) -> str | None:
        """``base_url`` for ``anthropic.Anthropic`` (``None`` live: the SDK's default)."""
        return self.server.anthropic_base_url if self.server is not None else None

    def key(self, provider: str) -> str:
        """The API key for ``provider`` (``openai`` or ``anthropic``); a dummy one locally."""
        if self.server is not None:
            return "local-key"
        name = f"{provider.upper()}_API_KEY"
        value = os.environ.get(name)
        if not value:
            raise SystemExit(f"--live needs {name} in the environment")
        return value

    def script(self, *replies: Reply) -> None:
        """Queue the replies the local model sends next (ignored with ``--live``)."""
        if self.server is not None:
            self.server.reply_with(*replies)

    # ---- HTTP clients that count -------------------------------------------------------------

    def _count(self, request: object) -> None:
        self.requests += 1

    async def _acount(self, request: object) -> None:
        self.requests += 1

    def http(self) -> httpx.Client:
        """An ``httpx.Client`` for a model SDK (``http_client=``); it counts what it sends."""
        return httpx.Client(event_hooks={"request": [self._count]}, timeout=120)

    def async_http(self) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` for an async model SDK; it counts what it sends."""
        return httpx.AsyncClient(event_hooks={"request": [self._acount]}, timeout=120)

    # ---- the SDK clients the examples use ------------------------------------------------------

    def openai(self) -> Any:
        """An ``openai.OpenAI`` client for this model (not wrapped yet)."""
        import openai

        return openai.OpenAI(
            base_url=self.openai_base_url,
            api_key=self.key("openai"),
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [self._count]}),
            max_retries=0,
        )

    def async_openai(self) -> Any:
        """An ``openai.AsyncOpenAI`` client for this model (not wrapped yet)."""
        import openai

        hooks = {"request": [self._acount]}
        return openai.AsyncOpenAI(
            base_url=self.openai_base_url,
            api_key=self.key("openai"),
            http_client=openai.DefaultAsyncHttpxClient(event_hooks=hooks),
            max_retries=0,
        )

    def anthropic(self) -> Any:
        """An ``anthropic.Anthropic`` client for this model (not wrapped yet)."""
        import anthropic

        return anthropic.Anthropic(
            base_url=self.anthropic_base_url,
            api_key=self.key("anthropic"),
            http_client=anthropic.DefaultHttpxClient(event_hooks={"request": [self._count]}),
            max_retries=0,
        )


@contextmanager
def running(service_name: str, **settings: Any) -> Iterator[tuple[Model, str]]:
    """Chronicle configured against a control plane (and with ``settings``), and the model to
    call; yields both.

    On the way out everything recorded is delivered and Chronicle is shut down.
    """
    with ExitStack() as stack:
        url = os.environ.get("CHRONICLE_CONTROL_PLANE_URL")
        if not url:
            url = stack.enter_context(LocalControlPlane()).url
        server = None if LIVE else stack.enter_context(LlmServer())
        chronicle.configure(control_plane_url=url, service_name=service_name, **settings)
        try:
            yield Model(server), url
        finally:
            chronicle.flush(10)
            chronicle.shutdown()


def modes(run: chronicle.ReplayRun) -> str:
    """A replay's call log as ``name:mode`` items, in call order."""
    return ", ".join(f"{call.name}:{call.mode}" for call in run.call_log())


def envelopes(control_plane_url: str, trace_id: str, span_id: str) -> list[dict[str, Any]]:
    """The recorded envelopes of one span, in call order (what ``replay_trace`` reads)."""
    url = f"{control_plane_url}/v1/traces/{trace_id}/spans/{span_id}/envelopes"
    found = httpx.get(url, timeout=10).json()
    return list(found["envelopes"] if isinstance(found, dict) else found)


def names(control_plane_url: str, session: chronicle.Session) -> str:
    """The recorded envelopes of ``session``'s span, by name, in call order."""
    found = envelopes(control_plane_url, session.trace_id, session.span_id)
    return ", ".join(str(envelope["name"]) for envelope in found)


# ---- what a strict replay proves -----------------------------------------------------------


def divergences(run: chronicle.ReplayRun) -> str:
    """How the replay departed from its recording: ``0 unexpected, 1 expected (model#2)``.

    A strict replay raises on an unexpected divergence, so a replay that got this far shows 0
    there; the expected ones are the calls the plan said the fix would change (``expect_change``).
    """
    found = run.divergences()
    expected = [f"{d.name}#{d.index}" for d in found if d.expected]
    listed = f" ({', '.join(expected)})" if expected else ""
    return f"{len(found) - len(expected)} unexpected, {len(expected)} expected{listed}"


def changed_as_expected(run: chronicle.ReplayRun, *calls: tuple[str, int], fixed: str) -> bool:
    """Whether the replay diverged exactly at ``calls``, each an expected change of its input,
    and every changed path there now holds ``fixed`` (text of the fixed result).

    That is the fix reaching the calls downstream of the cut-point, and nothing else changing:
    with the fix reverted the inputs are the recorded ones and there is no divergence at all.
    """
    found = run.divergences()
    return (
        sorted((d.name, d.index) for d in found) == sorted(calls)
        and all(d.expected and d.kind == "input" for d in found)
        and all(fixed in line for d in found for line in d.diff.splitlines())
    )


def refusal_reaches(
    run: chronicle.ReplayRun, call: tuple[str, int], result: object, told: str
) -> bool:
    """Whether the fixed tool refused (``result`` is ``{"blocked": True, ...}``), the agent
    handed that refusal to the model call ``call`` (``told``: the text that call now reads), and
    the replay diverged there alone, as the plan expects."""
    blocked = isinstance(result, dict) and result.get("blocked") is True
    return (
        blocked and json.loads(told) == result and changed_as_expected(run, call, fixed="blocked")
    )
