"""Every exception Chronicle raises, in one place.

The tree::

    ChronicleError
    ├── ConfigurationError        a setting is unknown or has a bad value
    ├── ReservedMetadataError     user metadata used the reserved ``chronicle.`` prefix
    ├── ControlPlaneError         the control plane refused or could not be reached (reads)
    │   └── DeliveryError         recorded data could not be delivered (strict mode only)
    ├── LocalControlPlaneError    chronicle.testing could not start the local control plane
    │   └── DatabaseInUseError    another local control plane is serving that database
    ├── CorpusError               a corpus cannot be replayed at all (its entry cannot be used)
    ├── NetworkBlockedError       a test or a replay blocked the network, and code connected out
    └── ReplayError
        ├── ReplayMismatchError   a call has no recording to replay
        ├── RecordedCallError     the recorded call failed; replay raises it again
        ├── LossyReplayError      the recorded value was not JSON and cannot be restored
        ├── UnrecordedOutputError the output was not recorded, or was cut: nothing to return
        ├── ReplayDivergenceError a strict replay diverged from its recording
        └── ReplayRefusedError    a service refused a replay a caller sent it (token, expiry)

    AbortCall                     raised by a hook to stop a call (not a ChronicleError)

``AbortCall`` stands apart on purpose: it is the governance signal a hook raises, it always
propagates to the caller, and code that catches ``ChronicleError`` to survive SDK trouble must not
swallow it. Every message says what happened and what to do next.
"""

from __future__ import annotations

from typing import Any, Generic

from typing_extensions import TypeVar

_Found = TypeVar("_Found", default=Any)
"""What a ``ReplayDivergenceError`` holds: the replay's ``Divergence`` records
(``chronicle.replay.divergence``, which raises it; errors.py imports nothing of Chronicle)."""


class ChronicleError(Exception):
    """Base class of the errors Chronicle raises about itself."""


class ConfigurationError(ChronicleError, ValueError):
    """A setting is unknown or has a value Chronicle cannot use.

    ``setting`` names it the way the user wrote it (keyword, environment variable or file key).
    """

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {message}")


class ReservedMetadataError(ChronicleError, ValueError):
    """User metadata used a key under the ``chronicle.`` prefix, which Chronicle reserves."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"metadata key {key!r} uses the reserved 'chronicle.' prefix; "
            "rename it (for example 'app." + key.removeprefix("chronicle.") + "')"
        )


class ControlPlaneError(ChronicleError):
    """The control plane answered with an error or could not be reached.

    ``status_code`` is the HTTP status when there was an answer, else ``None``; ``refused`` is
    set when nothing listened at the address (the connection was refused).
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, refused: bool = False
    ) -> None:
        self.status_code = status_code
        self.refused = refused
        super().__init__(message)


class DeliveryError(ControlPlaneError):
    """Recorded data could not be delivered and strict mode (``fail_open=False``) is on.

    Raised by ``flush()``/``shutdown()`` and at the close of a request span, never in the middle
    of a boundary call.
    """


class LocalControlPlaneError(ChronicleError, RuntimeError):
    """``chronicle.testing.LocalControlPlane`` could not be started, or was used after ``close()``.

    The message says why (the server's last output lines when it failed) and what to do.
    """


class DatabaseInUseError(LocalControlPlaneError):
    """Another ``LocalControlPlane`` (in this or another process) is serving that database."""


class CorpusError(ChronicleError):
    """A corpus cannot be replayed at all (an entry that cannot be imported); one line."""


class NetworkBlockedError(ChronicleError, ConnectionError):
    """A connection to a host outside the allow-list, refused before any packet left.

    Raised by ``socket.connect`` (and the name lookup) while a test blocks the network
    (``pytest --chronicle-block-network``, ``chronicle.testing.network.block_network``), or a
    replay with ``network="block"`` refuses a connection its plan does not run (``message``
    then says so). It is a ``ConnectionError``, so HTTP clients report it as a failed
    connection, with this message. ``target`` is ``host:port``.
    """

    def __init__(self, target: str, allowed: str, message: str | None = None) -> None:
        self.target = target
        super().__init__(
            message
            or f"chronicle blocked a connection to {target}: the network is blocked during this "
            f"test and {target.rsplit(':', 1)[0]} is not an allowed host (allowed: {allowed}). "
            "A call escaped the replay's stubs: stub it (leave it out of run=[...]) or allow "
            "the host with --chronicle-allowed-hosts"
        )


class ReplayError(ChronicleError):
    """Base class of the errors replay raises."""


def _see(url: str | None) -> str:
    return f"; the recorded trace: {url}" if url else ""


class _RecordedCallReplayError(ReplayError):
    """An error about one recorded call: ``name`` and ``invocation`` (from 1) identify it and
    ``url`` is the control plane's page for the recorded trace, when it was read from one."""

    def __init__(self, name: str, invocation: int, url: str | None, message: str) -> None:
        self.name = name
        self.invocation = invocation
        self.url = url
        super().__init__(message)


class ReplayMismatchError(_RecordedCallReplayError, KeyError):
    """A boundary was called during replay with no recording to answer it.

    ``name`` and ``invocation`` identify the call (invocations count from 1, span-wide, after
    the recorded ones); ``recorded`` is how many calls of ``name`` the recording holds where this
    one was made: under ``parent`` (the live call that made it, as ``researcher#2``), or at the
    span's top level when ``parent`` is ``None``; ``parent_recorded`` is false when that
    parent is itself a call with no recording. ``url`` is the control plane's page for the
    recorded trace, when it was read from one.
    """

    def __init__(
        self,
        name: str,
        invocation: int,
        recorded: int,
        *,
        url: str | None = None,
        parent: str | None = None,
        parent_recorded: bool = True,
    ) -> None:
        self.recorded = recorded
        self.parent = parent
        self.parent_recorded = parent_recorded
        super().__init__(name, invocation, url, name)

    @property
    def reason(self) -> str:
        """What happened, without the advice: ``call 3 of 'planner' made by researcher#2 has no
        recording (the recorded researcher#2 has only 1 call(s) to 'planner')``."""
        where = "the recording" if self.parent is None else f"the recorded {self.parent}"
        if not self.parent_recorded:
            what = f"{self.parent} itself has no recording, so nothing it calls was recorded"
        elif self.recorded == 0:
            what = f"{where} has no call to {self.name!r}"
        else:
            what = f"{where} has only {plural(self.recorded, 'call')} to {self.name!r}"
        made = "" if self.parent is None else f" made by {self.parent}"
        return f"call {self.invocation} of {self.name!r}{made} has no recording ({what})"

    def __str__(self) -> str:
        return (
            f"replay: {self.reason}; the run diverged from the recorded request. If that call is "
            f"new on purpose, run it live with ReplayPlan().run({self.name!r}, {self.invocation})"
            ", or run and record every new call with ReplayPlan().record_new()"
            f"{_see(self.url)}"
        )


class RecordedCallError(_RecordedCallReplayError):
    """The recorded call raised; replay raises this in its place.

    ``original_type`` and ``original_message`` are what was recorded.
    """

    def __init__(
        self,
        name: str,
        invocation: int,
        original_type: str,
        message: str,
        *,
        url: str | None = None,
    ) -> None:
        self.original_type = original_type
        self.original_message = message
        super().__init__(
            name,
            invocation,
            url,
            f"{original_type}: {message} (recorded failure of {name!r} call {invocation}, "
            f"replayed; to run the call live instead use ReplayPlan().run({name!r}, {invocation})"
            f"{_see(url)})",
        )


class LossyReplayError(_RecordedCallReplayError):
    """A stubbed call's recorded output was not JSON (stored as its repr) and cannot be returned."""

    def __init__(self, name: str, invocation: int, *, url: str | None = None) -> None:
        super().__init__(
            name,
            invocation,
            url,
            f"replay: the recorded output of {name!r} call {invocation} was not JSON-serializable "
            "and was stored as its repr, so it cannot be restored; return JSON values, pydantic "
            "models or dataclasses from the boundary, or run it live with "
            f"ReplayPlan().run({name!r}, {invocation}){_see(url)}",
        )


class UnrecordedOutputError(_RecordedCallReplayError):
    """A stubbed call's output was not recorded whole, so a stub has nothing true to return.

    ``reason`` is ``"not recorded"`` (``capture_output`` was off when the call was recorded) or
    ``"cut"`` (the output was cut to ``max_payload_bytes``). Returning ``None`` or the cut value
    instead would replay something the call never returned.
    """

    def __init__(self, name: str, invocation: int, reason: str, *, url: str | None = None) -> None:
        self.reason = reason
        if reason == "cut":
            what = (
                "was cut to max_payload_bytes when it was recorded, so it cannot be returned "
                "whole; record the request again with a larger max_payload_bytes, or"
            )
        else:
            what = (
                "was not recorded (capture_output was off when it ran), so there is nothing to "
                "return; record the request again with capture_output on, or"
            )
        super().__init__(
            name,
            invocation,
            url,
            f"replay: the output of {name!r} call {invocation} {what} run the call live with "
            f"ReplayPlan().run({name!r}, {invocation}){_see(url)}",
        )


class ReplayDivergenceError(ReplayError, Generic[_Found]):
    """A strict replay (``strict=True``) diverged from its recording.

    Raised by the stubbed call whose input differs from the recording it is served, by a
    connection the plan does not run (``network="report"``), and when the replay exits for
    recordings that were never used and plan entries that matched no call. One raised inside
    the replay and caught there (a framework that wraps errors in its own) is raised again when
    the replay exits, with the error that left the block as its cause.
    ``divergences`` holds what diverged (each with ``name``, ``index``, ``kind`` and ``diff``);
    the message shows them and says what to do: run the call live, or declare the change with
    ``ReplayPlan().expect_change(name, n)``.
    """

    def __init__(self, message: str, divergences: tuple[_Found, ...]) -> None:
        self.divergences = divergences
        super().__init__(message)


class ReplayRefusedError(ReplayError):
    """A service was asked to replay its span for a caller and refused: the replay's signature
    does not verify with its ``replay_token`` (or it has none), the replay expired or was sent
    twice, or the header is not a replay. ``status`` is the HTTP status the service answers it
    with (400 or 403); the message says what to set."""

    def __init__(self, message: str, status: int = 403) -> None:
        self.status = status
        super().__init__(message)


class AbortCall(Exception):
    """Raised by a hook to stop a call before (or instead of) running it.

    It always propagates to the caller, whatever ``hooks_fail_call_on_error`` says, and the
    call is recorded as a failure with ``output.error.type = "AbortCall"``. Subclass it to carry
    your own reason (for example a budget error).
    """


__all__ = [
    "AbortCall",
    "ChronicleError",
    "ConfigurationError",
    "ControlPlaneError",
    "CorpusError",
    "DatabaseInUseError",
    "DeliveryError",
    "LocalControlPlaneError",
    "LossyReplayError",
    "NetworkBlockedError",
    "RecordedCallError",
    "ReplayDivergenceError",
    "ReplayError",
    "ReplayMismatchError",
    "ReplayRefusedError",
    "ReservedMetadataError",
    "UnrecordedOutputError",
]


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word`` as a message says them: ``1 recording``, ``3 recordings``,
    ``0 recordings`` (``many``: the plural when it is not ``word + "s"``). The one rule for
    every count Chronicle prints, so that none reads ``1 recordings`` or ``2 call(s)``."""
    return f"{count} {word if count == 1 else many or word + 's'}"
