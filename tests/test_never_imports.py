"""A replay never imports (issue 40, item 1): a recording is data, and the class names it carries
(an output value's type, a failure's exception class) pick among classes already loaded, never a
module to load. Recorded against the real control plane, then edited as a hostile corpus file
from production would be, and replayed from a file."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import json
import logging
import subprocess
import sys
import textwrap
import unittest
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.save.incident import Incident
from chronicle.wire import ERROR, OUTPUT_TYPES
from tests.support.recording import Recording

WHEN = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)


@dataclasses.dataclass
class Slot:
    starts: datetime.datetime
    room: uuid.UUID


@chronicle.boundary("slot")
def slot() -> Any:  # names no type: the recording alone says what came back
    return Slot(WHEN, uuid.UUID(int=7))


class QuotaError(Exception):
    pass


@chronicle.boundary("charge")
def charge() -> str:
    raise QuotaError("over the quota")


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package the code under test imported (``planted_pkg``) whose submodules are not loaded:
    ``boom`` writes a marker file and exits the process when imported (as ``unittest.__main__``
    does), and the package's ``__getattr__`` imports a submodule on demand (as lazy packages
    do). Yields the marker's path: it exists once anything imported ``boom``."""
    marker = tmp_path / "imported.txt"
    package = tmp_path / "planted_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            import importlib


            def __getattr__(name):
                return importlib.import_module(f"{__name__}.{name}")
            """
        ),
        encoding="utf-8",
    )
    (package / "boom.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            Path({str(marker)!r}).write_text("imported", encoding="utf-8")
            raise SystemExit("a recording made the replay import planted_pkg.boom")
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import planted_pkg  # type: ignore[import-not-found]  # the code under test imports it

    assert planted_pkg is sys.modules["planted_pkg"]
    try:
        yield marker
    finally:
        for name in [n for n in sys.modules if n == "planted_pkg" or n.startswith("planted_pkg.")]:
            del sys.modules[name]


def recorded(recording: Recording, call: Any, name: str) -> dict[str, Any]:
    """The envelope of one recorded call, as the control plane stored it."""
    with chronicle.record(name) as session:
        with contextlib.suppress(QuotaError):  # a recorded failure is what ``charge`` makes
            call()
    (envelope,) = recording.saved(session.trace_id, 1)
    return envelope


def hostile_file(folder: Path, envelope: dict[str, Any], **metadata: object) -> Path:
    """``envelope`` with its metadata edited, written as an incident file (a corpus file)."""
    changed = copy.deepcopy(envelope)
    for key, value in metadata.items():
        if isinstance(value, dict) and isinstance(changed["metadata"].get(key), dict):
            changed["metadata"][key] = changed["metadata"][key] | value
        else:
            changed["metadata"][key] = value
    path = folder / "hostile.json"
    Incident.of([changed]).write(path)
    return path


@pytest.mark.parametrize(
    "description",
    [
        "dataclass planted_pkg.boom:Slot",  # a submodule of a package the code imported
        "dataclass planted_pkg:boom.Slot",  # reached through the package's __getattr__
        "pydantic unittest.__main__:TestProgram",  # the issue's own: unittest.main() ran
    ],
)
def test_a_type_naming_an_unloaded_module_comes_back_as_json_with_a_warning(
    recording, planted, tmp_path, caplog, description
):
    assert "unittest" in sys.modules and unittest.__name__ == "unittest"
    path = hostile_file(
        tmp_path, recorded(recording, slot, "slot"), **{OUTPUT_TYPES: {"": description}}
    )
    with caplog.at_level(logging.WARNING, logger="chronicle"), chronicle.replay(path):
        value: Any = slot()
    assert not planted.exists()  # boom.py never ran
    assert "planted_pkg.boom" not in sys.modules and "unittest.__main__" not in sys.modules
    # what was not rebuilt is its recorded JSON; the values described inside it still are
    assert value["starts"] == WHEN and value["room"] == uuid.UUID(int=7)
    path_named = description.partition(" ")[2]
    assert f"cannot rebuild the {description} recorded at the top" in caplog.text
    assert f"the class {path_named} cannot be found" in caplog.text
    assert "a replay never imports a module a recording names" in caplog.text


def test_a_class_already_loaded_is_still_rebuilt(recording, tmp_path):
    path = hostile_file(tmp_path, recorded(recording, slot, "slot"))
    with chronicle.replay(path, strict=True):
        assert slot() == Slot(WHEN, uuid.UUID(int=7))


@pytest.mark.parametrize("named", ["planted_pkg.boom:QuotaError", "planted_pkg:boom.QuotaError"])
def test_a_failure_naming_an_unloaded_exception_class_is_replayed_as_recorded(
    recording, planted, tmp_path, named
):
    envelope = recorded(recording, charge, "charge")
    assert envelope["metadata"][ERROR]["class"] == f"{__name__}:QuotaError"
    with chronicle.replay(hostile_file(tmp_path, envelope, **{ERROR: {"class": named}})):
        with pytest.raises(chronicle.RecordedCallError, match="over the quota") as raised:
            charge()
    assert not isinstance(raised.value, QuotaError)  # no class to rebuild: the recorded error
    assert not planted.exists() and "planted_pkg.boom" not in sys.modules

    with chronicle.replay(hostile_file(tmp_path, envelope)):  # the class loaded: rebuilt
        with pytest.raises(QuotaError, match="over the quota"):
            charge()


LOADED_BY = """
import json, sys

import chronicle

after_import = sorted(m for m in sys.modules if m.startswith("chronicle."))


@chronicle.boundary("lookup", kind="tool")
def lookup(query):
    return {"hits": [query]}


chronicle.configure(enabled=False)
with chronicle.record("a request"):
    lookup("refund")
after_recording = sorted(m for m in sys.modules if m.startswith("chronicle."))
import chronicle.replay.plan  # binds the package's name in the facade, as any import of it does
from unittest import mock

with mock.patch("chronicle.replay") as patched:  # a test's patch still takes, and is undone
    patch_taken = chronicle.replay is patched

print(json.dumps({
    "patch_taken_and_undone": patch_taken and chronicle.replay is not patched,
    "after_import": after_import,
    "after_recording": after_recording,
    "replay_is_the_function": callable(chronicle.replay),
    "dir_lists_all": set(chronicle.__all__) <= set(dir(chronicle)),
}))
"""
"""A fresh interpreter that imports Chronicle, then records a request with it."""


def test_import_loads_only_the_errors_and_recording_loads_no_replay_check_or_reader():
    """``import chronicle`` is cheap (an application's start-up, a pytest session with the
    plugin), and a recording application never loads the replay engine, the checks, the
    readers, the diff or the test tooling: each name is loaded when first used."""
    found = subprocess.run(
        [sys.executable, "-c", LOADED_BY],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(found.stdout.strip().splitlines()[-1])
    assert loaded["after_import"] == [
        "chronicle._version",
        "chronicle.errors",
        "chronicle.lazy",  # the facade's __getattr__ (standard library only)
        "chronicle.log",
    ]
    units = {".".join(m.split(".")[:3]) for m in loaded["after_recording"]}
    assert "chronicle.recording.boundary" in units  # it did record
    never = {"chronicle.check", "chronicle.read", "chronicle.whatif", "chronicle.cli"}
    never |= {"chronicle.testing", "chronicle.replay.entry", "chronicle.replay.run"}
    assert not any(m == n or m.startswith(f"{n}.") for m in units for n in never), units
    assert loaded["replay_is_the_function"] and loaded["dir_lists_all"]
    assert loaded["patch_taken_and_undone"]
