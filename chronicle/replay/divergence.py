"""Divergence: where a replay departs from the history it replays, and how that is reported.

A replay is a regression test, so it must notice when the code under test no longer does what
was recorded (Temporal calls this nondeterminism). Four kinds of divergence:

- ``input``: a stubbed call's input differs from the input of the recording it is served, so the
  recorded answer may be stale (the model call that reads a fixed tool's new result, say);
- ``unused``: a recorded call was never made during the replay;
- ``plan``: a plan entry (``run``, ``stub``, ``expect_change``) matched no call and no recording
  (a misspelt name, a call number too high);
- ``network``: the code connected to a host outside any boundary the plan runs live (an
  un-instrumented tool or client: see ``replay/network.py``), so something ran live that the
  replay was not asked to run.

Inputs are compared the way they are recorded: the JSON form of the arguments after
``extract_input``, cut to ``max_payload_bytes`` and redacted. What the recording could not hold
is not held against the call: a ``{"$repr": ...}`` marker (a value that was not JSON) matches
anything, and a string cut to ``max_payload_bytes`` matches any string it is the start of.

The comparison is built for the stub's hot path: the live arguments are first compared with the
recorded JSON as they are (``==``, a C-speed walk, enough for plain JSON-like arguments); only
when that fails are the arguments put in JSON form and redacted, once per call.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from agentplane_primitives.models import Envelope
from pydantic import JsonValue

from chronicle import runtime
from chronicle.recording.call import CallSpec, input_json

logger = logging.getLogger("chronicle")

DivergenceKind = Literal["input", "unused", "plan", "network"]

_TRUNCATED = re.compile(r"…\[truncated \d+ bytes\]\Z")
_SHOWN = 72
"""Longest value shown in a diff line, in characters."""
_LINES = 8
"""Most changed paths listed for one call."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MISSING = object()


@dataclass(frozen=True)
class Divergence:
    """One place where the replay departed from its recording.

    ``name`` is the boundary; ``index`` the recording's span-wide invocation index, the number
    plan entries use (``n`` of a plan entry for ``plan``, which may be ``None``); ``kind`` is
    ``input``, ``unused`` or ``plan``; ``diff`` says what differs (for ``input``, one line per
    changed path: ``path: old -> new``, values cut to a readable length). ``call`` is the
    number of the call that diverged (``index`` again for ``input``: a call is named by the
    recording it stands for). ``expected`` is set when the plan declared it
    (``ReplayPlan().expect_change``). ``service`` names the service whose replay found it when
    that was another service a call was let through to (``ReplayPlan().through``), else ``None``.

    A ``network`` divergence names the connection's ``host:port`` as ``name`` (``index`` and
    ``call`` ``None``), the innermost boundary it was made under as ``under`` (``"fetch#1"``;
    ``None``: outside any boundary), and in ``diff`` how often, and whether it was let through
    or refused.
    """

    name: str
    index: int | None
    kind: DivergenceKind
    diff: str
    expected: bool = False
    call: int | None = None
    service: str | None = None
    under: str | None = None

    def __str__(self) -> str:
        return self.describe()

    def describe(self, spelling: Spelling | None = None) -> str:
        """What diverged, the diff, and what to do, in a few lines; the advice names the fix as
        it is written where the report is printed (``spelling``: see ``Spelling``; by default
        the one ``advice_spelt`` set, else ``python``)."""
        spelling = spelling or _SPELLING.get()
        if self.service is not None:
            return f"in {self.service}: {self._describe(spelling)}"
        return self._describe(spelling)

    def _describe(self, spelling: Spelling) -> str:
        name, index = self.name, self.index
        if self.kind == "input":
            advice = (
                "the plan expects this change"
                if self.expected
                else f"run it live with {plan_option(spelling, 'run', name, index)}, or mark the "
                f"change as expected with {plan_option(spelling, 'expect_change', name, index)}"
            )
            return (
                f"the input of call {index} of {name!r} differs from its recording, so its "
                f"recorded result may be stale:\n{_indent(self.diff)}\n  {advice}"
            )
        if self.kind == "unused":
            advice = (
                "the plan expects this change"
                if self.expected
                else "if the change removes it on purpose, mark it with "
                f"{plan_option(spelling, 'expect_change', name, index)}"
            )
            return (
                f"call {index} of {name!r} was recorded but not made during the replay:\n"
                f"{_indent(self.diff)}\n  {advice}"
            )
        if self.kind == "network":
            return self._describe_connection(spelling)
        return f"{self.diff}. Fix the name or the call number in {_PLAN_PLACE[spelling]}"

    def _describe_connection(self, spelling: Spelling) -> str:
        under, host = self.under, self.name
        where = "outside any boundary" if under is None else f"under {under}"
        run_it = ""
        if under is not None and "#" in under:
            boundary, n = under.rsplit("#", 1)
            number = int(n) if n.isdigit() else None
            entry = plan_option(spelling, "run", boundary, number)
            run_it = f", run {under} live on purpose with {entry}"
        return (
            f"a connection to {host} was made {where}, which the plan does not run live, so "
            f"something reached a live service during the replay ({self.diff})\n"
            "  instrument the client that made it (@chronicle.boundary on the function that "
            "calls it, chronicle.wrap(client), chronicle.instrument_<framework>()) so the replay "
            f"stubs it{run_it}, or allow the host: {allow_host(spelling, host)}"
        )


# ---- advice, spelt where it is printed -------------------------------------------------------

Spelling = Literal["python", "cli", "marker", "pytest"]
"""Where a report is printed, so that its advice names the fix as it is written there:

- ``python``: a ``ReplayPlan`` method (``ReplayPlan().run('search', 2)``), for ``replay()`` and
  ``replay_trace()``;
- ``cli``: a ``chronicle replay`` option (``--run search#2``);
- ``marker``: an argument of ``@pytest.mark.chronicle_replay`` (``run=[('search', 2)]``);
- ``pytest``: a pytest command-line option, for ``--chronicle-corpus`` items
  (``--chronicle-run search#2``).
"""

PlanMethod = Literal["run", "expect_change"]

_SPELLING: ContextVar[Spelling] = ContextVar("chronicle_advice_spelling", default="python")


@contextlib.contextmanager
def advice_spelt(spelling: Spelling) -> Iterator[None]:
    """Within the block (this thread or task, and what it copies its context to), divergences
    describe their advice as ``spelling`` says, unless told otherwise: the messages of the
    errors a replay raises too. The pytest plugin and ``chronicle replay`` set it around the
    replays they run."""
    token = _SPELLING.set(spelling)
    try:
        yield
    finally:
        _SPELLING.reset(token)


_PLAN_PLACE: dict[Spelling, str] = {
    "python": "the plan",
    "cli": "--run/--expect-change",
    "marker": "the marker's run=/stub=/expect_change=",
    "pytest": "--chronicle-run/--chronicle-expect-change",
}


def plan_option(spelling: Spelling, method: PlanMethod, name: str, n: int | None) -> str:
    """The plan entry ``method`` (``run`` or ``expect_change``) for call ``n`` of ``name``
    (every call: ``None``), as it is written where ``spelling`` says: ``ReplayPlan().run('x',
    2)``, ``--run x#2``, ``run=[('x', 2)]`` or ``--chronicle-run x#2`` (quoted for a shell when
    it must be)."""
    if spelling == "python":
        return f"ReplayPlan().{method}({name!r}{'' if n is None else f', {n}'})"
    if spelling == "marker":
        return f"{method}=[{name!r}]" if n is None else f"{method}=[({name!r}, {n})]"
    flag = method.replace("_", "-")
    target = shlex.quote(name if n is None else f"{name}#{n}")
    return f"--chronicle-{flag} {target}" if spelling == "pytest" else f"--{flag} {target}"


def allow_host(spelling: Spelling, host: str) -> str:
    """How to let a connection to ``host`` (``host:port``) through, where ``spelling`` says."""
    hostname = host.rsplit(":", 1)[0]
    if spelling == "cli":
        return (
            f"--allowed-host {shlex.quote(host)} (or {shlex.quote(hostname)} for every port) "
            "or --network allow"
        )
    if spelling == "pytest":
        return (
            f"--chronicle-allowed-hosts {shlex.quote(host)} (or {shlex.quote(hostname)} for "
            "every port)"
        )
    if spelling == "marker":
        return (
            f"allowed_hosts=[{host!r}] on the marker (or [{hostname!r}] for every port) or "
            "network='allow'"
        )
    return (
        f"replay(..., allowed_hosts=[{host!r}]) (or [{hostname!r}] for every port) or "
        "network='allow'"
    )


# ---- comparing one call's input with recordings --------------------------------------------


class LiveInput:
    """One call's input, compared with recorded inputs; its JSON form is built at most once.

    What ``volatile`` names is not compared (``Volatile``).
    """

    __slots__ = ("_bound", "_json", "_live_value", "_spec", "_volatile")

    def __init__(self, spec: CallSpec, bound: Mapping[str, object], volatile: Volatile) -> None:
        self._spec, self._bound, self._volatile = spec, bound, volatile
        self._json: JsonValue | None = None
        self._live_value: object = _MISSING

    def matches(self, envelope: Envelope) -> bool:
        """Whether the call's input is the recorded one, what the recording lacks and what is
        volatile aside."""
        recorded = recorded_input(envelope)
        try:
            live = self._live()
            if live == recorded:  # plain JSON-like arguments: no conversion at all
                return True
        except Exception:  # a value whose __eq__ raises: compare the JSON forms
            pass
        actual = self.json()
        if actual == recorded or _same(recorded, actual):
            return True
        strip = self._volatile.strip
        return _same(strip(recorded), strip(actual))

    def changes(self, envelope: Envelope) -> str:
        """The diff of the recorded input against this call's, one ``path: old -> new`` a line
        (volatile paths left out)."""
        lines = path_diff(recorded_input(envelope), self.json(), self._volatile, limit=_LINES)
        return "\n".join(lines) or "(no difference shown)"

    def json(self) -> JsonValue:
        """The input as a recording of this call would store it.

        An ``extract_input`` that raises gives a marker, which matches any recording: a replay
        never fails a call over its own comparison.
        """
        if self._json is None:
            try:
                self._json = input_json(self._spec, self._bound, runtime.current()).value
            except Exception:
                logger.debug("could not compare the input of %r", self._spec.name)
                self._json = {"$repr": "<input not comparable>"}
        return self._json

    def _live(self) -> object:
        """The live input in the shape it is recorded in (``extract_input`` applied, once)."""
        if self._live_value is _MISSING:
            extract = self._spec.extract_input
            value = self._bound if extract is None else extract(self._bound)
            self._live_value = value if isinstance(value, Mapping) else {"value": value}
        return self._live_value


def input_unchanged(spec: CallSpec, bound: Mapping[str, object], envelope: Envelope) -> bool:
    """The stub's quick check: the live arguments equal the recorded input as they are.

    ``False`` means "not shown equal" (compare with ``LiveInput.matches``), never "different".
    """
    if spec.extract_input is not None:
        return False
    try:
        return bound == envelope.input.raw
    except Exception:  # a value whose __eq__ raises
        return False


def recorded_input(envelope: Envelope) -> JsonValue:
    """The recorded ``input.raw`` of an envelope (arguments by name, as JSON)."""
    return envelope.input.raw


def _is_marker(value: object) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$repr"), str)


def _cut(text: str) -> tuple[str, bool]:
    found = _TRUNCATED.search(text)
    return (text[: found.start()], True) if found else (text, False)


def _same_text(recorded: str, actual: str) -> bool:
    kept_recorded, cut_recorded = _cut(recorded)
    kept_actual, cut_actual = _cut(actual)
    if not (cut_recorded or cut_actual):
        return kept_recorded == kept_actual
    shorter, longer = sorted((kept_recorded, kept_actual), key=len)
    return longer.startswith(shorter)


def _same(recorded: JsonValue, actual: JsonValue) -> bool:
    """Equal JSON, where markers match anything and a cut string matches what it starts."""
    if recorded == actual or _is_marker(recorded) or _is_marker(actual):
        return True
    if isinstance(recorded, str) and isinstance(actual, str):
        return _same_text(recorded, actual)
    if isinstance(recorded, dict) and isinstance(actual, dict):
        return recorded.keys() == actual.keys() and all(
            _same(value, actual[key]) for key, value in recorded.items()
        )
    if isinstance(recorded, list) and isinstance(actual, list):
        return len(recorded) == len(actual) and all(
            _same(old, new)
            for old, new in zip(recorded, actual)  # noqa: B905 (same length)
        )
    return False


# ---- volatile fields: what is not compared --------------------------------------------------

_ANY = "*"
_DEEP = "**"
_SEGMENT = re.compile(r"""\.?([A-Za-z_$][\w$-]*|\*\*|\*)|\[(\*|\d+|"(?:[^"\\]|\\.)*")\]""")

_MESSAGE_TYPES = frozenset(
    {"human", "ai", "system", "tool", "function", "chat", "developer", "AIMessageChunk"}
)
_RESPONSE_OBJECTS = frozenset({"chat.completion", "chat.completion.chunk", "response"})
_RESPONSE_FRESH = ("id", "created", "created_at", "system_fingerprint")
_REQUEST_ID_KEYS = frozenset(
    {"_request_id", "request_id", "x-request-id", "request-id", "x-amzn-requestid"}
)

VOLATILE_DEFAULTS: tuple[tuple[str, str], ...] = (
    (
        "a LangChain message's `id` (an object with `type` human/ai/system/tool/... and `content`)",
        "LangGraph's `add_messages` gives every message without one a fresh uuid4, and "
        "LangChain names an AI message after its run; neither is the agent's decision",
    ),
    (
        "`id`, `created`, `system_fingerprint` in a LangChain message's `response_metadata`",
        "the provider's response identity and build, fresh on every live model call",
    ),
    (
        "`id`, `created`, `created_at`, `system_fingerprint` of an OpenAI response object "
        "(`object` is chat.completion, chat.completion.chunk or response) passed back in",
        "minted by the provider per response",
    ),
    (
        "`id` of an Anthropic message (`type` message, `role` assistant) passed back in",
        "minted by the provider per response",
    ),
    (
        "request-id keys anywhere: `_request_id`, `request_id`, `x-request-id`, `request-id`, "
        "`x-amzn-requestid`",
        "a server's trace of one HTTP exchange",
    ),
)
"""The built-in volatile fields, ``(what, why)``: never compared, in every replay."""


def _default_volatile(parent: Mapping[str, object], key: str) -> bool:
    """Whether ``parent[key]`` is a built-in volatile field (``VOLATILE_DEFAULTS``)."""
    if key in _REQUEST_ID_KEYS:
        return True
    if key == "id":
        kind = parent.get("type")
        if kind in _MESSAGE_TYPES and "content" in parent:
            return True
        if kind == "message" and parent.get("role") == "assistant":
            return True
    if key in _RESPONSE_FRESH:
        return parent.get("object") in _RESPONSE_OBJECTS or _RESPONSE_METADATA in parent
    return False


_RESPONSE_METADATA = "token_usage"
"""A key LangChain's OpenAI ``response_metadata`` always holds (beside ``id``/``created``)."""


class Volatile:
    """The paths of a call's input that a replay does not compare (``ignore=``), and the
    built-in defaults (``VOLATILE_DEFAULTS``).

    A pattern is a path into the input as ``divergences()`` print it: keys joined by ``.``,
    list items as ``[n]``, a key that is not an identifier as ``["a key"]``; ``*`` (or ``[*]``)
    stands for any one key or item, ``**`` for any run of them. A pattern matches a path that
    ends with it, at any depth, so ``"id"`` ignores every ``id`` and ``"messages[*].id"`` every
    message id under any ``messages``. What it matches is left out on both sides before the
    comparison, so a change there is no divergence, and the diff does not show it.
    """

    __slots__ = ("_patterns", "patterns")

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        if isinstance(patterns, str):
            patterns = [patterns]
        self.patterns: tuple[str, ...] = tuple(patterns)
        self._patterns = tuple(_parse(pattern) for pattern in self.patterns)

    def strip(self, value: JsonValue) -> JsonValue:
        """``value`` without what is volatile in it (a new structure; ``value`` is untouched)."""
        return self._strip(value, [(pattern, 0) for pattern in self._patterns])

    def _strip(self, value: object, states: list[tuple[tuple[str | int, ...], int]]) -> JsonValue:
        if isinstance(value, dict):
            kept: dict[str, JsonValue] = {}
            for key, item in value.items():
                if _default_volatile(value, key):
                    continue
                ahead, done = _advance(states, key, self._patterns)
                if not done:
                    kept[key] = self._strip(item, ahead)
            return kept
        if isinstance(value, list):
            items: list[JsonValue] = []
            for position, item in enumerate(value):
                ahead, done = _advance(states, position, self._patterns)
                items.append(_IGNORED if done else self._strip(item, ahead))
            return items
        return value  # type: ignore[return-value]

    def __iter__(self) -> Iterator[str]:
        return iter(self.patterns)

    def __bool__(self) -> bool:
        return True  # the defaults always apply

    def __repr__(self) -> str:
        return f"Volatile({list(self.patterns)!r})"


_IGNORED = "<ignored>"


def _parse(pattern: str) -> tuple[str | int, ...]:
    """``"state.messages[*].id"`` as segments: keys, indexes, ``*`` and ``**``."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValueError(f"an ignore pattern is a non-empty path string, got {pattern!r}")
    segments: list[str | int] = []
    position = 0
    while position < len(pattern):
        found = _SEGMENT.match(pattern, position)
        if found is None or (position == 0 and pattern.startswith(".")):
            raise ValueError(
                f"ignore pattern {pattern!r} cannot be read at character {position + 1}: write "
                'a path as divergences print it (messages[0].content, state["a key"]), with * '
                "for any one key or item and ** for any run of them"
            )
        key, item = found.group(1), found.group(2)
        if key is not None:
            segments.append(key)
        elif item == "*":
            segments.append(_ANY)
        elif item.startswith('"'):
            segments.append(json.loads(item))
        else:
            segments.append(int(item))
        position = found.end()
    while segments and segments[-1] == _DEEP:
        segments.pop()  # "a.**" ignores a whole, as "a" does
    if not segments:
        raise ValueError(f"ignore pattern {pattern!r} names no path; name the key to ignore")
    return (_DEEP, *segments)  # a pattern matches a path that ends with it


def _advance(
    states: list[tuple[tuple[str | int, ...], int]],
    step: str | int,
    patterns: tuple[tuple[str | int, ...], ...],
) -> tuple[list[tuple[tuple[str | int, ...], int]], bool]:
    """The pattern positions after one more path segment, and whether a pattern is complete."""
    ahead: list[tuple[tuple[str | int, ...], int]] = []
    done = False
    for pattern, at in states:
        for nxt in _steps(pattern, at, step):
            if nxt == len(pattern):
                done = True
            else:
                ahead.append((pattern, nxt))
    return ahead, done


def _steps(pattern: tuple[str | int, ...], at: int, step: str | int) -> list[int]:
    """Where matching ``step`` at position ``at`` of ``pattern`` can lead."""
    found: list[int] = []
    while at < len(pattern) and pattern[at] == _DEEP:
        found.append(at)  # ** stays to take this segment too
        at += 1
    if at < len(pattern):
        want = pattern[at]
        if want in (_ANY, step):
            found.append(at + 1)
    return found


# ---- the diff ------------------------------------------------------------------------------


def path_diff(
    old: JsonValue,
    new: JsonValue,
    volatile: Volatile | None = None,
    *,
    root: str = "(input)",
    limit: int | None = None,
) -> list[str]:
    """What changed from ``old`` to ``new``, one ``path: old -> new`` line per changed path.

    Paths are written as divergences print them (``messages[1].content``; ``root`` names the
    whole value when it changed as a whole); values are JSON, cut to a readable length (two long
    strings shown from where they differ); ``(missing)`` stands for a key or item on one side
    only. What ``volatile`` names is left out of both sides first. The comparison is the
    replay's: a ``{"$repr": ...}`` marker matches anything and a cut string matches any string
    it starts. ``[]`` when nothing differs. With ``limit``, at most ``limit`` paths are listed
    and one more line says how many were left out.
    """
    if volatile is not None:
        old, new = volatile.strip(old), volatile.strip(new)
    lines: list[str] = []
    _diff(old, new, "", lines, root)
    if limit is not None and len(lines) > limit:
        lines[limit:] = [f"... and {len(lines) - limit} more changed paths"]
    return lines


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENTIFIER.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _diff(recorded: object, actual: object, path: str, out: list[str], root: str) -> None:
    if recorded is not _MISSING and actual is not _MISSING and _same(recorded, actual):  # type: ignore[arg-type]
        return
    if isinstance(recorded, dict) and isinstance(actual, dict):
        for key in recorded:
            _diff(recorded[key], actual.get(key, _MISSING), _child(path, key), out, root)
        for key in actual:
            if key not in recorded:
                _diff(_MISSING, actual[key], _child(path, key), out, root)
        return
    if isinstance(recorded, list) and isinstance(actual, list):
        for position in range(max(len(recorded), len(actual))):
            old = recorded[position] if position < len(recorded) else _MISSING
            new = actual[position] if position < len(actual) else _MISSING
            _diff(old, new, _child(path, position), out, root)
        return
    old_text, new_text = _pair(recorded, actual)
    out.append(f"{path or root}: {old_text} -> {new_text}")


def _pair(recorded: object, actual: object) -> tuple[str, str]:
    """Both values as short JSON text; two long strings are shown from where they differ."""
    if isinstance(recorded, str) and isinstance(actual, str):
        old, new = _text(recorded), _text(actual)
        if len(old) > _SHOWN or len(new) > _SHOWN:
            start = 0
            for old_char, new_char in zip(old, new):  # noqa: B905 (stops at the shorter)
                if old_char != new_char:
                    break
                start += 1
            start = max(0, start - _SHOWN // 3)
            return _window(old, start), _window(new, start)
        return old, new
    return _show(recorded), _show(actual)


def _text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _window(text: str, start: int) -> str:
    shown = text[start : start + _SHOWN]
    return ("…" if start else "") + shown + ("…" if start + _SHOWN < len(text) else "")


def _show(value: object) -> str:
    if value is _MISSING:
        return "(missing)"
    text = _text(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


# ---- divergences found at the end of a replay ------------------------------------------------


def unused(name: str, index: int, envelope: Envelope, *, expected: bool) -> Divergence:
    """A recording of ``name`` (invocation ``index``) that no call used."""
    return Divergence(
        name, index, "unused", f"recorded input: {_show(recorded_input(envelope))}", expected
    )


def connection(
    host: str, under: str | None, made: int, refused: bool, names: Iterable[str] = ()
) -> Divergence:
    """A connection to ``host`` (``host:port``) made ``made`` times under the boundary labelled
    ``under`` (``None``: outside any boundary) that the plan does not run; ``refused``: the
    replay refused it (``network="block"``, or a strict replay); ``names``: the host names the
    address was looked up as."""
    times = "once" if made == 1 else f"{made} times"
    what = "refused" if refused else "let through (network='report')"
    known = ", ".join(names)
    diff = f"{what}, {times}" + (f"; the address of {known}" if known else "")
    return Divergence(host, None, "network", diff, under=under)


def unmatched_entry(entry: str, name: str, n: int | None, known: Iterable[str]) -> Divergence:
    """A plan entry (``entry`` as written) that matched no call and no recording."""
    names = sorted(set(known))
    if name in names:
        what = f"there was no call {n} of {name!r} and no recording of it"
    else:
        what = f"no boundary named {name!r} was called or recorded"
        close = difflib.get_close_matches(name, names, n=1)
        if close:
            what += f" (did you mean {close[0]!r}?)"
    shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    return Divergence(
        name,
        n,
        "plan",
        f"the plan entry {entry} matched no call: {what}; the boundaries seen are "
        f"{shown or 'none'}",
    )


def report(
    divergences: Iterable[Divergence], what: str, hint: str = "", spelling: Spelling | None = None
) -> str:
    """``<what> diverged from its recording in N places (<hint>):`` and each one, numbered, its
    advice spelt for where the report is printed (``spelling``; by default the one
    ``advice_spelt`` set, else ``python``)."""
    listed = list(divergences)
    places = "1 place" if len(listed) == 1 else f"{len(listed)} places"
    lines = [
        f"{what} diverged from its recording in {places}" + (f" ({hint})" if hint else "") + ":"
    ]
    for number, divergence in enumerate(listed, 1):
        lines.append(f"{number}. {divergence.describe(spelling)}")
    return "\n".join(lines)
