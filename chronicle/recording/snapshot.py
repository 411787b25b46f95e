"""Snapshots: a captured value frozen exactly, at C speed, so its walk can wait.

A boundary call's capture (``recording/capture.py``) turns its arguments and its result into
redacted, bounded JSON. That walk is Python, and on the caller's thread it was most of what a
call cost beyond its span (docs/benchmarks.md, "Issue 31: the boundary's cost"). The walk does
not have to happen there: what has to happen at the call is taking the value as it is then,
before the agent changes it (``messages.append`` of the reply). ``snapshot`` freezes it, in C,
into one ``bytes`` object; the record keeps that (``wire.CallRecord.defer``), and the thread
that builds the envelope thaws it (``thaw``) and walks the copy (``CallRecord.settle``), with
the same walk, the same settings and the same result.

Only values that freeze exactly and cheaply qualify, decided in C as well:

- ``marshal.dumps`` accepts the value: it is made only of exact ``dict``, ``list``, ``tuple``,
  ``str``, ``int``, ``float``, ``bool``, ``None``, ``bytes``, ``set``, ``frozenset``,
  ``complex`` (no subclass, so no ``Enum``, no pydantic model, no user object: their conversion
  may run user code, which stays on the caller's thread), plus buffer objects and code objects;
- it is at most ``limit`` bytes as marshal writes it (so what waits in the queue is about what
  the walk would have kept, and a huge value is still cut at once, by the walk);
- ``pickle`` freezes it (a ``bytearray`` or a NumPy array thaws as itself, where marshal would
  make bytes of it; a ``memoryview`` or a code object does not pickle, and is walked at once).
  A buffer object's class is then met by the walk on the other thread: its ``repr``, or a codec
  registered for it, runs there (as does a codec registered for ``bytes``, ``set`` or
  ``complex``: codecs are meant to be pure functions).

The frozen form is one immutable ``bytes`` object: nothing the agent does later reaches it, it
holds about what it weighs (the queue's memory bound counts its length), and the caller's thread
allocates no copy of the value's objects (thawed on the worker instead, they took 2 of a
``tool`` call's 31 microseconds off the agent's thread: docs/benchmarks.md, "The snapshot,
frozen"). The thawed copy has the value's types, its shared and cyclic references, its dict
order and its floats bit for bit, so the walk finds what it would have found at the call. One
difference is allowed: a set whose items do not sort is stored in its iteration order
(``capture`` says so), and a copy of a set may iterate in another order.
"""

from __future__ import annotations

import marshal
import pickle

__all__ = ["snapshot", "thaw"]


def snapshot(value: object, limit: int) -> bytes | None:
    """``value`` frozen (``thaw`` gives back an exact copy), or ``None`` when it must be walked
    now (see the module docstring). Never raises; costs time linear in the value's size, in C."""
    try:
        written = len(marshal.dumps(value))  # type: ignore[arg-type]  # checked at run time
    except Exception:  # not exact builtins (ValueError), nested too deep, out of memory
        return None
    if written > limit:
        return None
    try:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:  # a memoryview, a code object, a buffer that refuses to pickle
        return None


def thaw(frozen: bytes) -> object:
    """An exact copy of the value ``snapshot`` froze into ``frozen`` (each call a new one)."""
    return pickle.loads(frozen)
