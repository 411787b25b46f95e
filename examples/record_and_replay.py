"""Record an incident, keep it as a file, and prove the fix by replay.

The agent is a support bot with a wrapped OpenAI client and one tool, ``delete_file``. Asked to
"clean up", the model picks the customer database and the ungated tool deletes it. Then:

1. the run is recorded to the control plane (``chronicle.record`` with labels);
2. it is saved to a JSON file (``chronicle save TRACE_ID -o FILE``), the file a regression test
   would commit;
3. the fix (a ``delete_file`` that refuses paths outside /tmp) is proven by a strict replay of
   the span from the control plane with the fixed tool as the cut-point: the model's answers
   come from the recording, with no model request. The model's second call now reads the
   refusal instead of the deletion, a change the plan declares (``expect_change``); its recorded
   answer ("Done: I deleted ...") is stale, so the proof rests on what the fixed tool did and
   what the model is now told, never on that answer. Any other departure from the recording
   fails the replay;
4. the same proof runs from the saved file alone, as the committed test would (no control plane
   needed), and the example prints that test, which passes as printed.

    python examples/record_and_replay.py                    # local model, local control plane
    python examples/record_and_replay.py --live             # the real OpenAI API picks the file
    python examples/record_and_replay.py --save-to tests    # keep tests/incidents/delete-db.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from local_model import (
    LIVE,
    OPENAI_MODEL,
    REPO,
    Model,
    divergences,
    modes,
    refusal_reaches,
    running,
)

import chronicle
from tests.support.llm_server import chat_text, chat_tool_calls, tool_call

FILES = {"/var/data/customers.db": "3 GB of customer records", "/tmp/cache.bin": "stale cache"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "delete_file",
            "description": "Delete a file from the server.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


@chronicle.boundary("delete_file", kind="tool")
def delete_file(path: str) -> dict[str, Any]:
    """The tool as it ran in production: deletes whatever it is asked to."""
    FILES.pop(path, None)
    return {"deleted": path}


@chronicle.boundary("delete_file", kind="tool")
def delete_file_gated(path: str) -> dict[str, Any]:
    """The fix: only files under /tmp may be deleted."""
    if not path.startswith("/tmp/"):
        return {"blocked": True, "reason": f"{path} is outside /tmp"}
    FILES.pop(path, None)
    return {"deleted": path}


TOOL = {"delete_file": delete_file}


def run_agent(client: Any, message: str) -> str:
    """Ask the model, run the tool it calls, hand the result back, until it answers."""
    listing = ", ".join(sorted(FILES))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You maintain a server. Its files: {listing}."},
        {"role": "user", "content": message},
    ]
    for _ in range(5):
        reply = client.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=TOOLS)
        choice = reply.choices[0].message
        if not choice.tool_calls:
            return str(choice.content)
        messages.append(choice.model_dump(exclude_none=True))
        for call in choice.tool_calls:
            result = TOOL["delete_file"](**json.loads(call.function.arguments))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
    return "gave up"


def save(control_plane: str, session: chronicle.Session, folder: Path) -> Path:
    """``chronicle save`` (here ``python -m chronicle save``): the run as a file to commit."""
    out = folder / "incidents" / "delete-db.json"
    env = {**os.environ, "CHRONICLE_CONTROL_PLANE_URL": control_plane}
    command = [sys.executable, "-m", "chronicle", "save", session.trace_id]
    done = subprocess.run(
        [*command, "-o", str(out)], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    print(f"   {done.stdout.strip()}")
    return out


CHAT = "openai.chat.completions.create"
REFUSAL = {"blocked": True, "reason": "/var/data/customers.db is outside /tmp"}


def prove(model: Model, client: Any, replay: Any) -> bool:
    """Run the agent with the fixed tool inside ``replay`` (strict); whether the fix holds."""
    TOOL["delete_file"] = delete_file_gated
    FILES["/var/data/customers.db"] = "restored from backup"
    before = model.requests
    try:
        with replay as run:
            answer = run_agent(client, "Please clean up my old files.")
    except chronicle.ReplayDivergenceError as error:  # the code departed from the recording
        print(f"   the replay diverged from its recording, so nothing is proven:\n{error}")
        return False
    requests = model.requests - before
    result = run.captured_result("delete_file", 1)
    told = run.captured_input(CHAT, 2)["messages"][-1]["content"]
    print(f"   call log: {modes(run)}")
    print(f"   delete_file returned: {result}")
    print(f"   the model's second call now reads: {told}")
    print(f"   divergences: {divergences(run)}")
    print(f"   the agent's last answer is that call's recording, stale: {answer!r}")
    print(f"   customers.db still exists: {'/var/data/customers.db' in FILES}")
    print(f"   model requests during the replay: {requests}")
    if LIVE and not (isinstance(result, dict) and result.get("blocked")):
        print("   (the live model chose a file under /tmp: there was no incident to fix)")
        return requests == 0 and not run.divergences()
    return (
        result == REFUSAL
        and refusal_reaches(run, (CHAT, 2), result, told)
        and "/var/data/customers.db" in FILES
        and requests == 0
    )


def save_to() -> Path | None:
    """The folder ``--save-to DIR`` names (the incident is kept in ``DIR/incidents/``)."""
    if "--save-to" not in sys.argv[:-1]:
        return None
    return Path(sys.argv[sys.argv.index("--save-to") + 1])


SNIPPET = f'''\
import json

import openai
import pytest
from record_and_replay import FILES, TOOL, delete_file_gated, run_agent

import chronicle

CHAT = "{CHAT}"


@pytest.mark.chronicle_replay(
    "incidents/delete-db.json",
    run=["delete_file"],  # the fixed tool runs live: the cut-point
    expect_change=[(CHAT, 2)],  # the model now reads the refusal: its recorded answer is stale
    block_network=True,  # nothing leaves the machine: the model's answers come from the file
)
def test_the_gate_blocks_the_delete(chronicle_run, monkeypatch):
    monkeypatch.setitem(TOOL, "delete_file", delete_file_gated)
    client = chronicle.wrap(openai.OpenAI(api_key="unused: every model call is stubbed"))

    run_agent(client, "Please clean up my old files.")

    assert "/var/data/customers.db" in FILES
    assert chronicle_run.captured_result("delete_file", 1)["blocked"] is True
    told = chronicle_run.captured_input(CHAT, 2)["messages"][-1]["content"]
    assert json.loads(told)["blocked"] is True
'''
"""The committed test this example prints (``tests/e2e/test_examples.py`` runs it as printed)."""


def main() -> int:
    keep = save_to()
    with running("support-agent") as (model, control_plane), tempfile.TemporaryDirectory() as tmp:
        client = chronicle.wrap(model.openai())
        model.script(
            chat_tool_calls(tool_call("delete_file", {"path": "/var/data/customers.db"})),
            chat_text("Done: I deleted /var/data/customers.db."),
        )

        labels = {"session_id": "cleanup-1042", "user_id": "customer-17"}
        with chronicle.record("support-chat", labels=labels) as session:
            answer = run_agent(client, "Please clean up my old files.")
        chronicle.flush(10)
        print("1. recorded a run of the support agent")
        print(f"   the agent answered: {answer!r}")
        print(f"   customers.db still exists: {'/var/data/customers.db' in FILES}")
        print(f"   see it: {control_plane}/#chronicle/{session.trace_id}")

        print("2. saved the span for a regression test")
        saved = save(control_plane, session, keep or Path(tmp))

        # The fixed tool runs live; the model's second call reads its refusal, a change the fix
        # makes on purpose. Strict: any other departure from the recording is an error.
        plan = chronicle.ReplayPlan().run("delete_file").expect_change(CHAT, 2)
        print("3. replayed it from the control plane, the gated delete_file as the cut-point")
        from_server = prove(
            model,
            client,
            chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True),
        )

        print("4. replayed it from the saved file (what a committed test does)")
        from_file = prove(model, client, chronicle.replay(saved, plan, strict=True))

    holds = from_server and from_file
    print(f"\nthe fix holds: {holds}")
    folder = f"{keep}/" if keep else ""
    print(
        "\nAs a committed test (the pytest plugin ships with chronicle): "
        f"{folder}test_delete_db.py, beside {folder}incidents/delete-db.json, "
        "with examples/ importable (PYTHONPATH=examples):\n"
    )
    print(textwrap.indent(SNIPPET, "    "), end="")
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
