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

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from agentplane_primitives.models import Envelope

from chronicle import wire

TOP = ""
"""The parent id of the span's top level (no boundary was running)."""

_NONE: dict[str, list[Envelope]] = {}
T = TypeVar("T")


def in_call_order(
    envelopes: Sequence[object], call: Callable[[Envelope, str, int, str | None], T]
) -> list[T] | None:
    """``call(envelope, name, n, parent)`` for each envelope, in one pass over them, when they
    are envelope models as recorded, saved and served: all of one span, in call order
    (``chronicle.sequence`` never decreasing), the calls of each name numbered upwards, no id
    repeated, and each parent in the span read before its children. ``n`` is the call's
    invocation index and ``parent`` its parent's label (``None`` at the top level), as
    ``RecordedTree`` gives them; ``name`` is ``envelope.name``, one string object per name.
    ``None`` when the envelopes are not so (then ``CallKeys`` places them)."""
    made: list[T] = []
    seen: dict[str, Envelope] = {}
    names: dict[str, str] = {}
    highest: dict[str, int] = {}
    labels: dict[str | None, str | None] = {None: None}
    unseen: list[str] = []  # parents not read before their child: outside the span, or damage
    last = -(1 << 62)
    first = envelopes[0] if envelopes else None
    span = first.span_id if isinstance(first, Envelope) else None
    for envelope in envelopes:
        if not isinstance(envelope, Envelope) or envelope.span_id != span:
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
                parent = f"{above.name}#{wire.invocation_of(above)}"
            labels[recorded] = parent
        seen[eid] = envelope
        made.append(call(envelope, name, n, parent))
    if any(recorded in seen for recorded in unseen):
        return None
    return made


class CallKeys:
    """What a span's call tree is made of, read one envelope at a time (``add``): each call's
    sequence, id, name, recorded invocation index and parent.

    A reader that needs other fields of the same envelopes (the diff) reads them in the same
    pass, and ``shape()`` then places every call without touching an envelope again.
    """

    # Once a span outgrows the CPU caches, every pass over its envelopes misses again on each
    # one (docs/benchmarks.md, "8b, one pass over the envelopes"): so the names are kept as one
    # string per name, and a parent read before its child (call order) is resolved in ``add``.

    __slots__ = ("_at", "_keys", "_names")

    def __init__(self) -> None:
        self._keys: list[tuple[int | None, str, str, int | None, str | int | None]] = []
        """Per envelope read: sequence, id, name, invocation index, and the parent: the
        position of an envelope read before with its id, the id when none was yet, or None."""
        self._at: dict[str, int] = {}
        """Envelope id -> the position of the last envelope read with it."""
        self._names: dict[str, str] = {}

    def add(self, envelope: Envelope) -> None:
        """Read the next envelope's keys."""
        name = envelope.name
        name = self._names.setdefault(name, name)
        eid = envelope.envelope_id
        recorded = envelope.parent_envelope_id
        parent = None if recorded is None else self._at.get(recorded, recorded)
        self._at[eid] = len(self._keys)
        sequence, n = wire.sequence_of(envelope), wire.invocation_of(envelope)
        self._keys.append((sequence, eid, name, n, parent))

    def shape(self) -> Shape:
        """The calls read, placed in the tree: call order, numbering and parents."""
        keys = self._keys
        order = wire.start_order([key[0] for key in keys])
        place = [0] * len(keys)  # position read -> position in call order
        for position, at in enumerate(order):
            place[at] = position
        # A parent is the call with its id, the last in call order if the span repeats an id
        # (as a map of the calls by id, built in call order, has it).
        owner: dict[str, int] | None = None
        if len(self._at) < len(keys):
            owner = {keys[at][1]: position for position, at in enumerate(order)}
        shape = Shape(order)
        taken: dict[str, set[int]] = {}
        highest: dict[str, int] = {}
        for at in order:
            _, eid, name, n, parent = keys[at]
            numbers = taken.get(name)
            if numbers is None:
                numbers = taken[name] = set()
            if n is None or n in numbers:
                n = highest.get(name, 0) + 1  # recorded without numbering: count in call order
            numbers.add(n)
            if n > highest.get(name, 0):
                highest[name] = n
            if parent is None:
                up = -1
            elif owner is not None:
                up = owner.get(keys[parent][1] if isinstance(parent, int) else parent, -1)
            elif isinstance(parent, int):
                up = place[parent]
            else:
                found = self._at.get(parent)
                up = -1 if found is None else place[found]
            shape.ids.append(eid)
            shape.names.append(name)
            shape.index.append(n)
            shape.parent.append(up)
        if owner is not None:
            named = [owner[eid] for eid in shape.ids]
            shape.index_by_id = [shape.index[at] for at in named]
            shape.parent_by_id = [shape.parent[at] for at in named]
        return shape


class Shape:
    """A span's calls placed in its tree (``CallKeys.shape``).

    ``order`` lists the positions the envelopes were read at, in call order; the other lists
    follow call order: each call's id, name, span-wide invocation index (recorded, or counted in
    call order when the recording has none or repeats one), and its parent's position in call
    order (-1 at the span's top level: no parent, or one outside the span).

    ``index_by_id`` and ``parent_by_id`` are the same of the call each id names: ``index`` and
    ``parent`` themselves, unless the span repeats an id (a damaged recording), whose calls all
    take the last one's (as a map by id has it).
    """

    __slots__ = ("ids", "index", "index_by_id", "names", "order", "parent", "parent_by_id")

    def __init__(self, order: list[int]) -> None:
        self.order = order
        self.ids: list[str] = []
        self.names: list[str] = []
        self.index: list[int] = []
        self.parent: list[int] = []
        self.index_by_id = self.index
        self.parent_by_id = self.parent

    def label(self, position: int) -> str:
        """``name#n`` of the call at ``position`` in call order."""
        return f"{self.names[position]}#{self.index_by_id[position]}"


class RecordedTree:
    """The envelopes of one span, as a call tree, in call order (immutable once built).

    ``index[envelope_id]`` is the envelope's span-wide invocation index (recorded, or counted in
    call order when the recording has none or repeats one); ``by_name[name][n]`` is the envelope
    of ``name#n``; ``children(parent_id)`` its recorded children by name, each list in call order.
    """

    __slots__ = ("_children", "_parent", "by_id", "by_name", "envelopes", "index")

    def __init__(self, envelopes: Iterable[Envelope]) -> None:
        read = list(envelopes)
        keys = CallKeys()
        for envelope in read:
            keys.add(envelope)
        shape = keys.shape()
        self.envelopes: list[Envelope] = [read[at] for at in shape.order]
        self.by_id: dict[str, Envelope] = dict(zip(shape.ids, self.envelopes, strict=True))
        self.by_name: dict[str, dict[int, Envelope]] = {}
        self.index: dict[str, int] = {}
        self._parent: dict[str, str] = {}
        self._children: dict[str, dict[str, list[Envelope]]] = {}
        ids = shape.ids
        for envelope, eid, name, n, up in zip(
            self.envelopes, ids, shape.names, shape.index, shape.parent, strict=True
        ):
            self.by_name.setdefault(name, {})[n] = envelope
            self.index[eid] = n
            parent = ids[up] if up >= 0 else TOP
            self._parent[eid] = parent
            self._children.setdefault(parent, {}).setdefault(name, []).append(envelope)

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
