"""Logfire as a test configures it: offline, its spans handed to the test's processors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import logfire
from opentelemetry.sdk.trace import SpanProcessor


@contextlib.contextmanager
def offline_logfire(*processors: SpanProcessor) -> Iterator[logfire.Logfire]:
    """A local Logfire instance that sends nothing, prints nothing and keeps no metrics, each of
    its spans handed to ``processors`` as well; local, so the process's global provider stays as
    it was. Shut down on leaving."""
    instance = logfire.configure(
        local=True,
        send_to_logfire=False,
        console=False,
        metrics=False,
        inspect_arguments=False,
        additional_span_processors=list(processors),
    )
    try:
        yield instance
    finally:
        instance.shutdown()
