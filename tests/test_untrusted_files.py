"""Every recording file is read as untrusted input (issue 40, item 2).

A corpus folder comes from production, so beside 14 real recordings of the triage agent
(``examples/triage_agent.py``, recorded live through a real ``openai.OpenAI`` client against the
local model server) it holds 6 hostile files: random bytes, JSON nested 100,000 deep, a FIFO
named ``x.json``, a link to ``/dev/zero`` named ``y.json``, a 300 MB file (sparse, so making it
is fast: the size is refused before anything is read), and a recording whose stubbed call's type
names a module that exits the process when imported. ``chronicle replay``, ``pytest
--chronicle-corpus``, the pytest marker, ``chronicle.replay(path)`` and ``chronicle diff`` each
give every unreadable file one line naming it and what to do, replay every other file, never
hang, never show a traceback, never import, and stay under 300 MB of memory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chronicle
from chronicle.cli import main
from chronicle.save import untrusted
from chronicle.save.incident import Incident
from chronicle.save.untrusted import RecordingFileError
from chronicle.wire import OUTPUT_TYPES
from examples import triage_agent
from tests.support.llm_server import LlmServer
from tests.test_corpus import ENTRY, record_corpus, request

pytest_plugins = ["pytester"]

ROOT = Path(__file__).parent.parent
GOOD = 14
UNREADABLE = ("bytes.json", "deep.json", "huge.json", "x.json", "y.json")
"""The hostile files no replay can read: each must be an ``error``, naming the file."""
TYPED = "typed.json"
"""The hostile file that reads as JSON: its stubbed call's type names ``planted_pkg.boom``."""
BOOM = """
from pathlib import Path

Path({marker!r}).write_text("imported", encoding="utf-8")
raise SystemExit("a recording made the replay import planted_pkg.boom")
"""


@pytest.fixture
def agent(llm_server: LlmServer, monkeypatch: pytest.MonkeyPatch) -> LlmServer:
    """The triage agent's client pointed at the local model server."""
    monkeypatch.setattr(triage_agent.client, "base_url", llm_server.openai_base_url)
    return llm_server


def plant(folder: Path) -> Path:
    """A package ``planted_pkg`` under ``folder`` whose submodule ``boom`` writes a marker file
    and exits the process when imported (as ``unittest.__main__`` does); the marker's path."""
    marker = folder / "imported.txt"
    package = folder / "planted_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "boom.py").write_text(BOOM.format(marker=str(marker)), encoding="utf-8")
    return marker


def hostile_corpus(server: LlmServer, folder: Path) -> None:
    """``folder``: 14 recordings of the triage agent and the 6 hostile files."""
    good = record_corpus(server, folder, GOOD)
    (folder / "bytes.json").write_bytes(b'{"envelopes": [' + os.urandom(4096) + b"\xff\xfe]}")
    depth = 100_000
    (folder / "deep.json").write_text(
        '{"envelopes": [' + "[" * depth + "]" * depth + "]}", encoding="utf-8"
    )
    os.mkfifo(folder / "x.json")
    (folder / "y.json").symlink_to("/dev/zero")
    huge = folder / "huge.json"
    huge.write_text('{"envelopes": [', encoding="utf-8")
    os.truncate(huge, 300 * 1024 * 1024)  # sparse: no disk, no time
    data = json.loads(good[0].read_text(encoding="utf-8"))
    research = next(e for e in data["envelopes"] if e["name"] == "research")
    research["metadata"][OUTPUT_TYPES] = {"": "dataclass planted_pkg.boom:Notes"}
    (folder / TYPED).write_text(json.dumps(data), encoding="utf-8")


def build(server: LlmServer, base: Path) -> tuple[Path, Path]:
    """The hostile corpus in ``base/incidents``, and the marker file ``planted_pkg.boom`` writes
    if imported (``planted_pkg`` is put in ``base/planted``, for the processes that replay the
    corpus to have on ``sys.path``)."""
    marker = plant(base / "planted")
    folder = base / "incidents"
    folder.mkdir()
    hostile_corpus(server, folder)
    assert len(server.requests) == 2 * GOOD
    return folder, marker


@pytest.fixture
def corpus(agent: LlmServer, tmp_path: Path) -> tuple[Path, Path]:
    """The hostile corpus folder and the marker file (``build``)."""
    return build(agent, tmp_path)


def outcomes(out: str) -> dict[str, tuple[str, list[str]]]:
    """``chronicle replay``'s lines, by file name: the outcome and the result's lines."""
    found: dict[str, tuple[str, list[str]]] = {}
    current: list[str] = []
    for line in out.splitlines():
        head = re.match(r"(passed|diverged|failed|error)\s+(\S+?)(:|$)", line)
        if head:
            current = [line]
            found[Path(head.group(2)).name] = (head.group(1), current)
        elif line.startswith(" ") and current:
            current.append(line)
        else:
            current = []
    return found


# ---- chronicle replay DIR ---------------------------------------------------------------------

RUN_CLI = """
import json, sys
import planted_pkg  # the application imported the package; boom is its submodule
from chronicle.cli import main
status = main(["replay", sys.argv[1], "--entry", sys.argv[2]])
# The peak of this process's own memory (VmHWM): ru_maxrss would carry the peak of the pytest
# worker that forked it across exec, hundreds of MB in a full run.
with open("/proc/self/status") as status_file:
    peak_kb = next(int(line.split()[1]) for line in status_file if line.startswith("VmHWM:"))
imported = sorted(name for name in sys.modules if name.startswith("planted_pkg."))
print(json.dumps({"status": status, "peak_kb": peak_kb, "imported": imported}), file=sys.stderr)
"""


def test_chronicle_replay_makes_each_hostile_file_one_error_line_and_replays_the_others(corpus):
    folder, marker = corpus
    done = subprocess.run(
        [sys.executable, "-c", RUN_CLI, str(folder), ENTRY],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(marker.parent)])},
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert "Traceback" not in done.stdout + done.stderr
    assert report["status"] == 1
    assert report["imported"] == [] and not marker.exists()
    assert report["peak_kb"] < 300 * 1024, f"peak {report['peak_kb'] / 1024:.0f} MB"

    found = outcomes(done.stdout)
    assert len(found) == GOOD + 6, done.stdout
    good = {name: kind for name, (kind, _) in found.items() if name.startswith("request-")}
    assert good == {f"request-{n:02d}.json": "passed" for n in range(GOOD)}
    for name in UNREADABLE:
        kind, lines = found[name]
        assert kind == "error" and len(lines) == 1, lines  # one line: the file, what to do
    said = {name: found[name][1][0] for name in UNREADABLE}
    assert "it is not UTF-8 text" in said["bytes.json"]
    assert "nested deeper than any recording" in said["deep.json"]
    assert "it holds 314572800 bytes, over the 268435456 bytes" in said["huge.json"]
    assert "max_file_bytes" in said["huge.json"]
    assert "it is a FIFO (named pipe), not a regular file" in said["x.json"]
    assert "it is a link to /dev/zero, a character device, not a regular file" in said["y.json"]
    # The recorded type names a module no code imported: its value replays as its JSON, or the
    # file is an error; never an import.
    typed, _ = found[TYPED]
    assert typed in ("passed", "error")
    passed = GOOD + (typed == "passed")
    summary = done.stdout.splitlines()[-1]
    assert summary.startswith(f"20 recordings: {passed} passed, {20 - passed} error ("), summary


# ---- pytest --chronicle-corpus, and the marker --------------------------------------------------

MARKED = """
import pytest

from examples import triage_agent


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.chronicle_replay(f"incidents/{{n}}")) for n in {names!r}],
)
def test_marked(name):
    triage_agent.triage("I cannot reset my password", "standard")
"""


def test_pytest_corpus_and_marker_fail_each_hostile_file_in_one_line(agent, pytester, monkeypatch):
    _, marker = build(agent, pytester.path)
    pytester.makeconftest("import planted_pkg  # the application imported the package\n")
    pytester.makepyfile(test_marked=MARKED.format(names=list(UNREADABLE)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(marker.parent)]))
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:langsmith_plugin",
        "-v",
        "-rfE",
        "--chronicle-corpus",
        "incidents",
        "--chronicle-entry",
        ENTRY,
        "test_marked.py",
        timeout=300,
    )
    text = result.stdout.str()
    assert "Traceback" not in text + result.stderr.str() and not marker.exists()
    typed_passed = f"incidents/{TYPED} PASSED" in text  # its value replayed as its JSON
    assert typed_passed or f"incidents/{TYPED} FAILED" in text, text
    corpus_failed = len(UNREADABLE) + (not typed_passed)
    # the corpus's unreadable files fail; a marked test naming one errors at its setup
    result.assert_outcomes(passed=GOOD + typed_passed, failed=corpus_failed, errors=5)
    summary = [line for line in result.stdout.lines if line.startswith(("FAILED", "ERROR"))]
    for name in UNREADABLE:
        (item,) = [line for line in summary if line.split()[1] == f"incidents/{name}"]
        assert f" - error     incidents/{name}: it " in item, item
        # the item's failure is one line (no plan option advice: none would help), and so is
        # the setup error of the marked test naming the file
        body = _section(text, f" chronicle replay incidents/{name} ")
        assert len(body) == 1 and body[0].startswith(f"error     incidents/{name}: it "), body
        body = _section(text, f" ERROR at setup of test_marked[{name}] ")
        assert len(body) == 1 and body[0].startswith("chronicle: replay: "), body
        assert f"/incidents/{name} " in body[0], body


def _section(text: str, title: str) -> list[str]:
    """The non-empty lines of the report section whose ``____ title ____`` header holds
    ``title``, up to the next header."""
    after = text.split(title, 1)[1].split("\n", 1)[1]
    lines = []
    for line in after.splitlines():
        if line.startswith(("_", "=")):
            break
        if line.strip():
            lines.append(line)
    return lines


# ---- chronicle.replay(path) and chronicle diff ----------------------------------------------


def test_replay_and_diff_refuse_each_hostile_file_with_one_error_naming_it(
    corpus, capsys, monkeypatch
):
    folder, marker = corpus
    good = folder / "request-00.json"
    for name in UNREADABLE:
        path = folder / name
        with pytest.raises(RecordingFileError) as raised:
            chronicle.replay(path)
        assert isinstance(raised.value, chronicle.ReplayError)  # a ChronicleError
        assert raised.value.path == path and str(raised.value).startswith(f"replay: {path} ")
        with pytest.raises(RecordingFileError, match=re.escape(str(path))):
            Incident.read(path)

        status = main(["diff", str(path), str(good)])
        out, err = capsys.readouterr()
        assert status == 2 and out == ""
        assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err, err

    monkeypatch.syspath_prepend(str(marker.parent))
    import planted_pkg  # type: ignore[import-not-found]  # noqa: F401  # the app imported it

    try:
        with chronicle.replay(folder / TYPED):
            answer = triage_agent.triage(**request(0))
        assert answer["priority"] == "normal"
        assert main(["diff", str(folder / TYPED), str(good)]) in (0, 1)
        assert "planted_pkg.boom" not in sys.modules and not marker.exists()
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "planted_pkg"]:
            del sys.modules[name]


def test_a_link_to_a_recording_is_read_and_the_size_limit_is_a_setting(agent, tmp_path):
    (recorded,) = record_corpus(agent, tmp_path, 1)
    link = tmp_path / "link.json"
    link.symlink_to(recorded)
    assert len(Incident.read(link).envelopes) == 5  # a link to a regular file is read

    size = recorded.stat().st_size
    chronicle.configure(max_file_bytes=size - 1)
    with pytest.raises(RecordingFileError, match=rf"holds {size} bytes, over the {size - 1}"):
        chronicle.replay(recorded)
    chronicle.configure(max_file_bytes=size)
    with chronicle.replay(recorded):
        assert triage_agent.triage(**request(0))["priority"] == "normal"
    with pytest.raises(chronicle.ConfigurationError, match="max_file_bytes"):
        chronicle.configure(max_file_bytes=0)


def test_too_many_values_are_refused_before_parsing_and_commas_in_strings_do_not_count(
    agent, tmp_path, monkeypatch
):
    (recorded,) = record_corpus(agent, tmp_path, 1)
    monkeypatch.setattr(untrusted, "MAX_ITEMS", 1000)
    data = json.loads(recorded.read_text(encoding="utf-8"))
    data["metadata"] = {"note": "a, b, [c], {d}" * 500}  # 2,000 commas, in one string
    recorded.write_text(json.dumps(data), encoding="utf-8")
    assert len(Incident.read(recorded).envelopes) == 5

    many = tmp_path / "many.json"
    many.write_text('{"envelopes": [' + ",".join(["{}"] * 2000) + "]}", encoding="utf-8")
    with pytest.raises(RecordingFileError, match=r"holds up to 4002 JSON values, over the 1000"):
        Incident.read(many)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "is not JSON: Expecting value"),
        (b'{"envelopes": [' + b"1" * 5000 + b"]}", "is not JSON a recording holds"),
        (b'{"envelopes": [' + b"[" * 300 + b"]" * 300 + b"]}", "nested deeper than any recording"),
        (b"\xef\xbb\xbf" + b'{"envelopes": []}', "is not JSON"),  # a BOM is not JSON
    ],
)
def test_other_damage_is_one_error_naming_the_file(tmp_path, content, said):
    path = tmp_path / "damaged.json"
    path.write_bytes(content)
    for read in (Incident.read, chronicle.replay):
        with pytest.raises(RecordingFileError, match=re.escape(said)) as raised:
            read(path)
        assert str(raised.value).startswith(f"replay: {path} ")


def test_a_folder_named_like_a_recording_is_one_error_result(agent, tmp_path, capsys):
    folder = tmp_path / "incidents"
    record_corpus(agent, folder, 1)
    (folder / "not-a-file.json").mkdir()
    status = main(["replay", str(folder), "--entry", ENTRY])
    out, _ = capsys.readouterr()
    assert status == 1
    found = outcomes(out)
    assert found["request-00.json"][0] == "passed"
    kind, lines = found["not-a-file.json"]
    assert kind == "error" and "it is a folder, not a regular file" in lines[0]
