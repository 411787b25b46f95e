"""The configured process-wide state, and the one place that wires the pieces together.

``configure()`` builds a ``Runtime``: the settings, the redaction, the control-plane client, the
delivery queue, and the tracer of the provider whose ``ChronicleSpanProcessor`` is connected to
that delivery; then makes it current. The first boundary or span used before any
``configure()`` builds one from the environment alone. ``reset()`` drops it (for tests).
Everything on the hot path reads ``current()``, a global lookup.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from opentelemetry import trace as trace_api

from chronicle._version import __version__
from chronicle.config import Settings, load_settings
from chronicle.errors import ConfigurationError
from chronicle.otel.genai import content_capture_enabled
from chronicle.otel.provider import ChronicleTracer, require_sdk_provider
from chronicle.otel.threads import carry_context_into_threads
from chronicle.redaction import Redaction, default_redactors, safe_url
from chronicle.save import untrusted
from chronicle.save.client import ControlPlaneClient, HttpControlPlane
from chronicle.save.delivery import Delivery, deliver_at_worker_exit
from chronicle.save.keep import KeepBuffer

logger = logging.getLogger("chronicle")

_lock = threading.RLock()
_current: Runtime | None = None
_atexit_registered = False
_sigterm_installed = False
_previous_sigterm: Any = None


@dataclass
class Runtime:
    """What ``configure()`` built. Read-only once current; replaced as a whole."""

    settings: Settings
    link: ChronicleTracer | None
    """Chronicle's tracer and the provider behind it; ``None`` when ``enabled`` is off."""
    redaction: Redaction
    client: ControlPlaneClient | None
    delivery: Delivery
    genai_content: bool = False
    """Whether GenAI message content is opted in (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_...``)."""
    keep: KeepBuffer | None = None
    """Where requests the sampler dropped are held (``keep_unsampled``), when there is a control
    plane to keep them on."""
    tracer: trace_api.Tracer = field(init=False)
    nowhere_untold: bool = field(default=False, init=False)
    """Built on first use with nowhere to record, and nobody told yet (``note_unrecorded``)."""

    def __post_init__(self) -> None:
        self.tracer = self.link if self.link is not None else trace_api.NoOpTracer()

    def note_unrecorded(self) -> None:
        """A call or request was about to be recorded with nowhere to go: say so, once.

        ``configure()`` says it at once; a runtime built on first use waits for this, so that a
        process that only replays (a test run with no configuration) logs nothing about it.
        """
        if self.nowhere_untold:
            self.nowhere_untold = False
            logger.warning(_NOWHERE)

    @property
    def recording(self) -> bool:
        """Whether calls are recorded: enabled, with a control plane or an exporter to reach."""
        link = self.link
        return link is not None and (self.client is not None or link.refresh().display)

    @property
    def display(self) -> bool:
        """Whether spans reach an exporter besides Chronicle's (display attributes are for it)."""
        link = self.link
        return link is not None and link.display

    def shutdown(self, timeout: float | None) -> bool:
        """Deliver what is queued (within ``timeout`` seconds), then stop delivery."""
        if self.keep is not None:
            self.keep.close()  # what is still held never turned out to matter
        delivered = self.delivery.shutdown(timeout)
        link = self.link
        if link is not None and link.owned and link.provider is not None:
            # Flushed, not shut down: the provider outlives this configuration; the SDK shuts a
            # global one down at exit.
            link.provider.force_flush()
        return delivered


def _build(
    settings: Settings, client: ControlPlaneClient | None = None, *, on_first_use: bool = False
) -> Runtime:
    # Replays need it as much as recording does, so it follows its own setting, not `enabled`.
    carry_context_into_threads(settings.thread_context)
    redactors = list(default_redactors()) if settings.default_redactors else []
    redactors.extend(settings.redactors)
    redaction = Redaction(redactors)
    if client is None and settings.control_plane_url:
        client = HttpControlPlane(settings.control_plane_url, settings.api_key, settings.timeout)
    delivery = Delivery(client, settings)
    deliver_at_worker_exit(delivery)  # built inside a multiprocessing worker: deliver at its end
    held = (
        KeepBuffer(delivery, settings, redaction.text)
        if settings.enabled and settings.keep_unsampled and client is not None
        else None
    )
    link = ChronicleTracer(settings, delivery, __version__, held) if settings.enabled else None
    built = Runtime(
        settings=settings,
        link=link,
        redaction=redaction,
        client=client,
        delivery=delivery,
        genai_content=content_capture_enabled(),
        keep=held,
    )
    _announce(built, on_first_use=on_first_use)
    return built


_NOWHERE = (
    "no control_plane_url is set and no OpenTelemetry exporter is configured, so "
    "nothing is recorded (hooks still run); set CHRONICLE_CONTROL_PLANE_URL or "
    "configure(control_plane_url=...)"
)


def _announce(rt: Runtime, *, on_first_use: bool) -> None:
    """The one line ``configure()`` logs: where Chronicle records, and through which provider.

    Built ``on_first_use`` with nowhere to record, it waits for the first call that would have
    been recorded (``Runtime.note_unrecorded``): a replay needs no control plane.
    """
    link = rt.link
    if link is None:
        logger.info("disabled (enabled=false); hooks still run, nothing is recorded")
        return
    if rt.client is None and not link.display:
        if on_first_use:
            rt.nowhere_untold = True
        else:
            logger.warning(_NOWHERE)
        return
    url = rt.settings.control_plane_url
    if url is not None:
        where = f"the control plane at {safe_url(url)}"
    elif rt.client is not None:
        where = f"a {type(rt.client).__name__}"
    else:
        where = "nowhere (control_plane_url is unset)"
    logger.info("recording to %s; spans go through %s", where, link.description)


def configure(**settings: object) -> None:
    """Set Chronicle up (or again): settings in code win over the environment and the file.

    A previous configuration is shut down first (its queue is delivered). Raises
    ``ConfigurationError`` for an unknown setting or a bad value, and changes nothing then.
    """
    _swap(load_settings(settings), None)


def install(client: ControlPlaneClient, **settings: object) -> None:
    """Configure with a ``ControlPlaneClient`` of your own (``chronicle.testing`` uses this)."""
    _swap(load_settings(settings), client)


def _swap(
    settings: Settings, client: ControlPlaneClient | None, *, on_first_use: bool = False
) -> None:
    global _current, _atexit_registered
    if settings.tracer_provider is not None:
        require_sdk_provider(settings.tracer_provider)  # raises before anything changes
    with _lock:
        previous = _current
        if previous is not None:
            previous.shutdown(previous.settings.timeout)
        _current = _build(settings, client, on_first_use=on_first_use)
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
        _install_sigterm()


def current() -> Runtime:
    """The current runtime, built from the environment on first use. Never raises.

    A mistake in the environment or the settings file found here (on first use, in the middle
    of the agent's work) is logged once and recording is turned off; hooks still run. Call
    ``configure()`` at startup to have such a mistake raised where it can be fixed.
    """
    runtime = _current
    if runtime is not None:
        return runtime
    with _lock:
        if _current is None:
            try:
                _swap(load_settings({}), None, on_first_use=True)
            except ConfigurationError as exc:
                _turn_off(exc)
        assert _current is not None
        return _current


def configured() -> Runtime | None:
    """The runtime ``configure()`` (or the first use) built, if any; never builds one: what a
    reader or a check consults when it must not set Chronicle up as a side effect."""
    return _current


def configure_with(settings: Settings) -> None:
    """Configure again with the settings a runtime had (``configured().settings``), as they were
    resolved then: how a test tool puts back the configuration a test's own replaced."""
    _swap(settings, None)


def _turn_off(error: ConfigurationError) -> None:
    global _current
    logger.error(
        "the configuration is invalid (%s), so recording is off in this process "
        "(hooks still run); fix the setting, or call chronicle.configure() at startup to have "
        "such mistakes raised there",
        error,
    )
    _current = _build(replace(Settings(), enabled=False))


def is_enabled() -> bool:
    """Whether calls are being recorded now (hooks run either way).

    ``False`` when ``enabled`` is off, and when there is nowhere to record to: no control plane
    and no OpenTelemetry exporter.
    """
    return current().recording


def flush(timeout: float | None = None) -> bool:
    """Deliver everything queued so far; ``True`` when all of it reached the control plane.

    ``False`` when ``timeout`` seconds passed first, or something was dropped or rejected since
    the last flush (the log says what). With ``fail_open=False`` those cases raise
    ``DeliveryError`` instead.
    """
    runtime = _current
    if runtime is None:
        return True
    return runtime.delivery.flush(timeout)


def keep(
    session_id: str | None = None,
    *,
    trace_id: str | None = None,
    reason: str = "named by chronicle.keep()",
) -> int:
    """Save the requests the sampler dropped that belong to ``session_id`` (their trace label)
    or to ``trace_id``, when they are still held (``keep_window`` seconds after they ended).

    For feedback that comes after the request: a thumbs-down, a ticket. ``reason`` goes on the
    request's Span (metadata ``chronicle.kept``). Returns how many requests were kept now: 0
    when none is held (they were sampled and saved anyway, were kept already, or were dropped
    when their window ended). Never blocks on the network.
    """
    if (session_id is None) == (trace_id is None):
        raise TypeError("chronicle.keep() takes session_id=... or trace_id=... (one of them)")
    named = session_id if session_id is not None else trace_id
    if not isinstance(named, str) or not named:
        which = "session_id" if session_id is not None else "trace_id"
        raise TypeError(f"chronicle.keep() expects {which} as a non-empty string, got {named!r}")
    if not isinstance(reason, str) or not reason.strip():
        raise TypeError(f"chronicle.keep() expects reason as a non-empty string, got {reason!r}")
    buffer = current().keep
    if buffer is None:
        return 0
    if session_id is not None:
        return buffer.keep_session(session_id, reason)
    return int(buffer.keep_trace(named.lower(), reason))


def shutdown(timeout: float | None = None) -> bool:
    """Flush, stop delivery and forget the configuration. Safe to call twice."""
    global _current
    with _lock:
        runtime, _current = _current, None
    if runtime is None:
        return True
    return runtime.shutdown(timeout)


def reset() -> None:
    """Drop the configuration without waiting for delivery (tests). Hooks are kept."""
    global _current
    with _lock:
        runtime, _current = _current, None
    if runtime is not None:
        runtime.shutdown(0)


# ---- the end of the process -------------------------------------------------------------------


def _shutdown_at_exit() -> None:
    runtime = _current
    if runtime is None:
        return
    try:
        runtime.delivery.deliver_before_exit("exit")
        link = runtime.link
        if link is not None and link.owned and link.provider is not None:
            # What is left of exit_timeout: the process waits at most that in total.
            left = runtime.delivery.exit_time_left()
            link.provider.force_flush(max(int(left * 1000), 1))
    except KeyboardInterrupt:  # a second Ctrl-C: leave quietly, no traceback at exit
        pass
    except Exception:  # at exit nothing may raise; the delivery log already said what was lost
        logger.exception("delivery at exit failed")


def _install_sigterm() -> None:
    """Deliver on SIGTERM too (``docker stop``, Kubernetes): Python runs no ``atexit`` for it.

    Installed once, from the main thread, only over the default handler or a handler of the
    user's (which it chains: ours delivers, then theirs runs). An ignored SIGTERM, or a handler
    set outside Python, is left alone; a handler set later replaces ours, as it should.
    """
    global _sigterm_installed, _previous_sigterm
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is signal.SIG_IGN or current is None:
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # no SIGTERM here, or not allowed
        return
    _previous_sigterm = current
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    previous = _previous_sigterm
    runtime = _current
    if runtime is not None:
        # With a handler of the user's next, the process may go on: keep delivery running.
        runtime.delivery.deliver_before_exit("SIGTERM", stop=not callable(previous))
    if callable(previous):
        previous(signum, frame)
        return
    # End the process the way the default handler would: by the signal itself.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


# A recording file's size bound is a setting; the file reader sits a layer below the runtime.
untrusted.use_limit_from(lambda: current().settings.max_file_bytes)
