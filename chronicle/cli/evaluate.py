"""``chronicle evaluate``'s body: one trace (``TRACE_ID``: its verdicts, ``--write-test`` its
correction) or every trace that matches (``--agent``, ``--label``, ``--since``, ``--kept``: a
line, or with ``--json`` an object, per trace as it is checked, then a summary per check). The
parser is in ``chronicle/cli/__init__.py``; the checks (``chronicle.check``) return values and
this writes them."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from chronicle import runtime
from chronicle.check.correction import check_trace, load_profile, recording_to, write_test
from chronicle.check.judge import judge_client
from chronicle.check.many import Tally, evaluate_traces
from chronicle.cli.common import Usage, write_json, write_json_line
from chronicle.errors import ConfigurationError
from chronicle.read.traces import Match

__all__ = ["evaluate_command"]

_ONE_TRACE = ("write_test", "reference", "trajectory", "trajectory_args")
"""The options that make sense for one trace only."""
_MANY = ("agent", "label", "since", "kept")
"""The options that choose many traces."""


def evaluate_command(args: argparse.Namespace, out: IO[str]) -> int:
    """Run ``chronicle evaluate``: 0 when no check failed, 1 when one did (or a trace could not
    be checked)."""
    many = bool(args.agent or args.label or args.since or args.kept)
    if args.trace_id is not None and many:
        raise Usage(
            "give a TRACE_ID, or choose the traces with --agent/--label/--since/--kept, not both"
        )
    if args.trace_id is None:
        if not many:
            raise Usage("give the TRACE_ID to check, or --agent NAME (--label K:V) for many")
        if not (args.agent or args.label):
            raise Usage("--since and --kept narrow --agent NAME or --label K:V: give one")
        given = [f"--{name.replace('_', '-')}" for name in _ONE_TRACE if getattr(args, name)]
        if given:
            raise Usage(f"{', '.join(given)} check one trace: give its TRACE_ID, without --agent")
        return _many(args, out)
    checked = check_trace(
        args.trace_id,
        url=args.url,
        profile_path=args.profile,
        judge=args.judge,
        judge_runs=args.judge_runs,
        reference=args.reference,
        trajectory=args.trajectory,
        trajectory_args=args.trajectory_args,
        save=args.save,
    )
    evaluation = checked.evaluation
    if args.json:
        write_json(out, evaluation.to_json())
    else:
        out.write(evaluation.render() + "\n")
        if evaluation.saved_as is not None:
            out.write(f"the verdicts are saved as trace {evaluation.saved_as}\n")
        elif checked.judged_in is not None:
            out.write(f"the judge's calls are trace {checked.judged_in}\n")
    if args.save and not runtime.flush(30):
        print("the verdicts could not all be saved; see the log above", file=sys.stderr)
    if args.write_test is not None:
        written = write_test(evaluation, checked.tree, args.write_test, profile_path=args.profile)
        if written is None:
            print("no check that code can repeat failed: no test written", file=sys.stderr)
        else:
            for verdict in written.rules:
                where = ", ".join(verdict.calls) or "the trace as a whole"
                print(f"{verdict.rule}: broken at {where}", file=sys.stderr)
            print(f"wrote {written.incident} and {written.test}", file=sys.stderr)
    return 1 if evaluation.failed else 0


def _many(args: argparse.Namespace, out: IO[str]) -> int:
    """Every trace that matches: one line (``--json``: one object) each, then the summary."""
    profile = load_profile(args.profile) if args.profile is not None else None
    if args.judge is None and args.judge_runs != 1:
        raise ConfigurationError("--judge-runs", "asks a judge: give --judge PROVIDER:MODEL")
    judge = judge_client(args.judge) if args.judge is not None else None
    if args.save or judge is not None:
        recording_to(args.url)  # the saved verdicts and the judge's calls are recorded there
    match = Match(dict(args.label), start=args.since, agent=args.agent, kept=args.kept)
    tally = Tally()
    try:
        for result in evaluate_traces(
            match,
            url=args.url,
            profile=profile,
            judge=judge,
            judge_runs=args.judge_runs,
            save=args.save,
            most=args.most,
        ):
            tally.add(result)
            if args.json:
                write_json_line(out, result.to_json())
            else:
                out.write(result.line() + "\n")
    finally:
        if judge is not None:
            judge.close()
    if args.json:
        write_json_line(out, tally.to_json())
    elif tally.traces:
        out.write(tally.render() + "\n")
    else:
        print("no traces match", file=sys.stderr)
    if (args.save or judge is not None) and not runtime.flush(60):
        print("the verdicts could not all be saved; see the log above", file=sys.stderr)
    return 1 if tally.failed or tally.errors else 0
