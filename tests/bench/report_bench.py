"""Section 11: a corpus replay's reports at the scale of a real corpus (issue 41 items 3, 4, 9):
the HTML report, the Markdown summary and the JUnit XML of 1,000 recordings, written from their
``--json`` results, and the same merged back from two shard files (``chronicle report``).

The scenario runs in a fresh process of this venv (``python tests/bench/report_bench.py
'<json config>'``, one ``BENCH-RESULT {...}`` line). It records ``base`` requests of
``examples/triage_agent.py`` against a local model server, edits a fifth of them so that they
diverge, replays them with ``replay_corpus`` and takes their ``--json`` results; the corpus of
``recordings`` results is those, each standing for ``recordings / base`` recordings under names
of their own (a report's cost grows with its rows, not with where they came from). Then it
times, median of ``reps``: building the report and writing the three files (``--report``,
``--markdown``, ``--junit-xml``); and reading two shard files back into one report
(``Report.read``) and writing the page. The target is under 5 s for 1,000 recordings.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import common  # this folder is not a package: on sys.path as the script's

TITLE = "11. Corpus replay reports (chronicle replay --report/--markdown/--junit-xml)"
TARGET_S = 5.0
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def scenario(cfg: dict[str, Any]) -> dict[str, Any]:
    """Record and replay the base corpus, then time the reports of the whole one."""
    import chronicle
    from chronicle.read.page import report_page, write_page
    from chronicle.save.incident import Incident
    from chronicle.testing import capture
    from chronicle.whatif.corpus import replay_corpus
    from chronicle.whatif.report import Report, junit_xml, markdown
    from examples import triage_agent
    from tests.support.llm_server import LlmServer, chat_text
    from tests.test_corpus import ENTRY, request
    from tests.test_corpus_reports import divert

    base, count, reps = int(cfg["base"]), int(cfg["recordings"]), int(cfg["reps"])
    work = Path(tempfile.mkdtemp(prefix="chronicle-report-bench-"))
    folder = work / "incidents"
    folder.mkdir()
    with LlmServer() as server:
        triage_agent.client.base_url = server.openai_base_url
        for n in range(base):
            server.reply_with(chat_text(f"notes {n}"), chat_text(f"reply {n}"))
            with capture() as sent:
                with chronicle.record(f"triage-{n}"):
                    triage_agent.triage(**request(n))
            path = folder / f"request-{n:03d}.json"
            Incident.of(sent.envelopes).write(path)
            if n % 5 == 2:
                divert(path)
    replayed = [r.to_json() for r in replay_corpus([folder], ENTRY)]
    results = []
    for i in range(count):
        result = dict(replayed[i % base])
        result["source"] = f"incidents/request-{i:05d}.json"
        results.append(result)

    def write_all() -> int:
        report = Report.of(results)
        write_page(report_page(report), work / "report.html")
        write_page(markdown(report), work / "summary.md")
        write_page(junit_xml(report), work / "replay.xml")
        return (work / "report.html").stat().st_size

    half = count // 2
    shards = [work / "shard-1.jsonl", work / "shard-2.jsonl"]
    for path, part in zip(shards, (results[:half], results[half:]), strict=True):
        path.write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")

    def merge() -> str:
        report = Report.read(shards)
        write_page(report_page(report), work / "merged.html")
        return report.headline()

    written_s, merged_s = [], []
    size, headline = 0, ""
    for _ in range(reps):
        began = time.perf_counter()
        size = write_all()
        written_s.append(time.perf_counter() - began)
        began = time.perf_counter()
        headline = merge()
        merged_s.append(time.perf_counter() - began)
    return {
        "recordings": count,
        "base": base,
        "written_s": median(written_s),
        "merged_s": median(merged_s),
        "page_bytes": size,
        "headline": headline,
        "cpus": os.cpu_count(),
    }


def run(cfg: dict[str, Any], log: Any) -> dict[str, Any]:
    """Section 11's process: the reports of ``report_recordings`` results."""
    log(f"section 11: the reports of {cfg['report_recordings']} recordings")
    return common.run_script(
        HERE / "report_bench.py",
        {"base": 40, "recordings": cfg["report_recordings"], "reps": 3},
        ROOT,
    )


def figures(raw: dict[str, Any], table: Any) -> list[dict[str, Any]]:
    """Add section 11's rows to ``table``; return its targets (each under ``TARGET_S``)."""
    if common.section_failed(raw, table, TITLE, "reports", "report"):
        return []
    targets = []
    count = raw["recordings"]
    for key, label in (
        ("written_s", f"report, Markdown and JUnit of {count:,} recordings written"),
        ("merged_s", f"{count:,} recordings merged from 2 shard files, page written"),
    ):
        seconds = raw[key]
        table.add(
            TITLE,
            label,
            "s",
            seconds,
            key=f"report_{key}",
            note=f"target < {TARGET_S:g} s; page {raw['page_bytes'] / 1e6:.1f} MB; "
            f"{raw['headline']}",
        )
        targets.append(
            {
                "target": f"{label}: < {TARGET_S:g} s",
                "value": seconds,
                "limit": TARGET_S,
                "met": seconds < TARGET_S,
            }
        )
    return targets


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    result = scenario(json.loads(sys.argv[1]))
    print("BENCH-RESULT " + json.dumps(result))
