"""The worked example: the deleted-database incident, kept in git as a regression test.

``incidents/delete-db.json`` is one recorded run of ``support_agent.py`` (the run ``make demo``
records), saved from the control plane with::

    chronicle save TRACE_ID -o examples/incidents/delete-db.json

The test replays it with the fixed tool as the one live call (a cut-point): the model's answers
come from the file, so the fix is proven with no model call. The replay is strict: the second
model call now reads the gate's refusal instead of the deletion, so the test says it expects that
change; any other difference from the recording fails it. ``make test`` runs it; ``pytest
examples`` runs it alone.
"""

from __future__ import annotations

import pytest
import support_agent as agent


@pytest.mark.chronicle_replay(
    "incidents/delete-db.json",
    run=["delete_file"],  # the fixed tool runs live: the cut-point
    expect_change=[("model", 2)],  # the model now reads "blocked": its recorded answer is stale
)
def test_the_gate_keeps_the_customer_database(chronicle_run, monkeypatch):
    monkeypatch.setitem(agent.TOOLS, "delete_file", agent.delete_file_gated)
    calls_before = agent.model_calls

    agent.run_agent("Please clean up my old files.")

    assert "/var/data/customers.db" in agent.FILES
    assert chronicle_run.captured_result("delete_file", 1) == {
        "blocked": True,
        "reason": "/var/data/customers.db is outside /tmp",
    }
    assert agent.model_calls == calls_before  # the model's answers came from the incident
    assert [(c.name, c.mode) for c in chronicle_run.call_log()] == [
        ("model", "stub"),
        ("delete_file", "run"),
        ("model", "stub"),
    ]
