"""How values are described (``chronicle.output_types``) and what a replay does with a
description it cannot follow: recorded against the real control plane, replayed from what it
stored, edited where a test needs a recording Chronicle would not make itself."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import sys
import uuid
from typing import Any

import openai
import pytest

import chronicle
from chronicle.recording.capture import json_form
from chronicle.redaction import Redaction
from tests.support.llm_server import chat_text
from tests.support.recording import Recording

WHEN = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)


@dataclasses.dataclass
class Slot:
    starts: datetime.datetime
    room: uuid.UUID


def test_the_json_is_the_same_with_types_and_plain_json_has_none():
    plain = {"rows": [{"id": 1, "name": "ada", "score": 0.5}], "next": None}
    assert json_form(plain, types=True) == json_form(plain)
    assert json_form(plain, types=True).types is None

    rich = {"slot": Slot(WHEN, uuid.UUID(int=7)), "pair": (1, 2)}
    described, untyped = json_form(rich, types=True), json_form(rich)
    assert described.value == untyped.value  # output.raw does not change
    assert untyped.types is None
    assert described.types == {
        "/slot": "dataclass test_codecs:Slot",
        "/slot/starts": "datetime",
        "/slot/room": "uuid",
        "/pair": "tuple",
    }


def test_keys_with_slashes_and_tildes_are_escaped_json_pointers(recording):
    @chronicle.boundary("schedule")
    def schedule() -> Any:  # names no type: the recording alone says what came back
        return {"rooms/a": (1, 2), "~home": {"a/b~c": WHEN}, "7": [uuid.UUID(int=1)]}

    with chronicle.record("pointers") as session:
        live = schedule()
    (envelope,) = recording.saved(session.trace_id, 1)
    assert envelope["metadata"]["chronicle.output_types"] == {
        "/rooms~1a": "tuple",
        "/~0home/a~1b~0c": "datetime",
        "/7/0": "uuid",
    }
    with chronicle.replay_trace(session.trace_id, session.span_id, strict=True):
        assert schedule() == live


def test_a_class_defined_in_a_function_is_found_through_the_annotation(recording, caplog):
    @dataclasses.dataclass
    class Local:
        when: datetime.datetime

    def listing() -> Any:  # annotated below: a string annotation could not name a local class
        return [Local(WHEN)]

    listing.__annotations__["return"] = list[Local]
    annotated = chronicle.boundary("annotated")(listing)

    @chronicle.boundary("bare")
    def bare() -> Any:  # names no type
        return Local(WHEN)

    with chronicle.record("locals") as session:
        annotated()
        bare()
    recording.saved(session.trace_id, 2)
    with (
        caplog.at_level(logging.WARNING, logger="chronicle"),
        chronicle.replay_trace(session.trace_id, session.span_id, strict=True),
    ):
        assert annotated() == [Local(WHEN)]
        loose: Any = bare()
    # Not findable by its path: the recorded JSON, with the datetime inside rebuilt, and a warning.
    assert loose == {"when": WHEN} and loose.when == WHEN
    assert "cannot rebuild the dataclass" in caplog.text
    assert "Local" in caplog.text and "name it in the function's return annotation" in caplog.text


def edited(envelope: dict[str, Any], **metadata: object) -> list[dict[str, Any]]:
    changed = copy.deepcopy(envelope)
    changed["metadata"].update(metadata)
    return [changed]


@chronicle.boundary("slot")
def slot() -> Any:  # names no type: the recording alone says what came back
    return Slot(WHEN, uuid.UUID(int=7))


def recorded_slot(recording: Recording) -> dict[str, Any]:
    """The envelope of one recorded ``slot()`` call, as the control plane stored it."""
    with chronicle.record("slot") as session:
        slot()
    (envelope,) = recording.saved(session.trace_id, 1)
    return envelope


def test_a_recording_never_makes_a_replay_import_a_package(recording, caplog):
    envelope = recorded_slot(recording)
    assert "this" not in sys.modules  # importing ``this`` prints the Zen of Python
    hostile = edited(
        envelope,
        **{"chronicle.output_types": {"": "dataclass this:Thing", "/starts": "datetime"}},
    )
    with caplog.at_level(logging.WARNING, logger="chronicle"), chronicle.replay(hostile):
        loose: Any = slot()
    assert "this" not in sys.modules
    assert loose.starts == WHEN  # what can be rebuilt still is
    assert "the class this:Thing cannot be found" in caplog.text


def test_a_description_that_does_not_fit_comes_back_as_json_with_a_warning(recording, caplog):
    envelope = recorded_slot(recording)
    types = {
        "": "dataclass test_codecs:Slot",
        "/starts": "uuid",  # edited: the text there is a datetime's
        "/room": "hologram",  # no such codec
    }
    with (
        caplog.at_level(logging.WARNING, logger="chronicle"),
        chronicle.replay(edited(envelope, **{"chronicle.output_types": types})),
    ):
        value = slot()
    assert value == Slot("2024-05-01T12:00:00+00:00", str(uuid.UUID(int=7)))  # type: ignore[arg-type]
    assert "cannot rebuild the uuid recorded at '/starts' of the output of call 1 of 'slot'" in (
        caplog.text
    )
    assert "no codec 'hologram' is registered here" in caplog.text


def test_a_recording_made_before_types_were_recorded_still_replays(recording):
    @chronicle.boundary("blob")
    def blob() -> Slot:
        return Slot(WHEN, uuid.UUID(int=7))

    @chronicle.boundary("raw_bytes")
    def raw_bytes() -> Any:
        return {"data": b"\x00\xff"}

    with chronicle.record("old") as session:
        blob()
        raw_bytes()
    envelopes = recording.saved(session.trace_id, 2)
    for envelope in envelopes:  # as Chronicle recorded them before chronicle.output_types
        del envelope["metadata"]["chronicle.output_types"]
    with chronicle.replay(envelopes, strict=True):
        assert blob() == Slot(WHEN, uuid.UUID(int=7))  # through the annotation, as before
        assert raw_bytes() == {"data": b"\x00\xff"}  # chronicle.binary_output, as before


def test_a_wrapped_client_records_no_types(llm_server, recording):

    llm_server.reply_with(chat_text("hello"))
    client = chronicle.wrap(
        openai.OpenAI(base_url=llm_server.openai_base_url, api_key="sk-test", max_retries=0)
    )
    with chronicle.record("client") as session:
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
    (envelope,) = recording.saved(session.trace_id, 1)
    # The SDK's own types are rebuilt from output.raw: a description would only cost bytes.
    assert "chronicle.output_types" not in envelope["metadata"]
    client.close()


@pytest.mark.parametrize("limit", [None, 40])
def test_described_values_survive_redaction_and_limits(limit):
    form = json_form(
        {"token": "sk-abcdefghijklmnopqrstuvwx1234", "when": WHEN, "ids": (1, 2)},
        max_string_bytes=limit,
        types=True,
        redaction=Redaction(chronicle.default_redactors()),
    )
    value: Any = form.value
    assert value["token"] != "sk-abcdefghijklmnopqrstuvwx1234"
    assert form.types == {"/when": "datetime", "/ids": "tuple"}
    assert value["when"] == WHEN.isoformat()
