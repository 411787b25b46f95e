"""``python -m chronicle save TRACE_ID SPAN_ID -o FILE``: keep a recorded span as a test fixture.

Reads the span's envelopes from the control plane named by ``CHRONICLE_CONTROL_PLANE_URL`` (and
``CHRONICLE_API_KEY``) and writes the body of ``GET /v1/traces/{t}/spans/{s}/envelopes`` to
``FILE``, ready for ``chronicle.replay(FILE)`` or the pytest marker.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chronicle.config import load_settings
from chronicle.errors import ChronicleError
from chronicle.save.client import HttpControlPlane


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m chronicle")
    commands = parser.add_subparsers(dest="command", required=True)
    save = commands.add_parser("save", help="save a recorded span's envelopes to a JSON file")
    save.add_argument("trace_id")
    save.add_argument("span_id")
    save.add_argument("-o", "--out", required=True, type=Path, help="the file to write")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        if not settings.control_plane_url:
            print(
                "set CHRONICLE_CONTROL_PLANE_URL to the control plane to read from",
                file=sys.stderr,
            )
            return 2
        client = HttpControlPlane(settings.control_plane_url, settings.api_key, settings.timeout)
        try:
            envelopes = client.span_envelopes(args.trace_id, args.span_id)
        finally:
            client.close()
    except ChronicleError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if not envelopes:
        print(
            f"span {args.span_id} of trace {args.trace_id} has no envelopes on "
            f"{settings.control_plane_url}; check the ids",
            file=sys.stderr,
        )
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"envelopes": envelopes}, indent=2) + "\n", encoding="utf-8")
    print(f"saved {len(envelopes)} envelope(s) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
