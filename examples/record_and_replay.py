"""Record an incident, keep it as a file, and prove the fix by replay.

The agent is a support bot with a wrapped OpenAI client and one tool, ``delete_file``. Asked to
"clean up", the model picks the customer database and the ungated tool deletes it. Then:

1. the run is recorded to the control plane (``chronicle.record`` with labels);
2. it is saved to a JSON file (``chronicle save TRACE_ID -o FILE``), the file a regression test
   would commit;
3. the fix (a ``delete_file`` that refuses paths outside /tmp) is proven by replaying the span
   from the control plane with the fixed tool as the cut-point: the model's answers come from
   the recording, with no model request;
4. the same proof runs from the saved file alone, as the committed test would (no control plane
   needed).

    python examples/record_and_replay.py            # local model, local control plane
    python examples/record_and_replay.py --live     # the real OpenAI API picks the file
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from local_model import LIVE, OPENAI_MODEL, REPO, Model, modes, running

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


def prove(model: Model, client: Any, replay: Any) -> bool:
    """Run the agent inside ``replay`` with the fixed tool; report what happened."""
    TOOL["delete_file"] = delete_file_gated
    FILES["/var/data/customers.db"] = "restored from backup"
    before = model.requests
    with replay as run:
        answer = run_agent(client, "Please clean up my old files.")
    requests = model.requests - before
    result = run.captured_result("delete_file", 1)
    print(f"   call log: {modes(run)}")
    print(f"   delete_file returned: {result}")
    print(f"   the agent answered: {answer!r}")
    print(f"   model requests during the replay: {requests}")
    blocked = isinstance(result, dict) and result.get("blocked") is True
    if LIVE and not blocked:
        print("   (the live model chose a file under /tmp: there was no incident to fix)")
        return requests == 0
    return blocked and requests == 0 and "/var/data/customers.db" in FILES


def main() -> int:
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
        saved = save(control_plane, session, Path(tmp))

        print("3. replayed it from the control plane, the gated delete_file as the cut-point")
        plan = chronicle.ReplayPlan().run("delete_file")
        from_server = prove(
            model, client, chronicle.replay_trace(session.trace_id, session.span_id, plan)
        )

        print("4. replayed it from the saved file (what a committed test does)")
        from_file = prove(model, client, chronicle.replay(saved, plan))

    holds = from_server and from_file
    print(f"\nthe fix holds: {holds}")
    print(
        "\nAs a committed test (the pytest plugin ships with chronicle):\n\n"
        '    @pytest.mark.chronicle_replay("incidents/delete-db.json", run=["delete_file"])\n'
        "    def test_the_gate_blocks_the_delete(chronicle_run):\n"
        '        TOOL["delete_file"] = delete_file_gated\n'
        '        run_agent(client, "Please clean up my old files.")\n'
        '        assert chronicle_run.captured_result("delete_file", 1)["blocked"] is True'
    )
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
