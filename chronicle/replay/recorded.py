"""Recorded JSON given back to code that expects objects: attribute access on dicts and lists.

``restore_plain(raw)`` turns a stubbed ``output.raw`` into ``RecordedDict``/``RecordedList``
(subclasses of ``dict`` and ``list``, so equality, indexing, ``json.dumps`` and ``isinstance``
checks for dict and list keep working) whose keys can also be read as attributes:
``resp.body.rows[0]``.
"""

from __future__ import annotations

from pydantic import JsonValue


class RecordedDict(dict[str, object]):
    """A recorded JSON object; ``d.key`` reads ``d["key"]``."""

    __slots__ = ()

    def __getattr__(self, name: str) -> object:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"the recorded object has no key {name!r} (keys: {', '.join(self) or 'none'})"
            ) from None


class RecordedList(list[object]):
    """A recorded JSON array whose items are restored the same way."""

    __slots__ = ()


def restore_plain(raw: JsonValue) -> object:
    """``raw`` with every dict and list made attribute-accessible (a new structure)."""
    if isinstance(raw, dict):
        return RecordedDict({key: restore_plain(value) for key, value in raw.items()})
    if isinstance(raw, list):
        return RecordedList(restore_plain(value) for value in raw)
    return raw
