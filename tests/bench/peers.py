"""Section 6 of ``make bench``: Chronicle's boundary beside the other agent tracers.

``run.py`` builds one throwaway virtual environment per peer (as it does for the prior
implementation), runs ``peer.py`` in it and ``ours.py``'s ``peers`` scenario in the project's
venv, alternating the processes round by round, and reads every figure as a ratio to a plain
OpenTelemetry span measured block by block in the same process. Chronicle's ratio divided by a
peer's is the comparison ("x peer"): below 1.0, Chronicle's boundary costs less than that
peer's decorator relative to the same plain span.

The peers and their versions are pinned (``PEERS``), so two runs compare the same code. Each
peer's venv also gets this venv's OpenTelemetry API and SDK versions when the peer accepts them.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import med, ok, ratio

OURS = "chronicle"


@dataclass(frozen=True)
class PeerSpec:
    """How to install one peer and how to name its variants in the table."""

    requirement: str
    labels: dict[str, str]
    """variant measured by ``peer.py`` -> row label; the payload is the key's text before ``:``"""
    no_deps_then: tuple[str, ...] = ()
    """Installed with ``--no-deps`` first, then these requirements (see ``traceloop``)."""
    constraints: tuple[str, ...] = field(default=())
    """Pins for a peer whose dependencies this index cannot resolve on its own."""
    pin_otel: bool = True
    """Install this venv's opentelemetry-api/sdk versions beside it."""


# OpenLLMetry's traceloop-sdk depends on ~30 instrumentation packages of other libraries (vector
# databases, model SDKs) that it loads only when the instrumented library is installed, which it
# never is here; two of them need a release of opentelemetry-semantic-conventions-ai the index
# does not have, and its OTel contrib packages resolve together only at these versions. So it is
# installed without dependencies, then with every dependency except those unversioned
# instrumentations (its ``Traceloop.init`` and ``@task`` import none of them), plus httpx, which
# it imports without declaring it.
_TRACELOOP_CONSTRAINTS = (
    "opentelemetry-api==1.45.1",
    "opentelemetry-sdk==1.45.1",
    "opentelemetry-exporter-otlp-proto-http==1.45.1",
    "opentelemetry-exporter-otlp-proto-grpc==1.45.1",
    "opentelemetry-exporter-otlp-proto-common==1.45.1",
    "opentelemetry-proto==1.45.1",
    "opentelemetry-instrumentation==0.66b1",
    "opentelemetry-semantic-conventions==0.66b1",
    "opentelemetry-util-http==0.66b1",
    "opentelemetry-instrumentation-logging==0.66b1",
    "opentelemetry-instrumentation-redis==0.66b1",
    "opentelemetry-instrumentation-requests==0.66b1",
    "opentelemetry-instrumentation-sqlalchemy==0.66b1",
    "opentelemetry-instrumentation-threading==0.66b1",
    "opentelemetry-instrumentation-urllib3==0.66b1",
)

PEERS: dict[str, PeerSpec] = {
    "langfuse": PeerSpec(
        "langfuse==5.2.0",
        {
            "tool": "Langfuse `@observe`",
            "llm": 'Langfuse `@observe(as_type="generation")`',
        },
    ),
    "logfire": PeerSpec(
        "logfire==5.4.0",
        {
            "tool": "Logfire `@instrument(record_return=True)`",
            "llm": "Logfire `@instrument(record_return=True)`",
        },
    ),
    "traceloop": PeerSpec(
        "traceloop-sdk==0.62.4",
        {"tool": "OpenLLMetry `@task`", "llm": "OpenLLMetry `@task`"},
        no_deps_then=("httpx",),
        constraints=_TRACELOOP_CONSTRAINTS,
        pin_otel=False,
    ),
    "openinference": PeerSpec(
        "openinference-instrumentation==0.1.72",
        {
            "tool": "OpenInference `tracer.tool`",
            "chain": "OpenInference `tracer.chain`",
            "llm": "OpenInference `tracer.llm`",
        },
    ),
}
PAYLOAD_OF = {"tool": "tool", "chain": "tool", "llm": "llm"}
CHRONICLE_LABELS = {
    "tool": "Chronicle `@boundary` (discarding sink)",
    "llm": 'Chronicle `@boundary(kind="llm")` (discarding sink)',
}

Log = Callable[[str], None]


def _python_of(root: Path) -> Path:
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _pip(python: Path, args: list[str], env: dict[str, str], log: Log) -> bool:
    command = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    try:
        done = subprocess.run(
            [*command, *args], env=env, capture_output=True, text=True, timeout=900
        )
    except subprocess.TimeoutExpired:
        log(f"  pip install {' '.join(args)} timed out")
        return False
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "ERROR" in line or "error" in line]
        log(f"  pip install {' '.join(args)} failed: {' | '.join(errors[-3:])[:400]}")
    return done.returncode == 0


def _otel_pins() -> list[str]:
    pins = []
    for name in ("opentelemetry-api", "opentelemetry-sdk"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            pins.append(f"{name}=={importlib.metadata.version(name)}")
    return pins


def _dependencies_without_plugins(
    python: Path, distribution: str, env: dict[str, str]
) -> list[str]:
    """``distribution``'s requirements, less extras and unversioned instrumentation packages."""
    script = (
        "import importlib.metadata as m, re\n"
        f"for r in m.requires({distribution!r}) or []:\n"
        "    if 'extra ==' in r: continue\n"
        "    name = r.split(';')[0].strip()\n"
        "    base = re.split('[<>=!~ ]', name)[0]\n"
        "    if base.startswith('opentelemetry-instrumentation-') and base == name: continue\n"
        "    print(name)\n"
    )
    done = subprocess.run(
        [str(python), "-c", script], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def build_peer_venv(name: str, root: Path, env: dict[str, str], log: Log) -> Path | str:
    """A venv holding peer ``name`` (reused when ``root`` already has one); its Python or why not.

    A venv is reused only when it holds the pinned version of the peer.
    """
    spec = PEERS[name]
    python = _python_of(root)
    wanted = spec.requirement.split("==")
    check = f"import importlib.metadata as m; assert m.version({wanted[0]!r}) == {wanted[1]!r}"
    if python.exists() and subprocess.run([str(python), "-c", check], env=env).returncode == 0:
        log(f"reusing the {name} venv in {root}")
        return python
    log(f"building the {name} venv in {root} ({spec.requirement})")
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--clear", str(root)], check=True, env=env)
    constraints: list[str] = []
    if spec.constraints:
        pinned = root / "constraints.txt"
        pinned.write_text("\n".join(spec.constraints) + "\n")
        constraints = ["-c", str(pinned)]
    if spec.no_deps_then:
        if not _pip(python, ["--no-deps", spec.requirement], env, log):
            return f"pip could not install {spec.requirement}"
        needs = _dependencies_without_plugins(python, wanted[0], env)
        if not _pip(python, [*needs, *spec.no_deps_then, *constraints], env, log):
            return f"pip could not install the dependencies of {spec.requirement}"
        return python
    pins = _otel_pins() if spec.pin_otel else []
    if _pip(python, [spec.requirement, *pins, *constraints], env, log):
        return python
    if pins:
        log(f"  installing {name} with its own OpenTelemetry versions")
        if _pip(python, [spec.requirement, *constraints], env, log):
            return python
    return f"pip could not install {spec.requirement}"


# ---- figures ----------------------------------------------------------------------------------


def _paired(runs: list[dict[str, Any]], variant: str, reference: str) -> float | None:
    """Median over blocks of ``variant / reference`` from the same process and block index."""
    ratios: list[float | None] = []
    for run in ok(runs):
        samples = run["samples_us"]
        for a, b in zip(samples.get(variant, []), samples.get(reference, []), strict=False):
            ratios.append(ratio(a, b))
    return med(ratios)


def _value(runs: list[dict[str, Any]], variant: str) -> float | None:
    return med([v for run in ok(runs) for v in run["samples_us"].get(variant, [])])


def figures(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per implementation and payload: µs/call, x plain span, x span+JSON, x peer."""
    runs: dict[str, list[dict[str, Any]]] = raw.get("runs", {})
    ours = runs.get(OURS, [])
    rows: list[dict[str, Any]] = []
    for payload in ("tool", "llm"):
        json_ref = f"otel_json/{payload}"
        rows.append(
            {
                "payload": payload,
                "implementation": "plain OTel span (SDK, discarding exporter)",
                "peer": None,
                "us": _value(ours, "otel_span/tool"),
                "x_span": 1.0,
                "x_json": None,
            }
        )
        rows.append(
            {
                "payload": payload,
                "implementation": f"plain span + 2 `json.dumps` attributes ({payload} payload)",
                "peer": None,
                "us": _value(ours, json_ref),
                "x_span": _paired(ours, json_ref, "otel_span/tool"),
                "x_json": 1.0,
            }
        )
        mine: dict[str, Any] = {
            "payload": payload,
            "implementation": CHRONICLE_LABELS[payload],
            "peer": OURS,
            "us": _value(ours, payload),
            "x_span": _paired(ours, payload, "otel_span/tool"),
            "x_json": _paired(ours, payload, json_ref),
        }
        rows.append(mine)
        for name, spec in PEERS.items():
            peer_runs = runs.get(name)
            for variant, label in spec.labels.items():
                if PAYLOAD_OF[variant] != payload:
                    continue
                row: dict[str, Any] = {
                    "payload": payload,
                    "implementation": label,
                    "peer": name,
                    "variant": variant,
                    "version": next(
                        (r.get("implementation") for r in ok(peer_runs or [])), spec.requirement
                    ),
                }
                if not ok(peer_runs or []):
                    reason = raw.get("unavailable", {}).get(name) or next(
                        (r.get("error") for r in peer_runs or []), "not run"
                    )
                    row.update(us=None, x_span=None, x_json=None, note=str(reason)[:200])
                else:
                    row.update(
                        us=_value(peer_runs or [], variant),
                        x_span=_paired(peer_runs or [], variant, "otel_span/tool"),
                        x_json=_paired(peer_runs or [], variant, json_ref),
                    )
                row["chronicle_over_peer"] = ratio(mine["x_span"], row["x_span"])
                rows.append(row)
    return rows


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per payload: Chronicle's ratio to a plain span below every peer's (the closest shown)."""
    found = []
    for payload in ("tool", "llm"):
        compared = [
            r for r in rows if r["payload"] == payload and r.get("chronicle_over_peer") is not None
        ]
        worst = max(compared, key=lambda r: r["chronicle_over_peer"], default=None)
        value = worst["chronicle_over_peer"] if worst else None
        found.append(
            {
                "target": f"`{payload}` payload: below every peer (x plain span, Chronicle ÷ the "
                f"closest peer{': ' + worst['implementation'] if worst else ''})",
                "value": value,
                "limit": 1.0,
                "met": None if value is None else value < 1.0,
                "ratio": True,
            }
        )
    return found


# ---- printing ---------------------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _cells(row: dict[str, Any]) -> list[str]:
    return [
        row["implementation"],
        _num(row["us"]),
        _times(row["x_span"]),
        _times(row["x_json"]),
        _times(row.get("chronicle_over_peer")),
        row.get("version") or "",
    ]


HEAD = ["figure", "µs/call", "x plain span", "x span+JSON", "Chronicle ÷ it", "version"]


def text_table(rows: list[dict[str, Any]]) -> str:
    """The section as plain text, one block per payload."""
    lines = ["## 6. Beside the peers (discarding exporters; ratios within each process)"]
    for payload in ("tool", "llm"):
        cells = [_cells(r) for r in rows if r["payload"] == payload]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEAD)]
        lines.append(f"{payload} payload:")
        lines.append("  ".join(h.ljust(widths[i]) for i, h in enumerate(HEAD)))
        for c in cells:
            lines.append(
                "  ".join(
                    c[i].ljust(widths[i]) if i in (0, 5) else c[i].rjust(widths[i])
                    for i in range(len(HEAD))
                )
            )
        for r in rows:
            if r["payload"] == payload and r.get("note"):
                lines.append(f"  - {r['implementation']}: {r['note']}")
    return "\n".join(lines)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The section as Markdown, one table per payload."""
    out = ["", "### 6. Beside the peers (discarding exporters)"]
    for payload in ("tool", "llm"):
        out += [
            "",
            f"**{payload} payload**",
            "",
            "| " + " | ".join(HEAD) + " |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            if r["payload"] == payload:
                cells = _cells(r)
                if r.get("note"):
                    cells[-1] = f"{cells[-1]} ({r['note']})".strip()
                out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)
