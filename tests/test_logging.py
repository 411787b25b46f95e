"""What Chronicle puts in the application's log: one line at configure, nothing per request.

httpx logs each request at INFO; Chronicle's own requests to the control plane must not show up
there, while the application's own httpx requests still do.
"""

from __future__ import annotations

import logging

import httpx
from opentelemetry.sdk.trace import TracerProvider

import chronicle


def test_chronicles_own_requests_stay_out_of_an_info_log(control_plane, caplog):
    caplog.set_level(logging.INFO)
    # httpx's own logger at INFO too: a library imported earlier in this worker (LiteLLM sets it
    # to WARNING) must not hide the application's request the test compares with.
    caplog.set_level(logging.INFO, logger="httpx")
    chronicle.configure(control_plane_url=control_plane.url, flush_interval=0.05)

    @chronicle.boundary("lookup", kind="tool")
    def lookup(key: str) -> str:
        return key

    with chronicle.record("quiet") as session:
        lookup("a")
    assert chronicle.flush(10)
    chronicle.shutdown()
    assert len(control_plane.wait_for_envelopes(session.trace_id, 1)) == 1  # it did talk

    httpx.get(f"{control_plane.url}/health")  # the application's own request

    requests = [r.getMessage() for r in caplog.records if r.name.startswith(("httpx", "httpcore"))]
    assert requests == [f'HTTP Request: GET {control_plane.url}/health "HTTP/1.1 200 OK"']
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]
    (line,) = [r for r in caplog.records if r.name == "chronicle"]
    assert line.levelno == logging.INFO
    assert line.getMessage().startswith(f"recording to the control plane at {control_plane.url};")


def test_the_configure_line_names_the_provider_joined(caplog):
    caplog.set_level(logging.INFO, logger="chronicle")
    chronicle.configure(tracer_provider=TracerProvider())
    (line,) = [r.getMessage() for r in caplog.records if r.name == "chronicle"]
    assert line == (
        "recording to nowhere (control_plane_url is unset); spans go through the "
        "TracerProvider passed as tracer_provider (opentelemetry.sdk.trace.TracerProvider)"
    )
