"""Reading a recording file as untrusted input: the one place every saved file is read.

``read_json(path)`` is how ``chronicle.replay(path)``, ``chronicle diff``, ``chronicle replay``,
``pytest --chronicle-corpus`` and the pytest marker read a file (through ``Incident.read`` and
``load_envelopes``). A corpus file may come from production, so the file is judged before it is
believed:

- only a regular file is read: a FIFO, a device, a socket or a folder (a link to one too, such as
  a link to ``/dev/zero``) is refused at once, from ``os.stat`` of the link's target and again
  from ``os.fstat`` of what was opened (opened non-blocking, so a FIFO swapped in between never
  blocks);
- a file larger than the ``max_file_bytes`` setting (256 MiB by default, the bound of a control
  plane answer) is refused before any of it is read, and no more than that is ever read;
- the bytes are decoded as UTF-8, strictly;
- the JSON may hold at most ``MAX_ITEMS`` values (counted before parsing, strings left out) and
  nest at most ``MAX_FILE_DEPTH`` levels (the parser's ``RecursionError`` on deeper text is
  caught, and a parsed value is walked without recursion).

Every refusal is a ``RecordingFileError`` (a ``ReplayError``, so a ``ChronicleError``) whose one
line names the file, what is wrong with it and what to do. Only a file that does not exist raises
``FileNotFoundError`` instead, as ``open()`` would, so callers can say how to make one.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from chronicle.errors import ReplayError

DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024
"""The default of the ``max_file_bytes`` setting (the bound of a control plane answer)."""

MAX_DEPTH = 200
"""Deepest nesting replay reads in an envelope: capture stores at most 64 levels of a value, so
anything deeper is a damaged or hostile recording, refused before any recursive code
(validation, comparison, rebuilding) meets it."""

MAX_FILE_DEPTH = MAX_DEPTH + 2
"""Deepest nesting of a whole file: an envelope sits two levels down (``{"envelopes": [...]}``)."""

MAX_ITEMS = 5_000_000
"""Most JSON values (objects, arrays, strings, numbers...) a file may hold. Chronicle's own
recordings hold far fewer (each payload is bounded by ``max_payload_bytes``); the bound keeps a
file of millions of tiny values (``[{},{},...]``, about 64 bytes of memory per 3 bytes of text)
from taking gigabytes while it is parsed."""

_CHUNK = 1 << 20
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_WHAT = "a recording is the JSON `chronicle save` or the pytest plugin writes"


class RecordingFileError(ReplayError):
    """A file that cannot be read as a recording; ``path`` is the file, the message one line
    naming it, what is wrong and what to do."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"replay: {path} {message}")
        self.path = path


_limit_source: Callable[[], int] | None = None


def use_limit_from(source: Callable[[], int]) -> None:
    """Read ``max_file_bytes`` from ``source`` (``chronicle.runtime`` sets it to the current
    configuration's setting when it is imported: it sits a layer above this package)."""
    global _limit_source
    _limit_source = source


def max_file_bytes() -> int:
    """The ``max_file_bytes`` setting of the current configuration (``configure(max_file_bytes=
    ...)``, ``CHRONICLE_MAX_FILE_BYTES``); the default when there is none."""
    source = _limit_source
    if source is None:
        return DEFAULT_MAX_FILE_BYTES
    try:
        return int(source())
    except Exception:  # a runtime without the setting (a stand-in in a test): the default
        return DEFAULT_MAX_FILE_BYTES


def _kind(mode: int) -> str | None:
    """What a file of ``mode`` is, when it is not a regular file."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def _check(path: Path, info: os.stat_result, limit: int) -> None:
    kind = _kind(info.st_mode)
    if kind is not None:
        link = ""
        if path.is_symlink():
            try:
                link = f"a link to {os.path.realpath(path)}, "
            except OSError:
                link = "a link, "
        raise RecordingFileError(
            path,
            f"is {link}{kind}, not a regular file, so it is not read; {_WHAT}: pass such a "
            "file, and remove this one from the corpus folder",
        )
    if info.st_size > limit:
        raise _too_large(path, f"holds {info.st_size} bytes", limit)


def _too_large(path: Path, holds: str, limit: int) -> RecordingFileError:
    return RecordingFileError(
        path,
        f"{holds}, over the {limit} bytes a recording may take (max_file_bytes), so it is not "
        "read; save one span's envelopes (chronicle save TRACE --span S), or raise "
        "max_file_bytes (CHRONICLE_MAX_FILE_BYTES) if you trust the file",
    )


def read_bytes(path: Path, limit: int | None = None) -> bytearray:
    """The bytes of the regular file ``path``, at most ``limit`` (``max_file_bytes()`` when
    ``None``), read into one buffer (no copy of it is made). Raises ``FileNotFoundError`` when
    there is no file, ``RecordingFileError`` for anything else that keeps it from being read
    (see the module docstring)."""
    limit = max_file_bytes() if limit is None else limit
    try:
        _check(path, os.stat(path), limit)  # the link's target, before anything is opened
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        handle = os.open(path, flags | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RecordingFileError(
            path, f"cannot be read ({exc.strerror}); check the path and its permissions"
        ) from None
    with open(handle, "rb", buffering=0, closefd=True) as opened:
        info = os.fstat(opened.fileno())
        _check(path, info, limit)  # what was opened: a file swapped since is judged too
        buffer = bytearray(min(info.st_size, limit) + 1)
        view, filled = memoryview(buffer), 0
        try:
            while True:
                if filled == len(buffer):  # grew since it was measured: read on, up to limit
                    if filled > limit:
                        raise _too_large(path, "grew while it was read", limit)
                    view.release()
                    buffer.extend(bytes(min(_CHUNK, limit + 1 - filled)))
                    view = memoryview(buffer)
                got = opened.readinto(view[filled:])
                if not got:
                    break
                filled += got
        except OSError as exc:
            raise RecordingFileError(
                path, f"cannot be read ({exc.strerror}); check the file"
            ) from None
        finally:
            view.release()
    if filled > limit:
        raise _too_large(path, "grew while it was read", limit)
    del buffer[filled:]
    return buffer


def count_items(data: bytes | bytearray) -> int:
    """How many JSON values ``data`` may hold, at most: each value after the first in an array
    or object follows a comma, and each array or object adds one. Commas and brackets inside
    strings are left out when the quick count (which counts them) is over ``MAX_ITEMS``."""
    quick = data.count(b",") + data.count(b"[") + data.count(b"{") + 1
    if quick <= MAX_ITEMS:
        return quick
    bare = _STRINGS.sub(b"", data)
    return bare.count(b",") + bare.count(b"[") + bare.count(b"{") + 1


def read_json(path: Path, limit: int | None = None) -> Any:
    """The JSON value in the file ``path``, read as untrusted input (see the module docstring).

    Raises ``FileNotFoundError`` when there is no file, and ``RecordingFileError`` (one line
    naming the file and what to do) when it is not a regular file, is larger than ``limit``
    (``max_file_bytes()`` when ``None``), is not UTF-8, is not JSON, holds more than
    ``MAX_ITEMS`` values or nests deeper than ``MAX_FILE_DEPTH``. Never lets a
    ``RecursionError`` through.
    """
    data = read_bytes(path, limit)
    items = count_items(data)
    if items > MAX_ITEMS:
        raise RecordingFileError(
            path,
            f"holds up to {items} JSON values, over the {MAX_ITEMS} a recording may hold, so it "
            f"is not parsed; {_WHAT}, each payload bounded by max_payload_bytes: record it again",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordingFileError(
            path,
            f"is not UTF-8 text ({exc.reason} at byte {exc.start}), so it is not a recording; "
            f"{_WHAT}: leave it out of the corpus, or save the recording again",
        ) from None
    del data
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordingFileError(
            path, f"is not JSON: {exc}; save the recording again (chronicle save)"
        ) from None
    except RecursionError:
        raise too_deep(path) from None
    except ValueError as exc:  # a number of more digits than Python converts, say
        raise RecordingFileError(
            path, f"is not JSON a recording holds ({exc}); save the recording again"
        ) from None
    if deeper_than(value, MAX_FILE_DEPTH):
        raise too_deep(path)
    return value


def too_deep(path: Path | None, what: str = "holds JSON") -> ReplayError:
    """The error of a recording nested deeper than ``MAX_DEPTH``: ``path`` (or the text
    ``what`` names, when there is no file) is damaged or hostile."""
    deeper = f"nested deeper than any recording ({MAX_DEPTH} levels; capture stores at most 64)"
    if path is None:
        return ReplayError(
            f"replay: {what} {deeper}, so the recording is damaged and nothing of it is "
            "replayed; record the request again, or pass the file the control plane's answer "
            "was saved to"
        )
    return RecordingFileError(
        path,
        f"{what} {deeper}, so it is damaged or not a recording, and nothing of it is replayed; "
        "record the request again (chronicle save TRACE_ID -o FILE)",
    )


def deeper_than(value: object, limit: int) -> bool:
    """Whether containers in ``value`` nest more than ``limit`` levels (a walk, not recursion)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
