"""Section 10: many traces at once (issue 43 item 5): ``chronicle evaluate --agent NAME`` with the
checks that need no model, in traces a minute.

The scenario runs in a fresh process of this venv (``python tests/bench/evaluate_bench.py
'<json config>'``, one ``BENCH-RESULT {...}`` line): it records ``traces`` requests of a refund
agent on the control plane ``run.py`` started (three tool calls each, a third of them refunding
before the policy lookup, under a profile of its own so nothing else on the control plane is
read), then times ``chronicle.check.many.evaluate_traces`` over all of them: once printing only
(``chronicle evaluate --agent``), once saving every evaluation too (``--save``, flushed before
the clock stops). The target is 1,000 traces a minute on the bench machine (2 CPUs); the result
says how many failed the rule, which must be the third that broke it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import common  # this folder is not a package: on sys.path as the script's

TITLE = "10. Many traces at once: chronicle evaluate --agent, model-free checks"
TARGET_PER_MINUTE = 1_000.0
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def scenario(cfg: dict[str, Any]) -> dict[str, Any]:
    """Record the traces, then time their evaluation (printing only, then saving)."""
    import chronicle  # this process's own import, as the command's
    from chronicle.check.many import Tally, evaluate_traces
    from chronicle.read.traces import Match

    url, count = str(cfg["control_plane_url"]), int(cfg["traces"])

    @chronicle.boundary("lookup_order", kind="tool")
    def lookup_order(order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "amount": 3000}

    @chronicle.boundary("lookup_policy", kind="tool")
    def lookup_policy(order_id: str) -> dict[str, Any]:
        return {"refund_limit": 2500}

    @chronicle.boundary("issue_refund", kind="tool")
    def issue_refund(order_id: str, amount: int) -> dict[str, Any]:
        return {"status": "refunded"}

    name = f"bench-refund-{uuid.uuid4().hex[:8]}"
    profile = chronicle.AgentProfile(
        name,
        "Refund by policy.",
        constraints=[chronicle.Constraint.before("lookup_policy", "issue_refund")],
        tools=None,
    )
    chronicle.configure(control_plane_url=url, agent=profile, service_name="bench-refund")

    @chronicle.boundary("handle_ticket")
    def handle_ticket(n: int) -> str:  # the entry: the agent itself, its tools called in it
        order = f"o-{n}"
        lookup_order(order)
        if n % 3 == 0:
            issue_refund(order, 2000)
            lookup_policy(order)
        else:
            lookup_policy(order)
            issue_refund(order, 2000)
        return "done"

    for n in range(count):
        with chronicle.record("ticket"):
            handle_ticket(n)
    early = len(range(0, count, 3))
    assert chronicle.flush(300), "the traces were not all saved"
    chronicle.reset()
    chronicle.configure(control_plane_url=url, service_name="chronicle-evaluate")

    def timed(save: bool) -> tuple[float, Tally]:
        tally = Tally()
        started = time.perf_counter()
        for result in evaluate_traces(Match({}, agent=name), url=url, save=save):
            tally.add(result)
        if save:
            assert chronicle.flush(300), "the evaluations were not all saved"
        return time.perf_counter() - started, tally

    printed_s, printed = timed(False)
    saved_s, saved = timed(True)
    chronicle.reset()
    return {
        "traces": count,
        "broke": early,
        "printed_s": printed_s,
        "printed_checked": printed.traces,
        "printed_failed": printed.failed,
        "saved_s": saved_s,
        "saved_checked": saved.traces,
        "saved_failed": saved.failed,
        "saved_saved": saved.saved,
        "cpus": os.cpu_count(),
    }


def run(cfg: dict[str, Any], url: str, log: Any) -> dict[str, Any]:
    """Section 10's process: ``evaluate_traces`` traces recorded and evaluated."""
    log(f"section 10: chronicle evaluate --agent over {cfg['evaluate_traces']} traces")
    return common.run_script(
        HERE / "evaluate_bench.py",
        {"control_plane_url": url, "traces": cfg["evaluate_traces"]},
        ROOT,
    )


def figures(raw: dict[str, Any], table: Any) -> list[dict[str, Any]]:
    """Add section 10's rows to ``table``; return its target (traces a minute, both ways)."""
    if common.section_failed(raw, table, TITLE, "evaluate", "evaluate"):
        return []
    targets = []
    for how, label in (("printed", "printed"), ("saved", "printed and saved (--save)")):
        rate = raw["traces"] / raw[f"{how}_s"] * 60 if raw[f"{how}_s"] else None
        right = raw[f"{how}_checked"] == raw["traces"] and raw[f"{how}_failed"] == raw["broke"]
        table.add(
            TITLE,
            f"traces a minute, {label} ({raw['traces']} traces, {raw['cpus']} CPUs)",
            "traces/min",
            rate,
            key=f"evaluate_{how}",
            note=f"target >= {TARGET_PER_MINUTE:,.0f}; "
            f"{raw[f'{how}_failed']} of {raw['traces']} failed the rule"
            + ("" if right else f" (expected {raw['broke']}: WRONG)"),
        )
        targets.append(
            {
                "target": f"chronicle evaluate --agent, {label}: >= {TARGET_PER_MINUTE:,.0f} "
                "traces a minute with model-free checks",
                "value": rate,
                "limit": TARGET_PER_MINUTE,
                "met": None if rate is None else rate >= TARGET_PER_MINUTE and right,
            }
        )
    return targets


if __name__ == "__main__":
    result = scenario(json.loads(sys.argv[1]))
    print("BENCH-RESULT " + json.dumps(result))
