"""``chronicle.diff`` of large recordings leaves the garbage collector alone, and a side read from
a file envelope by envelope (``replay/load.py``, ``FileEnvelopes``) is the side ``load_envelopes``
gives, or the same error.

The recordings are an agent of 1,501 calls made with ``capture()`` (the real recording path):
``agent`` > 150 ``step`` > 9 ``lookup`` tool calls each; B differs from A in the result of one
``lookup`` in the middle. Saved as incident files, as ``chronicle save`` writes them.
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import chronicle
from chronicle.replay.load import load_envelopes
from chronicle.save.incident import Incident
from chronicle.testing import capture

STEPS, PER_STEP = 150, 9
CHANGED = STEPS * PER_STEP // 2  # the lookup whose result differs in B (0-based)


def record(changed: int | None) -> list[Any]:
    """One run of the agent, recorded: its envelope models in call order."""
    count = [0]

    @chronicle.boundary("lookup", kind="tool")
    def lookup(query: str) -> dict[str, Any]:
        index = count[0]
        count[0] += 1
        hits = [f"doc-{index}-{k}" for k in range(3)]
        if index == changed:
            hits[1] = "doc-changed"
        return {"query": query, "hits": hits}

    @chronicle.boundary("step")
    def step(number: int) -> int:
        return sum(len(lookup(f"step {number} query {i}")["hits"]) for i in range(PER_STEP))

    @chronicle.boundary("agent")
    def agent(task: str) -> int:
        return sum(step(number) for number in range(STEPS))

    with capture(max_queue=100_000) as sent:
        with chronicle.record("diff-gc"):
            agent("answer the question")
    return list(sent.envelopes)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A and B as incident files."""
    folder = tmp_path_factory.mktemp("diff-gc")
    paths = folder / "a.json", folder / "b.json"
    for path, changed in zip(paths, (None, CHANGED), strict=True):
        Incident.of(record(changed)).write(path)
    return paths


def shown(result: chronicle.TraceDiff) -> tuple[Any, str, str]:
    """What a user reads of a diff: its JSON form (the sources' names aside) and both terminal
    forms."""
    form = result.to_json()
    del form["a"], form["b"]
    return form, result.render(changed_only=True), result.render().split("\n", 2)[2]


@pytest.fixture
def watched() -> Iterator[list[tuple[str, int, bool, int]]]:
    """The collector's passes while the test runs: (phase, generation, enabled, frozen)."""
    seen: list[tuple[str, int, bool, int]] = []

    def note(phase: str, info: dict[str, int]) -> None:
        seen.append((phase, info["generation"], gc.isenabled(), gc.get_freeze_count()))

    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)


def test_a_large_diff_runs_with_the_collector_on_for_every_thread(files, watched):
    a, b = files
    assert gc.isenabled()
    threshold = gc.get_threshold()
    samples: list[bool] = []
    done = threading.Event()

    def handler() -> None:  # another thread of the program, say a request handler
        while not done.is_set():
            samples.append(gc.isenabled())
            done.wait(0.0005)

    other = threading.Thread(target=handler)
    other.start()
    try:
        result = chronicle.diff(a, b)
    finally:
        done.set()
        other.join()
    assert [line.a.label for line in result.changed()] == [f"lookup#{CHANGED + 1}"]  # type: ignore[union-attr]
    # The collector ran while the diff did (a paused one never starts a pass), enabled and
    # with nothing frozen, and the other thread never saw it off.
    starts = [entry for entry in watched if entry[0] == "start"]
    assert starts and all(enabled and frozen == 0 for _, _, enabled, frozen in starts)
    assert samples and all(samples)
    assert gc.isenabled() and gc.get_threshold() == threshold and gc.get_freeze_count() == 0


def test_a_large_diff_read_from_files_is_the_diff_of_the_envelopes_however_held(files):
    """The files read envelope by envelope, the same envelopes loaded as models, as JSON dicts,
    and in reverse order (placed by the call tree): one diff, line for line."""
    a, b = files
    expected = shown(chronicle.diff(a, b))
    form = expected[0]
    assert form["counts"] == {
        "same": STEPS * (PER_STEP + 1),
        "changed": 1,
        "only_a": 0,
        "only_b": 0,
    }
    assert form["first_divergence"] == {"a": f"lookup#{CHANGED + 1}", "b": f"lookup#{CHANGED + 1}"}
    held_a, held_b = load_envelopes(a), load_envelopes(b)
    for left, right in (
        (held_a, held_b),
        ([e.model_dump(mode="json") for e in held_a], [e.model_dump(mode="json") for e in held_b]),
        (held_a[::-1], held_b[::-1]),
    ):
        assert shown(chronicle.diff(left, right)) == expected


def test_a_trace_on_the_control_plane_is_the_diff_of_its_incident_file(recording, tmp_path):
    """Read from the control plane (its JSON answer, one envelope at a time) and from the file
    saved of it: the same diff."""

    changed_at = [-1]

    @chronicle.boundary("lookup", kind="tool")
    def lookup(query: str, n: int) -> dict[str, Any]:
        return {"query": query, "hits": ["doc-changed" if n == changed_at[0] else "doc-1", "2"]}

    @chronicle.boundary("agent")
    def agent(task: str) -> int:
        return sum(len(lookup(task, i)["hits"]) for i in range(150))

    sessions = []
    for changed_at[0] in (-1, 75):
        with chronicle.record("diff-gc") as session:
            agent("look it up")
        sessions.append(session)
    a = recording.saved(sessions[0].trace_id, 151)
    recording.saved(sessions[1].trace_id, 151)
    Incident.of(a).write(tmp_path / "a.json")
    from_trace = chronicle.diff(sessions[0].trace_id, sessions[1].trace_id)
    from_file = chronicle.diff(tmp_path / "a.json", sessions[1].trace_id)
    assert shown(from_trace) == shown(from_file)
    assert [line.a.label for line in from_trace.changed()] == ["lookup#76"]  # type: ignore[union-attr]


# ---- a file is judged by one rule, however it is read ------------------------------------------


def _variants(text: str) -> dict[str, str]:
    """The incident file's text changed in ways ``json.loads`` and ``load_envelopes`` take or
    refuse: each must read the same from the stream as from ``load_envelopes``."""
    data = json.loads(text)
    envelopes = data["envelopes"]
    deep: Any = "bottom"
    for _ in range(250):
        deep = [deep]
    first = {**envelopes[0], "output": {"raw": deep}}
    compact = json.dumps(data)
    return {
        "as saved": text,
        "compact": compact,
        "indented, envelopes first": json.dumps(
            {"envelopes": envelopes, "trace_id": data["trace_id"]}, indent=2
        ),
        "a bare array": json.dumps(envelopes),
        "envelopes repeated (the last is kept)": '{"envelopes": [], ' + compact[1:],
        "a trailing comma in the array": compact.removesuffix("]}") + ",]}",
        "a trailing comma in the object": compact.removesuffix("}") + ",}",
        "text after the value": text + " []",
        "no envelopes key": json.dumps({"trace_id": data["trace_id"]}),
        "an item that is a number": json.dumps({"envelopes": [*envelopes[:3], 5]}),
        "an item nested too deep": json.dumps({"envelopes": [first, *envelopes[1:]]}),
        "a key nested too deep": json.dumps({"spans": deep, "envelopes": envelopes}),
        "an item missing its name": json.dumps(
            {"envelopes": [*envelopes[:3], {k: v for k, v in envelopes[3].items() if k != "name"}]}
        ),
        "out of call order": json.dumps({"envelopes": envelopes[::-1]}),
        "empty": json.dumps({"envelopes": []}),
        "not UTF-8": text.replace('"agent"', '"ag\udcffent"', 1),
    }


def _outcome(action: Any) -> Any:
    try:
        return shown(action())
    except chronicle.ReplayError as exc:
        return str(exc).removeprefix("replay: ").removeprefix("diff: A: ")


def test_a_file_read_envelope_by_envelope_is_read_as_load_envelopes_reads_it(files, tmp_path):
    a, b = files
    part = 201  # the agent and its first 20 steps: a whole tree, and quick to read 34 times
    left = tmp_path / "a.json"
    Incident.of(load_envelopes(a)[:part]).write(left)
    right = load_envelopes(b)[:part]
    for name, text in _variants(left.read_text(encoding="utf-8")).items():
        path = tmp_path / "variant.json"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))

        def loaded(path: Path = path) -> chronicle.TraceDiff:
            return chronicle.diff(load_envelopes(path), right)

        def read(path: Path = path) -> chronicle.TraceDiff:
            return chronicle.diff(path, right)

        expected, got = _outcome(loaded), _outcome(read)
        assert got == expected, name
