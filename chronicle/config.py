"""Settings: what each one means, where it may come from, and how a value is checked.

Precedence, highest first: ``configure(...)`` in code, then ``CHRONICLE_<NAME>`` environment
variables, then the file named by ``CHRONICLE_CONFIG`` (JSON or TOML), then the
matching ``OTEL_*`` variable where one exists, then the default. An unknown setting (in code or
in the file) or a bad value raises ``ConfigurationError`` naming the setting as the user wrote
it. An unknown ``CHRONICLE_*`` environment variable (a typo, a 0.x leftover) is one warning
naming the closest setting, and is ignored: a stray variable never turns recording off.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal, cast
from urllib.parse import urlsplit

from opentelemetry.trace import TracerProvider

from chronicle.agent import AgentProfile, resolve_profile
from chronicle.errors import ConfigurationError

Redactor = Callable[[str], str]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class Settings:
    """The resolved settings, as ``load_settings`` builds them; the defaults are documented."""

    enabled: bool = True
    """Record and deliver. Off: boundaries still run their hooks, nothing is recorded."""
    control_plane_url: str | None = None
    """Base URL of the control plane, e.g. ``http://127.0.0.1:8800``. Unset: nothing is sent."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer <key>``. Never logged."""
    service_name: str = "unknown_service"
    """The ``service`` of every Span this process opens. Default: ``OTEL_SERVICE_NAME``."""
    service_version: str | None = None
    """Which build of the service recorded (a release, a commit): on every Span's metadata
    (``chronicle.service_version``) and the ``service.version`` of a provider Chronicle builds.
    Default: ``service.version`` in ``OTEL_RESOURCE_ATTRIBUTES``."""
    capture_input: bool = True
    """Record boundary arguments. Off: ``input.raw`` is ``{}``."""
    capture_output: bool = True
    """Record boundary results. Off: ``output.raw`` is ``null``."""
    max_payload_bytes: int = 256 * 1024
    """Longest string kept in a payload, in UTF-8 bytes; longer ones are cut and flagged."""
    redactors: tuple[Redactor, ...] = ()
    """Your own ``str -> str`` redactors, run after the default ones."""
    default_redactors: bool = True
    """Mask common secret shapes (API keys, tokens, JWTs, private keys, URL passwords)."""
    extract: bool = True
    """Join the caller's trace from an inbound ``traceparent``."""
    inject: bool = True
    """Send ``traceparent`` on outbound calls to ``inject_hosts``."""
    inject_hosts: tuple[str, ...] = ()
    """Hosts (``host``, ``host:port`` or ``*.suffix``) that receive the trace header."""
    hooks_fail_call_on_error: bool = False
    """A hook that raises fails the call instead of being logged and ignored."""
    batch_size: int = 100
    """Most envelopes in one request (the server's ``max_batch`` caps it further)."""
    flush_interval: float = 1.0
    """Seconds between deliveries of a partly filled batch."""
    max_queue: int = 100_000
    """Most envelopes waiting for delivery, and most trace and span writes; see ``on_overflow``."""
    max_queue_bytes: int = 64 * 1024 * 1024
    """Most memory (approximate bytes) the records waiting for delivery may hold, envelopes and
    trace and span writes alike; past it new records follow ``on_overflow`` (counted)."""
    on_overflow: Literal["drop", "block"] = "drop"
    """When the queue is full: drop the new envelope (counted, warned once) or block the caller
    (at most ``timeout`` seconds; during an outage it then drops, counted, until there is room)."""
    timeout: float = 10.0
    """Seconds one HTTP request to the control plane may take in all (a wall-clock deadline)."""
    registration_timeout: float = 0.5
    """Seconds a synchronous trace registration may hold the request; past it (or the
    ``timeout``, if shorter) the registration goes on in the background, as when it fails."""
    flush_timeout: float = 30.0
    """Seconds ``flush()`` (and ``shutdown()``) wait at most when called without a timeout."""
    exit_timeout: float = 10.0
    """Seconds the process waits at most at exit (and on SIGTERM) to deliver what is queued."""
    fail_open: bool = True
    """Delivery problems are logged and never reach the agent. Off: ``flush()`` raises."""
    trace_registration: Literal["sync", "lazy"] = "sync"
    """``sync``: register the trace (and its labels) before the root span's body runs."""
    registration_fail_open: bool = True
    """A failed synchronous registration is logged and queued again instead of raised."""
    emit_open: bool = False
    """Also send each envelope when it opens, so a crash mid-call leaves an open record."""
    set_global_provider: bool = True
    """Make the TracerProvider Chronicle builds global (when it exports and none is set)."""
    thread_context: bool = True
    """Threads and thread pools started inside a span (or a replay) run in its OTel context."""
    keep_unsampled: bool = True
    """Hold a request the sampler dropped in memory and save it when it turns out to matter: a
    call in it failed, ``session.keep()`` flagged it, it ran past ``keep_slower_than``, or
    ``chronicle.keep()`` named it within ``keep_window``. Off: a dropped request is not kept."""
    keep_window: float = 60.0
    """Seconds an unsampled request stays held after it ends, waiting for ``chronicle.keep()``;
    then it is dropped (counted)."""
    keep_max_requests: int = 1000
    """Most unsampled requests held at once; past it the oldest is dropped (counted)."""
    keep_max_bytes: int = 16 * 1024 * 1024
    """Most memory (approximate bytes) the held requests' records may take; past it the oldest
    request is dropped (counted)."""
    keep_slower_than: float = 30.0
    """Seconds: an unsampled request that runs longer is kept."""
    tracer_provider: TracerProvider | None = field(default=None, repr=False, compare=False)
    """Code only: the SDK TracerProvider (or a provider wrapping one) to attach Chronicle to."""
    agent: AgentProfile | None = None
    """Code only: the agent this service runs, carried on every Span (``chronicle.agent``)."""
    agent_name: str | None = None
    """An agent profile of just this name, when ``agent`` is not set in code."""
    agent_version: str | None = None
    """``metadata["version"]`` of the agent profile, unless the profile has one."""
    tenant_id: str | None = None
    """The agent profile's tenant namespace, unless the profile has one (no agent: ignored)."""
    accept_replay: bool = False
    """Serve an inbound request as a replay of its recorded span when the caller's replay asks
    (a signed ``chronicle-replay`` header) and it verifies with ``replay_token``. Off: the header
    is ignored and every request runs normally, so no request can switch a service into replay."""
    replay_token: str | None = field(default=None, repr=False)
    """The secret a replay that travels between services is signed with (HMAC-SHA256); the
    same on the caller and the service. Never logged."""
    replay_incident: str | None = None
    """An incident file holding every span of the trace (``chronicle save --all-spans``) that a
    service serving a replay reads its recorded span from, instead of the control plane."""
    max_file_bytes: int = 256 * 1024 * 1024
    """Largest recording file read, in bytes (an incident file, a corpus file, a saved envelopes
    body): a larger one is refused before any of it is read (``chronicle.save.untrusted``)."""


_FIELDS = {f.name: f for f in fields(Settings)}
_CODE_ONLY = frozenset({"tracer_provider", "redactors", "agent"})
_NOT_SETTINGS = frozenset({"CHRONICLE_CONFIG", "CHRONICLE_DEMO_EXIT", "CHRONICLE_MYPYC"})
"""``CHRONICLE_`` variables that are not settings: the config file, ``make demo``'s flag, and
the compiled build's switch (read when the wheel is built)."""
_CHOICES: dict[str, tuple[str, ...]] = {
    "on_overflow": ("drop", "block"),
    "trace_registration": ("sync", "lazy"),
}
_POSITIVE_INT = frozenset(
    {"max_payload_bytes", "batch_size", "max_queue", "max_queue_bytes"}
    | {"keep_max_requests", "keep_max_bytes", "max_file_bytes"}
)
_POSITIVE_FLOAT = frozenset(
    {"flush_interval", "timeout", "registration_timeout", "flush_timeout", "exit_timeout"}
    | {"keep_window", "keep_slower_than"}
)
_BOOL = frozenset(
    {
        "enabled",
        "capture_input",
        "capture_output",
        "default_redactors",
        "extract",
        "inject",
        "hooks_fail_call_on_error",
        "fail_open",
        "registration_fail_open",
        "emit_open",
        "set_global_provider",
        "thread_context",
        "keep_unsampled",
        "accept_replay",
    }
)


def _otel_defaults(environ: Mapping[str, str]) -> dict[str, object]:
    """Settings that have an ``OTEL_*`` counterpart, converted to Chronicle's units."""
    found: dict[str, object] = {}
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower()
    if disabled in _TRUE:
        found["enabled"] = False
    service = environ.get("OTEL_SERVICE_NAME", "").strip()
    if not service:
        for item in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
            key, _, value = item.partition("=")
            if key.strip() == "service.name" and value.strip():
                service = value.strip()
    if service:
        found["service_name"] = service
    for item in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = item.partition("=")
        if key.strip() == "service.version" and value.strip():
            found["service_version"] = value.strip()
    for variable, name, scale in (
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "batch_size", None),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "max_queue", None),
        ("OTEL_BSP_SCHEDULE_DELAY", "flush_interval", 1000.0),
        ("OTEL_BSP_EXPORT_TIMEOUT", "timeout", 1000.0),
    ):
        raw = environ.get(variable, "").strip()
        if not raw:
            continue
        try:
            found[name] = int(raw) if scale is None else float(raw) / scale
        except ValueError:
            raise ConfigurationError(variable, f"expects a number, got {raw!r}") from None
    return found


def _read_file(path_text: str) -> dict[str, object]:
    path = Path(path_text)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            "CHRONICLE_CONFIG", f"cannot read {path}: {exc.strerror}; fix the path or unset it"
        ) from None
    if path.suffix.lower() == ".toml":
        try:
            data: object = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(
                "CHRONICLE_CONFIG", f"{path} is not valid TOML: {exc}"
            ) from None
        if isinstance(data, dict) and isinstance(data.get("chronicle"), dict):
            data = data["chronicle"]  # allow a [chronicle] table, as in pyproject.toml
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                "CHRONICLE_CONFIG", f"{path} is not valid JSON: {exc}"
            ) from None
    if not isinstance(data, dict):
        raise ConfigurationError("CHRONICLE_CONFIG", f"{path} must hold an object of settings")
    return {str(key): value for key, value in data.items()}


def _coerce(name: str, value: object, label: str) -> object:
    """Check ``value`` for setting ``name`` and convert text (from the environment) to its type."""
    if name in _BOOL:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigurationError(label, f"expects true or false, got {value!r}")
    if name in _POSITIVE_INT:
        try:
            number = (
                int(value)
                if isinstance(value, (int, str)) and not isinstance(value, bool)
                else None
            )
        except ValueError:
            number = None
        if number is None or number <= 0:
            raise ConfigurationError(label, f"expects a whole number above 0, got {value!r}")
        return number
    if name in _POSITIVE_FLOAT:
        try:
            seconds = (
                float(value)
                if isinstance(value, (int, float, str)) and not isinstance(value, bool)
                else None
            )
        except ValueError:
            seconds = None
        if seconds is None or not seconds > 0 or seconds == float("inf"):
            raise ConfigurationError(label, f"expects a number of seconds above 0, got {value!r}")
        return seconds
    if name in _CHOICES:
        text = value.strip().lower() if isinstance(value, str) else value
        if text not in _CHOICES[name]:
            raise ConfigurationError(
                label, f"expects one of {', '.join(_CHOICES[name])}, got {value!r}"
            )
        return text
    if name == "inject_hosts":
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
            raise ConfigurationError(label, f"expects a list of host names, got {value!r}")
        return tuple(i.strip().lower() for i in items if i.strip())
    if name == "redactors":
        items = [value] if callable(value) else value
        if not isinstance(items, (list, tuple)) or not all(callable(i) for i in items):
            raise ConfigurationError(label, "expects a list of str -> str callables")
        return tuple(items)
    if name == "tracer_provider":
        # Wrappers (Logfire's proxy) are API providers; the SDK one inside is found on configure.
        if value is not None and not isinstance(value, TracerProvider):
            raise ConfigurationError(
                label,
                f"expects an opentelemetry.sdk.trace.TracerProvider (or a provider wrapping one), "
                f"got {type(value).__name__}",
            )
        return value
    if name == "agent":
        if value is not None and not isinstance(value, AgentProfile):
            raise ConfigurationError(
                label, f"expects a chronicle.AgentProfile, got {type(value).__name__}"
            )
        return value
    if name == "control_plane_url":
        if value is None or value == "":
            return None
        if not isinstance(value, str) or not value.startswith(("http://", "https://")):
            # Only what precedes the first ":" is shown: the rest of a URL may hold a password.
            shown = (
                f"one starting {value.partition(':')[0][:20]!r}"
                if isinstance(value, str)
                else type(value).__name__
            )
            raise ConfigurationError(label, f"expects an http:// or https:// URL, got {shown}")
        return value.rstrip("/")
    # api_key, service_name, service_version, agent_name, agent_version: plain text
    if value is None and name in (
        "api_key",
        "service_version",
        "agent_name",
        "agent_version",
        "replay_token",
        "tenant_id",
        "replay_incident",
    ):
        return None
    if not isinstance(value, str) or not value.strip():
        # An api_key or replay_token is never echoed: a wrong value may still be a real secret.
        shown = type(value).__name__ if name in ("api_key", "replay_token") else repr(value)
        raise ConfigurationError(label, f"expects a non-empty string, got {shown}")
    return value.strip()


_RENAMED = {"build_id": "service_version"}
"""0.x environment names read as today's settings (with a warning)."""
_warned: set[str] = set()
logger = logging.getLogger("chronicle")


def _warn_once(variable: str, what: str) -> None:
    if variable not in _warned:
        _warned.add(variable)
        logger.warning("the environment variable %s %s", variable, what)


def _not_a_setting(name: str) -> str:
    settable = [field for field in _FIELDS if field not in _CODE_ONLY]
    close = difflib.get_close_matches(name, settable, n=1)
    hint = f" (did you mean CHRONICLE_{close[0].upper()}?)" if close else ""
    if name in _CODE_ONLY:
        return f"names a setting that only code can set (configure({name}=...)); it is ignored"
    return f"is not a Chronicle setting and is ignored{hint}; remove or rename it"


def trace_page(control_plane_url: str, trace_id: str) -> str:
    """The control plane's web page for one trace (its UI opens ``#chronicle/<trace_id>``), from
    the ``control_plane_url`` setting: the link ``Session.url``, a replay's errors and the pages
    give a person. Made for people and messages: no user name, password or query from it.
    """
    parts = urlsplit(control_plane_url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}/#chronicle/{trace_id}"


def load_settings(
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every setting from code ``overrides``, the environment, the file and ``OTEL_*``.

    Raises ``ConfigurationError`` naming the first unknown setting or bad value it meets.
    """
    env = os.environ if environ is None else environ
    layers: list[tuple[dict[str, object], Callable[[str], str]]] = []

    code = dict(overrides or {})
    for key in code:
        if key not in _FIELDS:
            raise ConfigurationError(
                key, f"is not a Chronicle setting; known: {', '.join(_FIELDS)}"
            )
    layers.append((code, lambda n: n))

    from_env: dict[str, object] = {}
    for variable, value in env.items():
        if not variable.startswith("CHRONICLE_") or variable in _NOT_SETTINGS:
            continue
        name = variable.removeprefix("CHRONICLE_").lower()
        renamed = _RENAMED.get(name)
        if renamed is not None and f"CHRONICLE_{renamed.upper()}" not in env:
            _warn_once(variable, f"is read as CHRONICLE_{renamed.upper()}; rename it")
            name = renamed
        if name not in _FIELDS or name in _CODE_ONLY:
            # A stray variable (a 0.x leftover, a typo) must not switch recording off.
            _warn_once(variable, _not_a_setting(name))
            continue
        from_env[name] = value
    layers.append((from_env, lambda n: f"CHRONICLE_{n.upper()}"))

    config_path = env.get("CHRONICLE_CONFIG", "").strip()
    if config_path:
        from_file = _read_file(config_path)
        for key in from_file:
            if key not in _FIELDS or key in _CODE_ONLY:
                raise ConfigurationError(
                    f"{config_path}: {key}", "is not a Chronicle setting that a file may set"
                )
        layers.append((from_file, lambda n: f"{config_path}: {n}"))

    layers.append((_otel_defaults(env), lambda n: n))

    resolved: dict[str, object] = {}
    for name in _FIELDS:
        for values, label in layers:
            if name in values:
                resolved[name] = _coerce(name, values[name], label(name))
                break
    resolved["agent"] = resolve_profile(
        cast("AgentProfile | None", resolved.get("agent")),
        cast("str | None", resolved.get("agent_name")),
        cast("str | None", resolved.get("agent_version")),
        cast("str | None", resolved.get("tenant_id")),
    )
    return replace(Settings(), **resolved)  # type: ignore[arg-type]
