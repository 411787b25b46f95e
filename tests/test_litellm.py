"""``chronicle.wrap(litellm)`` and ``chronicle.wrap(Router(...))``: the real LiteLLM library.

LiteLLM routes each call to the provider its model names; here every provider's ``api_base`` is
``LlmServer``, so the real OpenAI, Anthropic and Gemini code paths inside LiteLLM run against
their wire formats on loopback. Each call is recorded to the real control plane and replayed as
a ``litellm.ModelResponse`` with no request. ``stream=True`` is not recorded yet (streaming is
its own issue): it must pass through and keep working.

``LITELLM_LOCAL_MODEL_COST_MAP`` (set in ``tests/conftest.py``) keeps LiteLLM from fetching its
price list from the internet when it is imported.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

import chronicle
from tests.support.calls import buckets
from tests.support.llm_server import (
    chat_error,
    chat_text,
    chat_usage,
    gemini_text,
    messages_text,
    messages_usage,
)
from tests.support.recording import only, replay_of
from tests.test_gemini import THINKING_BUCKETS, thinking_usage

if TYPE_CHECKING:
    import litellm
else:
    litellm = None  # imported by _litellm, when a test here runs

pytestmark = pytest.mark.xdist_group("litellm")
"""One worker runs this module (``make test``: ``--dist loadgroup``), so one imports LiteLLM."""


@pytest.fixture(scope="module", autouse=True)
def _litellm() -> None:
    """Import LiteLLM when a test here runs, not when pytest collects the module (about 3 s of
    CPU in each worker that collects it). Importing it sets the httpx logger to WARNING for the
    whole process; other tests read httpx's INFO lines, so the level is put back."""
    level = logging.getLogger("httpx").level
    globals()["litellm"] = importlib.import_module("litellm")
    logging.getLogger("httpx").setLevel(level)


COMPLETION = "litellm.completion"
ROUTER = "litellm.router.completion"
USER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(autouse=True)
def _event_loop_for_litellm() -> Iterator[None]:
    """A current event loop this test owns and closes.

    A sync ``completion`` asks ``asyncio.get_event_loop()`` for a loop to log on; with none set,
    asyncio would make one that nobody closes (a ``ResourceWarning`` when it is collected).
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


async def release_litellm_clients() -> None:
    """Close the SDK clients LiteLLM keeps for the life of the process (and their connections
    to this test's model server), in the event loop the async ones were used in."""
    cache: Any = litellm.in_memory_llm_clients_cache
    for client in list(cache.cache_dict.values()):
        close = getattr(client, "close", None)
        if callable(close) and not asyncio.iscoroutinefunction(close):
            close()
    close_async_clients: Any = litellm.close_litellm_async_clients  # untyped in litellm
    await close_async_clients()
    cache.flush_cache()


@pytest.fixture(autouse=True)
def _release_sync_clients() -> Iterator[None]:
    yield
    asyncio.run(release_litellm_clients())


@pytest.fixture
def wrapped(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ``litellm`` module, wrapped for this test only (its functions restored after)."""
    for name in ("completion", "acompletion"):
        monkeypatch.setattr(litellm, name, getattr(litellm, name))
    return chronicle.wrap(litellm)


def test_completion_to_an_openai_model_is_recorded_and_replayed(wrapped, llm_server, recording):
    assert wrapped.completion.__chronicle_boundary__.name == COMPLETION
    llm_server.reply_with(chat_text("Sunny.", usage=chat_usage(30, 4, cached_tokens=10)))
    options = {"api_base": llm_server.openai_base_url, "api_key": "test-key"}
    with chronicle.record("litellm-openai") as session:
        live = litellm.completion(model="openai/gpt-4o-mini", messages=USER, **options)
    assert isinstance(live, litellm.ModelResponse)
    assert llm_server.last_request.path == "/v1/chat/completions"

    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == COMPLETION
    assert envelope["input"]["raw"]["model"] == "openai/gpt-4o-mini"
    assert envelope["input"]["messages"] == USER
    output = envelope["output"]
    assert output["provider"] == "openai"
    assert output["content"] == [{"type": "text", "text": "Sunny."}]
    assert output["finish_reason"] == "stop"
    assert output["usage"] == buckets(input=20, cached_read=10, output=4)
    assert envelope["metadata"]["client.library"] == "litellm"

    before = llm_server.request_count
    with replay_of(session) as run:
        replayed = litellm.completion(model="openai/gpt-4o-mini", messages=USER, **options)
    assert llm_server.request_count == before
    assert isinstance(replayed, litellm.ModelResponse)  # LiteLLM's own type
    assert replayed.choices[0].message.content == "Sunny."
    assert replayed.id == live.id
    assert getattr(replayed, "usage").prompt_tokens == 30  # noqa: B009 (untyped in litellm)
    assert [(c.name, c.mode) for c in run.call_log()] == [(COMPLETION, "stub")]


def test_completion_to_an_anthropic_model_records_provider_and_cache_buckets(
    wrapped, llm_server, recording
):
    usage = messages_usage(40, 6, cache_read_input_tokens=300, cache_creation_input_tokens=50)
    llm_server.reply_with(messages_text("Bonjour.", usage=usage))
    with chronicle.record("litellm-anthropic") as session:
        live = litellm.completion(
            model="anthropic/claude-sonnet-4-5",
            messages=USER,
            max_tokens=64,
            api_base=llm_server.url,
            api_key="test-key",
        )
    assert live.choices[0].message.content == "Bonjour."
    assert llm_server.last_request.path == "/v1/messages"  # LiteLLM's own Anthropic client
    output = only(recording.saved(session.trace_id, 1))["output"]
    assert output["provider"] == "anthropic"
    assert output["usage"] == {
        "input": 40,
        "cached_read": 300,
        "cache_write": 50,
        "output": 6,
        "reasoning": 0,
    }


def test_completion_to_a_gemini_model_matches_the_gemini_adapter(wrapped, llm_server, recording):
    llm_server.reply_with(gemini_text("Sunny.", usage=thinking_usage()))
    with chronicle.record("litellm-gemini") as session:
        litellm.completion(
            model="gemini/gemini-2.5-flash",
            messages=USER,
            api_base=llm_server.url,
            api_key="test-key",
        )
    assert llm_server.last_request.path == "/models/gemini-2.5-flash:generateContent"
    output = only(recording.saved(session.trace_id, 1))["output"]
    assert output["provider"] == "google"
    # the same buckets the same reply gives read through google-genai
    assert output["usage"] == THINKING_BUCKETS


def test_acompletion_is_recorded_and_replayed(wrapped, llm_server, recording):
    options = {"api_base": llm_server.openai_base_url, "api_key": "test-key"}
    llm_server.reply_with(chat_text("async hello"))

    async def record() -> tuple[Any, chronicle.Session]:
        async with chronicle.record("litellm-async") as session:
            reply = await litellm.acompletion(model="openai/gpt-4o-mini", messages=USER, **options)
        await release_litellm_clients()
        return reply, session

    live, session = asyncio.run(record())
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["name"] == COMPLETION  # the same name as completion: either replays the other
    assert envelope["output"]["content"] == [{"type": "text", "text": "async hello"}]

    async def replay() -> Any:
        async with replay_of(session):
            return await litellm.acompletion(model="openai/gpt-4o-mini", messages=USER, **options)

    before = llm_server.request_count
    replayed = asyncio.run(replay())
    assert llm_server.request_count == before
    assert isinstance(replayed, litellm.ModelResponse)
    assert replayed.choices[0].message.content == live.choices[0].message.content


def test_a_router_records_each_call_once_even_over_the_wrapped_module(
    wrapped, llm_server, recording
):
    router = litellm.Router(
        model_list=[
            {
                "model_name": "fast",
                "litellm_params": {
                    "model": "openai/gpt-4o-mini",
                    "api_base": llm_server.openai_base_url,
                    "api_key": "test-key",
                },
            }
        ],
        num_retries=0,
    )
    assert chronicle.wrap(router) is router
    llm_server.reply_with(chat_text("routed"), chat_text("routed async"))
    with chronicle.record("litellm-router") as session:
        first = router.completion(model="fast", messages=USER)
        second = asyncio.run(acompletion_then_release(router))
    assert (first.choices[0].message.content, second.choices[0].message.content) == (
        "routed",
        "routed async",
    )
    envelopes = recording.saved(session.trace_id, 2)
    assert chronicle.flush(10)
    names = [e["name"] for e in recording.control_plane.trace_envelopes(session.trace_id)]
    assert names == [ROUTER, ROUTER]  # the module's wrapped completion inside: not again
    assert envelopes[0]["input"]["raw"]["model"] == "fast"
    assert envelopes[0]["output"]["content"] == [{"type": "text", "text": "routed"}]

    before = llm_server.request_count
    with replay_of(session):
        again = router.completion(model="fast", messages=USER)
    assert llm_server.request_count == before
    assert isinstance(again, litellm.ModelResponse)
    assert again.choices[0].message.content == "routed"


async def acompletion_then_release(router: litellm.Router) -> Any:
    reply = await router.acompletion(model="fast", messages=USER)
    await release_litellm_clients()
    return reply


def test_a_provider_error_is_recorded_with_litellms_exception(wrapped, llm_server, recording):
    llm_server.reply_with(chat_error(400, "model 'nope' does not exist"))
    with chronicle.record("litellm-error") as session:
        with pytest.raises(litellm.BadRequestError):
            litellm.completion(
                model="openai/nope",
                messages=USER,
                api_base=llm_server.openai_base_url,
                api_key="test-key",
                num_retries=0,
            )
    envelope = only(recording.saved(session.trace_id, 1))
    assert envelope["envelope_status"]["status"] == "failure"
    assert envelope["output"]["error"]["type"] == "BadRequestError"
    assert "does not exist" in envelope["output"]["error"]["message"]


def test_streams_are_recorded_and_replayed_sync_and_async(wrapped, llm_server, recording):
    openai_options = {"api_base": llm_server.openai_base_url, "api_key": "test-key"}
    anthropic_options = {"api_base": llm_server.url, "api_key": "test-key", "max_tokens": 64}

    def consume() -> tuple[str, str]:
        chunks = litellm.completion(
            model="openai/gpt-4o-mini", messages=USER, stream=True, **openai_options
        )
        first = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)

        async def consume_async() -> str:
            stream = await litellm.acompletion(
                model="anthropic/claude-sonnet-4-5", messages=USER, stream=True, **anthropic_options
            )
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
            await release_litellm_clients()
            return text

        return first, asyncio.run(consume_async())

    with chronicle.record("litellm-stream") as session:
        live = consume()
    assert live == ("echo: What is the weather in Paris?",) * 2
    assert [request.stream for request in llm_server.requests] == [True, True]
    first, second = recording.saved(session.trace_id, 2)
    assert (first["output"]["provider"], second["output"]["provider"]) == ("openai", "anthropic")
    for envelope in (first, second):
        assert envelope["name"] == COMPLETION
        assert envelope["metadata"]["chronicle.streamed"] is True
        assert envelope["output"]["content"] == [{"type": "text", "text": live[0]}]

    before = llm_server.request_count
    with replay_of(session) as run:
        assert consume() == live  # LiteLLM's own chunks, rebuilt from the recording
    assert llm_server.request_count == before
    assert [(c.name, c.mode) for c in run.call_log()] == [(COMPLETION, "stub")] * 2
