"""The what-if commands: ``chronicle replay`` (a corpus of recordings replayed against the
current code, with forks: ``--override``, ``--fail``, ``--model``, ``--record``; the engine is
``chronicle.whatif.corpus``) and ``chronicle diff`` (what changed between two runs)."""

from __future__ import annotations

import argparse
import builtins
import importlib.util
import json
import re
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import IO, Any

from chronicle import runtime
from chronicle.cli.common import (
    Usage,
    label,
    positive,
    when,
    width,
    write_html,
    write_json,
)
from chronicle.cli.report import report_options, write_reports
from chronicle.errors import ChronicleError, ReplayError
from chronicle.read.connection import Connection
from chronicle.read.page import control_plane_link, diff_page
from chronicle.read.traces import find_traces
from chronicle.read.waterfall import use_color
from chronicle.whatif import corpus
from chronicle.whatif.diff import diff
from chronicle.whatif.report import Report, parse_shard

# ---- chronicle replay (a corpus of recordings; the engine is chronicle.whatif.corpus) ----------


def replay_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    """Add ``chronicle replay`` to the subcommands."""
    replay = commands.add_parser(
        "replay",
        parents=[connection],
        help="replay recorded requests against the current code (a regression suite)",
        description="Call --entry with the recorded input of every incident file under PATH "
        "(a 32-hex argument is a trace id on the control plane), everything stubbed but the "
        "cut-points; strict. Exit 0 only when every replay passed.",
    )
    replay.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="incident files, folders of them, or trace ids (32 hex characters)",
    )
    replay.add_argument(
        "--entry",
        required=True,
        metavar="MODULE:FUNCTION",
        help="the @chronicle.boundary function each recording's input is passed to, or an ASGI "
        "app (module:app) its recorded HTTP request is sent to (ChronicleMiddleware with "
        "record_request=True recorded it)",
    )
    replay.add_argument(
        "--from-control-plane",
        action="store_true",
        help="also replay the control plane's traces that match --label, --agent, --since and "
        "--limit (off, by default)",
    )
    replay.add_argument(
        "--label",
        type=label,
        action="append",
        default=[],
        metavar="K:V",
        help="with --from-control-plane: the traces labelled K=V; repeatable, every one must "
        "match (none, by default)",
    )
    replay.add_argument(
        "--agent",
        metavar="NAME",
        help="with --from-control-plane: an agent profile's name or agent_id (any, by default)",
    )
    replay.add_argument(
        "--since",
        type=when,
        metavar="WHEN",
        help="with --from-control-plane: started at or after 2h, 7d ago, or a time (no bound, "
        "by default)",
    )
    replay.add_argument(
        "--limit",
        type=positive,
        default=100,
        metavar="N",
        help="with --from-control-plane: most traces replayed",
    )
    replay.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="NAME[#n]",
        help="run that call live (every call of NAME, or its n-th as chronicle show numbers "
        "it), the code you changed; a recording that never makes it is not held against it. "
        "Repeatable: --run get_weather --run 'search#2'",
    )
    replay.add_argument(
        "--expect-change",
        action="append",
        default=[],
        metavar="NAME[#n]",
        help="a call the change is expected to alter (its input differs, or it is no longer "
        "made): reported, not failed. Repeatable: --expect-change openai.chat.completions.create",
    )
    replay.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="an input path fresh on every run, not compared, as replay's ignore= "
        "(repeatable): --ignore 'messages[*].id'",
    )
    replay.add_argument(
        "--match",
        choices=("order", "input"),
        default="order",
        help="serve each call the recording of the same order (default), or of the same input "
        "(--match input, for calls made in a changing order)",
    )
    replay.add_argument(
        "--not-strict",
        action="store_true",
        help="report divergences without failing the replay, the exit status staying 0 for "
        "them (off, by default: strict)",
    )
    replay.add_argument(
        "--network",
        choices=("report", "block", "allow"),
        default="report",
        help="a connection made outside the cut-points (an un-instrumented client): a "
        "divergence (report, the default), refused (block), or let be (allow)",
    )
    replay.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a host (address, network, name) the replayed code may reach (repeatable)",
    )
    replay.add_argument(
        "--fail-on-output",
        action="store_true",
        help="fail a replay whose entry returns another result than the recorded one (by "
        "default it is shown, not failed)",
    )
    replay.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per recording, the summary on stderr (off, by default)",
    )
    report_options(replay)
    replay.add_argument(
        "-j",
        "--jobs",
        type=positive,
        default=1,
        metavar="N",
        help="replay the files in N processes at once (each imports --entry; the results "
        "print in the same order; not with --record)",
    )
    replay.add_argument(
        "--shard",
        metavar="K/N",
        help="replay only the K-th of N even parts of the corpus (sorted by file path and "
        "trace id, so a recording is in the same part on every machine); merge the parts' "
        "--json outputs with chronicle report (all, by default)",
    )
    replay.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="NAME#n=JSON",
        help="serve this JSON value for that call instead of its recording, a what-if (repeatable)",
    )
    replay.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="NAME#n=ERROR",
        help="raise this exception there instead (TimeoutError, module.Class; ': message' "
        "after it; repeatable)",
    )
    replay.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME#n=MODEL",
        help="send that model call of a wrapped client to another model (repeatable)",
    )
    replay.add_argument(
        "--record",
        action="store_true",
        help="record each replay as a new trace and print its diff against the original "
        "(off, by default)",
    )


def replay_command(args: argparse.Namespace, out: IO[str]) -> int:
    """Run ``chronicle replay``: 0 when every replay passed, else 1."""
    try:
        options = corpus.Options(
            run=corpus.plan_targets(args.run),
            expect_change=corpus.plan_targets(args.expect_change, "--expect-change"),
            strict=not args.not_strict,
            match=args.match,
            ignore=tuple(args.ignore),
            fail_on_output=args.fail_on_output,
            overrides=tuple(_fork(text, "--override", _json_value) for text in args.override),
            failures=tuple(_fork(text, "--fail", _exception) for text in args.fail),
            models=tuple(_fork(text, "--model", _model) for text in args.model),
            record=args.record,
            network=args.network,
            allowed_hosts=tuple(args.allowed_host),
            spelling="cli",
        )
    except ValueError as exc:
        raise Usage(str(exc)) from None
    try:
        shard = None if args.shard is None else parse_shard(args.shard)
    except ValueError as exc:
        raise Usage(str(exc)) from None
    if args.jobs > 1 and args.record:
        raise Usage("--record records each replay from this process; drop -j, or --record")
    hexes = [p for p in args.paths if len(p) == 32 and all(c in "0123456789abcdef" for c in p)]
    paths = [p for p in args.paths if p not in hexes]
    if not args.paths and not args.from_control_plane:
        raise Usage("name incident files or folders, trace ids, or --from-control-plane")
    try:
        entry = corpus.load_entry(args.entry)
    except corpus.CorpusError as exc:  # an entry that cannot be used is a usage error: exit 2
        raise Usage(str(exc)) from None
    if args.record:
        _record_to(args.url)
    client = None
    if hexes or args.from_control_plane:
        client = Connection.resolve(args.url, None).client()
    if args.from_control_plane:
        found = find_traces(
            labels=dict(args.label),
            agent=args.agent,
            since=args.since,
            limit=args.limit,
            url=args.url,
        )
        hexes += [t.trace_id for t in found]
    began = time.perf_counter()

    def each(result: Any) -> None:
        if args.json:
            out.write(result.json_line() + "\n")  # the line pytest --chronicle-json writes
        else:
            out.write(result.describe() + "\n")
            if result.new_trace_id is not None:
                out.write(_what_changed(result, out) + "\n")
        out.flush()

    try:
        results = corpus.replay_corpus(
            paths,
            entry,
            trace_ids=hexes,
            client=client,
            options=options,
            each=each,
            shard=shard,
            jobs=args.jobs,
        )
    finally:
        if client is not None:
            client.close()
    took = time.perf_counter() - began
    summary_to = sys.stderr if args.json else out
    print(corpus.summary(results, took), file=summary_to)
    unmatched = corpus.unmatched_entries(results)
    if shard is not None:  # another shard may reach the entry: chronicle report decides
        for line in unmatched:
            print(f"shard {args.shard}: {line}, {_OTHER_SHARDS}", file=summary_to)
        unmatched = []
    for line in unmatched:
        print(line, file=summary_to)
    report = Report.of([r.to_json() for r in results], took, unmatched)
    write_reports(report, args, summary_to)
    failed = bool(unmatched) and options.strict  # a plan mistake, a divergence of every replay
    return 0 if results and all(r.passed for r in results) and not failed else 1


_OTHER_SHARDS = (
    "unless another shard's recordings reach it: chronicle report over every shard's --json "
    "output tells (each result carries the plan entries its recording never reached)"
)
"""The end of a shard's line for a plan entry none of its recordings reached: no failure there."""


def _fork(text: str, option: str, value_of: Callable[[str, str], Any]) -> tuple[str, int, Any]:
    """``NAME#n=VALUE`` as ``(name, n, value_of(VALUE, option))``; ``ValueError`` saying the
    form when it is not one."""
    target, sep, value = text.partition("=")
    name, hash_, number = target.rpartition("#")
    if not sep or not hash_ or not name or not number.isdigit() or int(number) < 1:
        raise ValueError(
            f"{option} takes NAME#n={_FORMS[option]} (n from 1, as chronicle show numbers "
            f"calls), got {text!r}"
        )
    return name, int(number), value_of(value, option)


_FORMS = {"--override": "JSON", "--fail": "ExceptionType[: message]", "--model": "MODEL"}


def _json_value(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{option}: the value {text!r} is not JSON ({exc.msg}); quote it for the shell, "
            """as in --override 'search#1={"hits": []}'"""
        ) from None


def _exception(text: str, option: str) -> BaseException:
    kind, _, message = text.partition(":")
    kind, message = kind.strip(), message.strip()
    module_name, dot, class_name = kind.rpartition(".")
    found: Any = None
    try:
        if dot:
            found = getattr(importlib.import_module(module_name), class_name, None)
        else:
            found = getattr(builtins, kind, None)
    except Exception:
        found = None
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise ValueError(
            f"{option}: {kind!r} is not an exception class; name a built-in one (TimeoutError, "
            "ConnectionError) or module.Class"
        )
    try:
        return found(message or f"injected by chronicle replay {option}")
    except Exception as exc:
        raise ValueError(f"{option}: {kind} cannot be built from a message ({exc})") from None


def _model(text: str, option: str) -> str:
    if not text:
        raise ValueError(f"{option} takes NAME#n=MODEL, with a model name after '='")
    return text


def _record_to(url: str | None) -> None:
    """Record to the control plane the command reads (``--url``, else the configuration)."""
    target = Connection.resolve(url, None).url
    if runtime.current().settings.control_plane_url != target:
        runtime.configure(control_plane_url=target)


def _what_changed(result: Any, out: IO[str]) -> str:
    """The lines under a recorded replay: the new trace and its diff against the original."""
    runtime.flush(10)
    original, new = result.trace_id, result.new_trace_id
    lines = [f"    recorded as trace {new} (chronicle show {new})"]
    if original is None:
        return "\n".join(lines)
    try:
        found = diff(original, new)
    except ChronicleError as exc:
        lines.append(f"    no diff against {original}: {exc}")
        return "\n".join(lines)
    lines.append(f"    diff {original} -> {new}:")
    text = found.render(width=width(out), color=use_color(out))
    lines += ["    " + line for line in text.splitlines()]
    return "\n".join(lines)


# ---- diff: what changed between two runs ------------------------------------------------------


def diff_parser(commands: Any, connection: argparse.ArgumentParser) -> None:
    """Add ``chronicle diff`` to the subcommands."""
    diff_cmd = commands.add_parser(
        "diff",
        parents=[connection],
        help="what changed between two recordings of an agent (exit 1 when they differ)",
        description="Compare two recorded request spans call by call (the call trees aligned "
        "per parent): calls only in A or B, changed inputs, outputs and statuses, latency and "
        "token deltas. A and B are each a trace id (32 hex characters) or an incident file. "
        "Exit 0 when they are the same, 1 when they differ, 2 on a usage error or an input that "
        "cannot be read.",
    )
    diff_cmd.add_argument("a", metavar="A", help="a trace id or an incident file")
    diff_cmd.add_argument("b", metavar="B", help="a trace id or an incident file")
    diff_cmd.add_argument(
        "--span", metavar="S", help="A's span, needed only when its trace has several"
    )
    diff_cmd.add_argument(
        "--span-b", metavar="S", help="B's span, needed only when its trace has several"
    )
    diff_cmd.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="a volatile path not compared, as replay's ignore= (repeatable)",
    )
    diff_cmd.add_argument(
        "--json",
        action="store_true",
        help="the diff as JSON, a stable document (docs/design.md; off, by default)",
    )
    diff_cmd.add_argument(
        "--html",
        metavar="PATH",
        help="also write the diff as one web page to PATH: both call trees side by side, each "
        "changed value's JSON diff, the first divergence marked; self-contained, opens offline "
        "(none, by default)",
    )


def diff_command(args: argparse.Namespace, out: IO[str]) -> int:
    """Run ``chronicle diff``: 0 when the two are the same, 1 when they differ."""
    needs_reader = any(
        _TRACE_ID.match(side) and not Path(side).exists() for side in (args.a, args.b)
    )
    link = None
    try:
        if needs_reader:
            connection = Connection.resolve(args.url, None)
            link = control_plane_link(connection.url)
            with closing(connection.client()) as client:
                found = diff(
                    args.a,
                    args.b,
                    span_a=args.span,
                    span_b=args.span_b,
                    ignore=args.ignore,
                    client=client,
                )
        else:
            found = diff(args.a, args.b, span_a=args.span, span_b=args.span_b, ignore=args.ignore)
    except (ReplayError, ValueError) as exc:  # a side that cannot be read, a bad --ignore
        raise Usage(str(exc).removeprefix("diff: ")) from None
    if args.html:
        written = write_html(diff_page(found, link=link), args.html)
        print(f"wrote {written}", file=sys.stderr if args.json else out)
    if args.json:
        write_json(out, found.to_json())
    else:
        out.write(found.render(width=width(out), color=use_color(out)) + "\n")
    return 0 if found.same else 1


_TRACE_ID = re.compile(r"[0-9a-f]{32}\Z")
