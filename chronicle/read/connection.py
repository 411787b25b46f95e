"""Reading from the control plane: which one (``--url`` or ``url=``, else the configuration),
checked to be a control plane before anything is said about what it holds, and one trace read
whole; and the times the readers accept (``2h``, ``7d`` ago, or an ISO date and time).

Shared by ``find_traces()``/``show()`` (``traces.py``), the agents registry (``agents.py``), the
checks (``chronicle.check``) and the CLI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from chronicle import runtime
from chronicle.config import load_settings
from chronicle.errors import ConfigurationError, ControlPlaneError
from chronicle.save.client import HttpControlPlane

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# ---- time --------------------------------------------------------------------------------


def parse_time(value: datetime | timedelta | str, *, now: datetime | None = None) -> datetime:
    """An aware datetime from ``2h`` / ``30m`` / ``1d`` (that long before ``now``), ISO 8601
    text (``2026-12-01T14:00``; no zone means local time), a ``timedelta`` (before ``now``) or
    a ``datetime`` (naive means local time). Raises ``ValueError`` saying what it accepts."""
    now = now or datetime.now(UTC)
    if isinstance(value, timedelta):
        return now - value
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.astimezone()
    if not isinstance(value, str):
        raise TypeError(f"expected a time, a duration or text, got {type(value).__name__}")
    relative = _RELATIVE.match(value)
    if relative:
        return now - timedelta(seconds=float(relative.group(1)) * _UNITS[relative.group(2).lower()])
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time: use a duration before now (30m, 2h, 1d, 1w) or a date and "
            "time (2026-12-01T14:00, local time unless it ends in Z or +01:00)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.astimezone()


def instant(text: object) -> datetime | None:
    """A time the control plane wrote (ISO 8601 text), aware; ``None`` for anything else."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def span_ms(start: datetime | None, end: datetime | None) -> float | None:
    """Milliseconds from ``start`` to ``end``; ``None`` unless both are known."""
    if start is None or end is None:
        return None
    return max((end - start).total_seconds() * 1000.0, 0.0)


# ---- connection --------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    """Which control plane a reader reads, and with which key and timeout."""

    url: str
    api_key: str | None = field(repr=False)
    timeout: float

    @classmethod
    def resolve(cls, url: str | None, api_key: str | None) -> Connection:
        """The control plane to read: ``url`` when given (with ``api_key``, else the environment's
        ``CHRONICLE_API_KEY``: a key ``configure()`` set is not sent to another address); else the
        one ``configure()`` set in this process, with its key; else the environment's and the
        config file's (``CHRONICLE_CONTROL_PLANE_URL``). Raises ``ConfigurationError`` for none.
        """
        active = runtime.configured()  # reading must not build a runtime
        configured = active.settings if active is not None else None
        if url is None and configured is not None and configured.control_plane_url:
            key = api_key if api_key is not None else configured.api_key
            return cls(configured.control_plane_url, key, configured.timeout)
        overrides: dict[str, object] = {}
        if url is not None:
            overrides["control_plane_url"] = url
        if api_key is not None:
            overrides["api_key"] = api_key
        settings = load_settings(overrides)
        if not settings.control_plane_url:
            raise ConfigurationError(
                "control_plane_url",
                "is not set, so there is nothing to read from: set CHRONICLE_CONTROL_PLANE_URL "
                "(or pass --url / url=...)",
            )
        return cls(settings.control_plane_url, settings.api_key, settings.timeout)

    def client(self) -> HttpControlPlane:
        """A client for it (the caller closes it)."""
        return HttpControlPlane(self.url, self.api_key, self.timeout)


def not_a_control_plane(client: HttpControlPlane) -> ControlPlaneError | None:
    """Why the server at ``client.url`` is not a control plane, or ``None`` when it is one.

    Asked after an answer that a control plane gives for a missing trace (404), so that a wrong
    URL is not reported as a missing trace.
    """
    try:
        answer: object = client.health()
    except ControlPlaneError as exc:
        if exc.status_code is None and "did not answer" in str(exc):
            return None  # it stopped answering: the caller's own error says enough
        answer = str(exc)
    if isinstance(answer, dict) and answer.get("service") == "control-plane":
        return None
    said = answer if isinstance(answer, str) else f"answered {answer}"
    return ControlPlaneError(
        f"{client.shown_url} is not a control plane (GET /health: {said[:300]}); point --url "
        "or CHRONICLE_CONTROL_PLANE_URL at the AgentPlane control plane (chronicle serve runs "
        "one)"
    )


def read_trace(client: HttpControlPlane, trace_id: str) -> dict[str, Any]:
    """The trace whole (its spans); ``ControlPlaneError`` saying so when it is not there."""
    found = client.get_trace(trace_id)
    if found is None:
        wrong = not_a_control_plane(client)
        if wrong is not None:
            raise wrong
        raise ControlPlaneError(
            f"trace {trace_id} is not on the control plane at {client.url}; check the id "
            "(chronicle traces lists recent ones) and the control plane URL",
            status_code=404,
        )
    return found


def iso(value: datetime | None) -> str | None:
    """``value`` as UTC ISO 8601 text (``None`` stays ``None``)."""
    return value.astimezone(UTC).isoformat() if value is not None else None
