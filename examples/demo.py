"""``make demo``: record an incident on a local control plane, then prove the fix by replay.

1. Start the real control plane (SQLite in a temporary folder, a free port).
2. Record one run of the support agent: the model asks to delete the customer database and the
   ungated tool does it.
3. Replay that run with the fixed tool as the only live call (a cut-point): the model's answers
   come from the recording, so the fix is checked with zero model calls and nothing is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import support_agent as agent

import chronicle
from chronicle.testing import LocalControlPlane


def main() -> int:
    with LocalControlPlane() as control_plane:
        print(f"control plane running at {control_plane.url}")
        chronicle.configure(control_plane_url=control_plane.url, service_name="support-agent")

        # ---- record ------------------------------------------------------------------------
        labels = {"session_id": "sess-demo", "message_id": "msg-1", "user_id": "ada"}
        with chronicle.record("support-chat", labels=labels) as session:
            answer = agent.run_agent("Please clean up my old files.")
        chronicle.flush(10)
        print("\n1. recorded a run of the support agent")
        print(f"   agent answered: {answer!r}")
        print(f"   customers.db still exists: {'/var/data/customers.db' in agent.FILES}")
        print(f"   trace id: {session.trace_id}")
        print(f"   span id:  {session.span_id}")
        print(f"   see it:   {control_plane.url}/#chronicle/{session.trace_id}")
        print(f"   API:      {control_plane.url}/v1/traces/{session.trace_id}")
        saved = control_plane.span_envelopes(session.trace_id, session.span_id)
        for envelope in saved:
            meta = envelope["metadata"]
            print(
                f"   - {envelope['name']}#{meta['chronicle.invocation_index']} "
                f"({envelope['kind']}, {envelope['envelope_status']['status']})"
            )

        # ---- replay with the fix -------------------------------------------------------------
        agent.TOOLS["delete_file"] = agent.delete_file_gated
        agent.FILES["/var/data/customers.db"] = "restored from backup"
        before = control_plane.snapshot()
        calls_before = agent.model_calls
        plan = chronicle.ReplayPlan().run("delete_file", 1)
        with chronicle.replay_trace(session.trace_id, session.span_id, plan) as run:
            fixed_answer = agent.run_agent("Please clean up my old files.")
        model_calls = agent.model_calls - calls_before
        result = run.captured_result("delete_file", 1)
        log = [f"{c.name}#{c.invocation_index}:{c.mode}" for c in run.call_log()]
        unchanged = control_plane.snapshot() == before

        print("\n2. replayed it with the gated delete_file as the cut-point")
        print(f"   call log: {', '.join(log)}")
        print(f"   delete_file returned: {result}")
        print(f"   agent answered: {fixed_answer!r}")
        print(f"   model calls during replay: {model_calls}")
        print(f"   control plane unchanged by the replay: {unchanged}")
        holds = bool(result.get("blocked")) and model_calls == 0 and unchanged  # type: ignore[union-attr]
        print(f"\nthe fix holds: {holds}")
        chronicle.shutdown()
        return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
