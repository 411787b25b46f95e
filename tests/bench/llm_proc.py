"""Run ``tests.support.llm_server.LlmServer`` in a process of its own for the benchmark.

In its own process the server's threads do not compete for the measuring process's GIL, and both
implementations' scenario processes can reach it. Prints ``LLM-URL <openai base url>`` once it
listens, serves until its stdin is closed, then stops.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support import llm_server


def main() -> None:
    # Its handler writes the headers and the body in two sends; with Nagle's algorithm on, the
    # body then waits for the client's delayed ACK (about 40 ms a call on Linux), which would
    # swamp what is measured. TCP_NODELAY (socketserver's own switch) removes that stall.
    llm_server._Handler.disable_nagle_algorithm = True
    with llm_server.LlmServer() as server:
        sys.stdout.write(f"LLM-URL {server.openai_base_url}\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the parent closes the pipe


if __name__ == "__main__":
    main()
