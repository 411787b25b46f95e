"""The recorded call tree of one request span: who called whom, and how each call is numbered.

A span's envelopes form a tree: each envelope's ``parent_envelope_id`` is the boundary that was
running when it started (``None``, or an id outside the span, for the span's top level). Replay
follows this tree (``replay/run.py``): a call is identified by its place in it, the n-th call of
its name *within its parent call*, and a call run live has its children served from that same
call's recorded children, never another branch's.

What users see stays the span-wide numbering ``chronicle show`` prints and the recording stores
(``chronicle.invocation_index``): ``planner#2`` is the second ``planner`` the span started,
whichever parent called it. ``RecordedTree`` keeps both: ``children`` for matching and
``index`` for naming.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from agentplane_primitives.models import Envelope

from chronicle import wire

TOP = ""
"""The parent id of the span's top level (no boundary was running)."""

_NONE: dict[str, list[Envelope]] = {}
T = TypeVar("T")


def in_call_order(
    envelopes: Iterable[object], call: Callable[[Envelope, str, int, str | None], T]
) -> list[T] | None:
    """``call(envelope, name, n, parent)`` for each envelope, in one pass over them, when they
    are envelope models as recorded, saved and served: all of one span, in call order
    (``chronicle.sequence`` never decreasing), the calls of each name numbered upwards, no id
    repeated, and each parent in the span read before its children. ``n`` is the call's
    invocation index and ``parent`` its parent's label (``None`` at the top level), as
    ``RecordedTree`` gives them; ``name`` is ``envelope.name``, one string object per name.
    ``None`` when the envelopes are not so (then ``RecordedTree`` places them), and the pass
    stops at the first envelope that says so.

    No envelope is held past its own ``call``: ``envelopes`` may be an iterator that makes
    each one as it is asked for, so that only what ``call`` returns is kept."""
    # Every further pass over a span too large for the CPU caches misses again on each envelope
    # (docs/benchmarks.md, "8b, one pass over the envelopes"): all is checked as it is read.
    made: list[T] = []
    # Each envelope's name and number, for its children: in two dicts of what the envelope
    # holds already, as a tuple a call would be one more object for the collector to count.
    seen: dict[str, str] = {}
    numbers: dict[str, int] = {}
    names: dict[str, str] = {}
    highest: dict[str, int] = {}
    labels: dict[str | None, str | None] = {None: None}
    unseen: list[str] = []  # parents not read before their child: outside the span, or damage
    last = -(1 << 62)
    span: str | None = None
    for envelope in envelopes:
        if not isinstance(envelope, Envelope):
            return None
        if span is None:
            span = envelope.span_id
        elif envelope.span_id != span:
            return None
        sequence, n = wire.sequence_of(envelope), wire.invocation_of(envelope)
        eid = envelope.envelope_id
        if sequence is None or sequence < last or n is None or eid in seen:
            return None
        last = sequence
        name = envelope.name
        name = names.setdefault(name, name)
        if n <= highest.get(name, 0):
            return None
        highest[name] = n
        recorded = envelope.parent_envelope_id
        if recorded in labels:
            parent = labels[recorded]
        else:
            assert recorded is not None
            above = seen.get(recorded)
            if above is None:
                unseen.append(recorded)
                parent = None
            else:
                parent = f"{above}#{numbers[recorded]}"
            labels[recorded] = parent
        seen[eid] = name
        numbers[eid] = n
        made.append(call(envelope, name, n, parent))
    if any(recorded in seen for recorded in unseen):
        return None
    return made


class RecordedTree:
    """The envelopes of one span, as a call tree, in call order (immutable once built).

    ``index[envelope_id]`` is the envelope's span-wide invocation index (recorded, or counted in
    call order when the recording has none or repeats one); ``by_name[name][n]`` is the envelope
    of ``name#n``; ``children(parent_id)`` its recorded children by name, each list in call order.
    """

    __slots__ = ("_children", "_parent", "by_id", "by_name", "envelopes", "index")

    def __init__(self, envelopes: Iterable[Envelope]) -> None:
        self.envelopes: list[Envelope] = wire.call_order(envelopes)
        self.by_id: dict[str, Envelope] = {e.envelope_id: e for e in self.envelopes}
        self.by_name: dict[str, dict[int, Envelope]] = {}
        self.index: dict[str, int] = {}
        self._parent: dict[str, str] = {}
        self._children: dict[str, dict[str, list[Envelope]]] = {}
        for envelope in self.envelopes:
            calls = self.by_name.setdefault(envelope.name, {})
            n = wire.invocation_of(envelope)
            if n is None or n in calls:
                n = max(calls, default=0) + 1  # recorded without numbering: count in call order
            calls[n] = envelope
            self.index[envelope.envelope_id] = n
            parent = envelope.parent_envelope_id
            parent = parent if parent is not None and parent in self.by_id else TOP
            self._parent[envelope.envelope_id] = parent
            self._children.setdefault(parent, {}).setdefault(envelope.name, []).append(envelope)

    def children(self, parent_id: str) -> dict[str, list[Envelope]]:
        """The recorded children of ``parent_id`` (``TOP``: the top level), by name, in order."""
        return self._children.get(parent_id, _NONE)

    def parent_id(self, envelope_id: str) -> str:
        """The id of the envelope's recorded parent call, ``TOP`` at the top level."""
        return self._parent.get(envelope_id, TOP)

    def ancestors(self, envelope_id: str) -> Iterator[str]:
        """The ids of the calls enclosing ``envelope_id``, nearest first."""
        parent = self.parent_id(envelope_id)
        while parent != TOP:
            yield parent
            parent = self.parent_id(parent)

    def descendants(self, envelope_id: str) -> Iterator[str]:
        """The ids of every call recorded inside ``envelope_id``, depth first."""
        for calls in self.children(envelope_id).values():
            for child in calls:
                yield child.envelope_id
                yield from self.descendants(child.envelope_id)

    def label(self, envelope_id: str) -> str:
        """The call as users see it: ``researcher#2``, or ``the span's top level`` for ``TOP``."""
        if envelope_id == TOP:
            return "the span's top level"
        envelope = self.by_id[envelope_id]
        return f"{envelope.name}#{self.index[envelope_id]}"

    def count(self, name: str) -> int:
        """How many calls of ``name`` the span recorded (its highest invocation index)."""
        return max(self.by_name.get(name, _NONE_INDEXED), default=0)


_NONE_INDEXED: dict[int, Envelope] = {}


class Scope:
    """Where the calls made inside one parent call are matched: that call's recorded children.

    ``run`` is the replay the scope belongs to (compared by identity only: code of another
    replay's span finds its own scope in the context, never this one). ``parent`` is the
    recorded call's envelope id, ``TOP`` for the span's top level, or ``None`` for a live call
    with no recording (nothing under it was recorded). ``taken`` counts the calls of each name
    made so far inside it (``match="order"``). ``live``: the plan runs this call (or one it is
    inside) live by its own entry, so its body may reach the network; a call that runs only
    because it encloses a cut-point, or as the replay's entry, may not.
    """

    __slots__ = ("children", "label", "live", "parent", "run", "taken")

    def __init__(
        self, run: object, tree: RecordedTree, parent: str | None, label: str, live: bool = False
    ) -> None:
        self.run, self.parent, self.label, self.live = run, parent, label, live
        self.children = tree.children(parent) if parent is not None else _NONE
        self.taken: dict[str, int] = {}
