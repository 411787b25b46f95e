"""Redaction: secrets never leave the process.

Every recorded string passes through a ``Redaction`` before it is sent anywhere (control plane and
OpenTelemetry attributes alike). A redactor is any ``str -> str`` callable; Chronicle's default one
masks common secret shapes, and users add their own in ``configure(redactors=[...])``.

What the default redactor masks, and how each is replaced (``[REDACTED:<kind>]`` everywhere):

=================  ===========================================================  ===============
kind               shape                                                        kept
=================  ===========================================================  ===============
``private_key``    a PEM ``-----BEGIN ... PRIVATE KEY-----`` block to its END   nothing
                   line (or to the end of the text, if it was cut off)
``anthropic_key``  ``sk-ant-`` and 20+ key characters                           nothing
``openai_key``     ``sk-proj-``/``sk-svcacct-``/``sk-admin-`` and 20+ key       nothing
                   characters, or ``sk-`` and 20+ letters and digits
``aws_access_key`` ``AKIA``/``ASIA`` and 16 capitals or digits                  nothing
``aws_secret_key`` the value after ``aws_secret_access_key=``,                  the label
                   ``SecretAccessKey":"`` and their spellings
``google_api_key`` ``AIza`` and 35 key characters                              nothing
``github_token``   ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` and 20+, or     nothing
                   ``github_pat_`` and 20+
``slack_token``    ``xoxb-``/``xoxp-``/``xoxa-``/``xoxr-``/``xoxs-``/``xoxe-``  nothing
                   and 10+
``bearer``         the token after ``Bearer`` (8+ token characters, with a      ``Bearer``
                   digit or inner punctuation, or 20+)
``basic_auth``     the credentials after ``Basic`` when they decode to          ``Basic``
                   ``user:password``
``jwt``            three base64url segments, the first starting ``eyJ``         nothing
``url_password``   the password in ``scheme://user:password@host``              everything else
``credential``     in JSON text, a string under a credential-named key          the key
                   (``"password": "..."``, also escaped as ``\"password\"``,
                   to the end of a cut text), or under a bare ``token`` or
                   ``auth`` when it reads as a token (``is_credential_value``);
                   a URL query parameter named like a credential
                   (``?api_key=...&token=...``)                                 the name
=================  ===========================================================  ===============

Secret shapes also match right after an escape (``\n`` in JSON text, ``%3D`` in a URL), in the
URL-decoded form of a text holding ``%XX`` escapes (masked in the text as it is), glued to the
word before them where the shape is unambiguous (``AKIA`` and ``AIza`` keys always; GitHub
tokens of exactly 36 characters; ``sk-ant-api03-``; OpenAI keys carrying ``T3BlbkFJ``; Slack
tokens with their numeric parts; JWTs whose second segment starts ``eyJ``; any ``sk-``,
``sk-proj-``, ``sk-svcacct-``, ``sk-admin-`` or ``sk-ant-`` key whose tail of 20+ characters
reads as random: a capital, a small letter, a digit and a run of 16+ letters and digits, which
``disk-proj-management`` has not), and a key prefix followed by a shorter tail when the text
ends there (a stream cut mid-key).

Otherwise secret shapes only match at a word start (``task-list`` does not contain an ``sk-``
key), and the minimum lengths keep ordinary prose, hex trace ids and UUIDs clear. Masking is
idempotent: a masked text passes through unchanged.

Cost: all shapes are one regular expression whose alternatives all start with a character that
is rare in prose (``-``, ``:``, ``_``, ``A``, ``B``, ``b``, ``J``, ``x``), so the engine tries a
match only at those positions. A text with no secret costs one C-speed scan, allocates nothing
and is returned as the very same object. Texts shorter than 12 characters (the shortest shape)
are not scanned unless they hold an ``@`` (a short URL password).
A text of 256 characters or more found clean is remembered (about 1M characters in all), so the
conversation an agent sends again on every model call is scanned once, not once per turn.

``Redaction.json`` also masks, as ``[REDACTED:credential]``, any string stored under a dict key
that names a credential (``password``, ``secret``, ``api_key``, ``client_secret``,
``access_token``, ``SecretAccessKey``, ...; see ``is_credential_key``), and under a bare
``token`` or ``auth`` a string that reads as a token (``is_credential_value``: not a model's
``{"token": "Hello"}``), so ``def login(user, password)`` never records the password. It does
so only when the default redactor is among its redactors: turning the defaults off turns this
off too.

A model's token lists (``logprobs``) spell its text again one token per string, where no string
redactor sees a secret whole: when the redaction of a call's output masked anything, its token
lists are stored as null (``without_token_lists``).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import logging
import re
import threading
from collections.abc import Callable, Iterable
from typing import NamedTuple, cast
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from pydantic import JsonValue

logger = logging.getLogger("chronicle")

Redactor = Callable[[str], str]
"""A function from text to the same text with secrets masked. It must not raise."""

FAILED = "[REDACTED:redactor_failed]"
"""What a string becomes when a redactor raised or returned something that is not a str."""

CREDENTIAL = "[REDACTED:credential]"
"""What a string stored under a credential-named key (or query parameter) becomes."""

# "Basic " and six base64 characters is the shortest shape, except a URL password ("a://:p@"),
# which cannot be there without an "@".
_MIN_SECRET_LENGTH = 12
SHORTEST_SECRET = _MIN_SECRET_LENGTH
"""No secret shape matches a text shorter than this without an ``@``: ``redact_secrets`` returns
such a text as it is, unscanned."""

# Characters a key or token is made of, for the "not preceded by one of these" word-start checks.
_KEY = "A-Za-z0-9_-"
_TOKEN = r"[A-Za-z0-9._~+/-]"
_BEARER_TOKEN = rf"(?=[A-Za-z]*(?:[0-9]|[._~+/-][A-Za-z0-9])|{_TOKEN}{{20}}){_TOKEN}{{8,}}=*"
# Around a label's ":" or "=": quotes (also escaped, as in JSON text inside JSON), spaces (also
# escaped), and the URL-encoded forms of both.
_QUOTE = r"""(?:\\?["']|%22|%27)?"""
_SPACE = r"(?:\s|\\[nrt]|%20)*"
_LABEL_SEPARATOR = rf"{_QUOTE}{_SPACE}(?:[:=]|%3[AaDd]){_SPACE}{_QUOTE}"
# Put before the character class of a word-start check: that character only counts as a word if
# it is not the letter of an escape (the "n" of "\n" in JSON text, the "D" of "%3D" in a URL), so
# a secret right after an escape is still at a word start.
_REAL = r"(?<!\\)(?<!%[0-9A-Fa-f])"


def _not_after(chars: str, literal: str) -> str:
    """A lookbehind at the end of ``literal`` (just matched): no word character glued before it."""
    return rf"(?<!{_REAL}[{chars}]{literal})"


# A key's tail that reads as random, checked where a key prefix is glued to a word: a capital, a
# small letter and a digit, and a run of 16 letters and digits (words joined by hyphens have no
# such run). Lookaheads at the glued prefix only: text without one never runs them. About 1 real
# key in 5,000 of the shortest kind (48 letters and digits) lacks a digit or a capital: it is
# then masked only at a word start.
_RANDOM = (
    rf"(?=[{_KEY}]*?[0-9])(?=[{_KEY}]*?[A-Z])(?=[{_KEY}]*?[a-z])"
    rf"(?=[{_KEY}]*?[A-Za-z0-9]{{16}})"
)


# A JSON key is checked as a credential name (``is_credential_key``) only if it ends with one of
# these words (any case): the last word of every name that check accepts.
_CREDENTIAL_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "key",
    "token",
    "auth",
    "authorization",
    "cookie",
)


_ESCAPED_QUOTE = '\\\\"'
"""``\\"`` in a regex: a quote escaped by a backslash (JSON text inside JSON text)."""


def _json_key_ends(quote: str) -> str:
    """Lookbehinds at a ``:`` just matched: the key closed by ``quote`` ends with such a word.

    The words' last letters are checked first, then each group's: most ``:`` fail at once
    (``https://``, prose)."""
    by_last: dict[str, list[str]] = {}
    for word in _CREDENTIAL_WORDS:
        by_last.setdefault(word[-1], []).append(word)
    letters = "".join(last + last.upper() for last in by_last)
    return (
        rf"(?<=[{letters}]{quote}:)(?:"
        + "|".join(
            rf"(?<=[{last}{last.upper()}]{quote}:)(?:"
            + "|".join(rf"(?<=(?i:{word}){quote}:)" for word in words)
            + ")"
            for last, words in by_last.items()
        )
        + ")"
    )


# A query parameter is checked as a credential name (``is_credential_parameter``) only if its
# name ends with one of these (any case): every name that rule accepts ends so (a test checks
# each listed credential name).
_PARAMETER_ENDS = "|".join(
    rf"(?<=(?i:{word})=)"
    for word in (
        "key",
        "token",
        "secret",
        "sig",
        "signature",
        "credential",
        "pass",
        "password",
        "passwd",
        "pwd",
        "auth",
        "code",
        "cookie",
        "passphrase",
        "authorization",
    )
)


class _Shape(NamedTuple):
    kind: str
    """Written into the marker: ``[REDACTED:<kind>]``."""
    pattern: str
    """Starts with a literal character; contains ``(?P<value>...)`` for a value shape."""
    back: int = 0
    """Characters of the secret before the match start (the match starts at a rarer anchor)."""
    confirm: str = ""
    """A check in Python before masking (``_confirmed``): ``basic``, ``json_key``,
    ``escaped_json_key`` or ``parameter``; empty for none."""


# Why the patterns look odd: all shapes are alternatives of one regex, and when every alternative
# starts with a literal character the regex engine scans for the set of those characters in C and
# tries a match only there. So each alternative starts at a character that is *rare in prose*
# (not the "s" of "sk-" or the "e" of "eyJ": those made clean text many times slower; the
# figure is in docs/benchmarks.md), and the secret's
# first characters are checked by a lookbehind and restored through ``back``. Word-start checks
# are lookbehinds too: ``-(?<![...]sk-)`` tests the character before the ``s``.
# A shape with a ``value`` group masks only that group and keeps the label around it.
# Each key shape also matches, where the shape is unambiguous, glued to the word before it
# (``xAKIA...``), and, when the text ends inside it (a stream cut mid-key), a shorter tail.
_SHAPES = (
    _Shape(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    # Glued: a real key's "api03-"/"admin01-" version part, or a tail that reads as random.
    _Shape(
        "anthropic_key",
        rf"-(?<=sk-)(?:{_not_after(_KEY, 'sk-')}|(?=ant-(?:api|admin)\d\d-)|(?=ant-){_RANDOM})"
        rf"ant-(?:[{_KEY}]{{20,}}|[{_KEY}]+\Z)",
        back=2,
    ),
    # Glued: "T3BlbkFJ" ("OpenAI" in base64), which real keys carry, or a tail that reads as
    # random: ``xyzsk-proj-<random>`` is a key, ``disk-proj-management`` is not.
    _Shape(
        "openai_key",
        rf"-(?<=sk-)(?:{_not_after(_KEY, 'sk-')}|(?=[{_KEY}]*T3BlbkFJ)|{_RANDOM})"
        rf"(?:(?:proj|svcacct|admin)-(?:[{_KEY}]{{20,}}|[{_KEY}]+\Z)"
        rf"|[A-Za-z0-9]{{20,}}[{_KEY}]*|[A-Za-z0-9]{{12,}}\Z)",
        back=2,
    ),
    # Glued: always (exactly 16 capitals or digits, then no letter or digit). AKIA and ASIA are
    # one alternative: each alternative costs a little at every candidate position of any text.
    _Shape(
        "aws_access_key",
        rf"A[KS]IA(?:[A-Z0-9]{{16}}(?![A-Za-z0-9])"
        rf"|{_not_after('A-Za-z0-9', 'A[KS]IA')}[A-Z0-9]{{8,15}}\Z)",
    ),
    # The label's start varies (aws_secret_access_key, secret_access_key, SecretAccessKey), so
    # the match starts in its middle and a lookbehind checks the word before.
    _Shape(
        "aws_secret_key",
        rf"_access_key(?<=[Ss]ecret_access_key){_LABEL_SEPARATOR}(?P<value>[A-Za-z0-9/+=]{{16,}})",
    ),
    _Shape(
        "aws_secret_key",
        rf"_ACCESS_KEY(?<=SECRET_ACCESS_KEY){_LABEL_SEPARATOR}(?P<value>[A-Za-z0-9/+=]{{16,}})",
    ),
    _Shape(
        "aws_secret_key",
        rf"AccessKey(?<=[Ss]ecretAccessKey){_LABEL_SEPARATOR}(?P<value>[A-Za-z0-9/+=]{{16,}})",
    ),
    # Glued: exactly the 36 characters of a real token.
    _Shape(
        "github_token",
        rf"_(?<=gh[pousr]_)(?:{_not_after('A-Za-z0-9_', 'gh[pousr]_')}"
        r"(?:[A-Za-z0-9]{20,}|[A-Za-z0-9]{4,}\Z)|[A-Za-z0-9]{36}(?![A-Za-z0-9]))",
        back=3,
    ),
    _Shape(
        "github_token",
        rf"_(?<=github_pat_)(?:{_not_after('A-Za-z0-9_', 'github_pat_')}"
        r"(?:[A-Za-z0-9_]{20,}|[A-Za-z0-9_]{4,}\Z)|[A-Za-z0-9]{22}_[A-Za-z0-9]{59})",
        back=10,
    ),
    # Glued: always (exactly 35 key characters, then none).
    _Shape(
        "google_api_key",
        rf"AIza(?:[{_KEY}]{{35}}(?![{_KEY}])|{_not_after(_KEY, 'AIza')}[{_KEY}]{{8,34}}\Z)",
    ),
    # Glued: a real token's numeric team and user parts.
    _Shape(
        "slack_token",
        rf"xox(?:{_not_after('A-Za-z0-9', 'xox')}[abeoprs]-"
        r"(?:[A-Za-z0-9-]{10,}|[A-Za-z0-9-]{4,}\Z)|[abeoprs]-\d{6,}-[A-Za-z0-9-]{10,})",
    ),
    # A bearer token has a digit or inner punctuation, or is long: "Bearer instruments." is prose.
    *(
        _Shape("bearer", rf"{word}{_not_after('A-Za-z0-9_', word)}\s+(?P<value>{_BEARER_TOKEN})")
        for word in ("Bearer", "bearer", "BEARER")
    ),
    # Masked only when the value decodes to user:password (see ``_is_basic_credentials``).
    *(
        _Shape(
            "basic_auth",
            rf"{word}{_not_after('A-Za-z0-9_', word)}\s+(?P<value>[A-Za-z0-9+/]{{6,}}={{0,2}})"
            r"(?![A-Za-z0-9+/=])",
            confirm="basic",
        )
        for word in ("Basic", "basic", "BASIC")
    ),
    # Glued: the second segment starts "eyJ" too (both are JSON objects).
    _Shape(
        "jwt",
        rf"J(?<=eyJ)(?:{_not_after(_KEY, 'eyJ')}[{_KEY}]{{8,}}\.[{_KEY}]{{8,}}\."
        rf"|[{_KEY}]{{8,}}\.eyJ[{_KEY}]{{5,}}\.)[{_KEY}]*",
        back=2,
    ),
    # The password runs to the last "@" before the host, so an unescaped "@" in it is covered.
    _Shape("url_password", r"://(?<=[A-Za-z0-9+.-]://)[^\s:/?#@]*:(?P<value>[^\s/?#]+)(?=@)"),
    # JSON text (tool-call arguments, a tool result sent as text, JSON inside JSON text): a string
    # under a credential-named key, to its closing quote or the end of a cut text.
    _Shape(
        "credential",
        ":" + _json_key_ends('"') + r'\s*"(?P<value>(?:[^"\\]|\\.)*)(?:"|\\?\Z)',
        confirm="json_key",
    ),
    _Shape(
        "credential",
        ":"
        + _json_key_ends(_ESCAPED_QUOTE)
        + r'\s*\\"(?P<value>(?:[^"\\]|\\\\\\?.)*)(?:\\"|\\?\Z)',
        confirm="escaped_json_key",
    ),
    # A query parameter named like a credential (``?api_key=...&token=...``) in any text. Two
    # shapes, not one starting with ``[?&]``: a class first turns the first-character scan off.
    *(
        _Shape(
            "credential",
            rf"{start}(?P<name>[\w.%\[\]-]{{1,64}}+)=(?<=[yYnNtTgGeElLsSdDhH]=)(?:{_PARAMETER_ENDS})"
            r"(?P<value>[^&#\s\"'<>\\]+)",
            confirm="parameter",
        )
        for start in (r"\?", "&")
    ),
    # Not a secret: a URL escape, which has the text scanned URL-decoded too (``_encoded_spans``).
    # A shape of its own, so a text without one costs no second scan to find that out.
    _Shape("", r"%[0-9A-Fa-f]{2}", confirm="escape"),
)


def _compile(
    shapes: Iterable[_Shape],
) -> tuple[re.Pattern[str], dict[str, tuple[_Shape, str | None, str | None]]]:
    """All shapes as one regex, and each end-group name -> (shape, value group, name group).

    Each alternative gets an empty group ``(?P<sN>)`` at its *end*, so ``match.lastgroup`` (the
    group closed last) names the shape that matched; a group at the start would hide the literal
    from the engine's first-character set. Value and name groups are renamed ``vN`` and ``nN`` to
    be unique.
    """
    groups: dict[str, tuple[_Shape, str | None, str | None]] = {}
    parts: list[str] = []
    for index, shape in enumerate(shapes):
        pattern = shape.pattern
        value = name = None
        if "(?P<value>" in pattern:
            value = f"v{index}"
            pattern = pattern.replace("(?P<value>", f"(?P<{value}>")
        if "(?P<name>" in pattern:
            name = f"n{index}"
            pattern = pattern.replace("(?P<name>", f"(?P<{name}>")
        parts.append(f"{pattern}(?P<s{index}>)")
        groups[f"s{index}"] = (shape, value, name)
    return re.compile("|".join(parts)), groups


_SECRETS, _GROUPS = _compile(_SHAPES)

_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _is_basic_credentials(text: str) -> bool:
    """Whether ``text`` is base64 of ``user:password`` (and not a word like ``understanding``)."""
    try:
        decoded = base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


def _json_key(text: str, colon: int, quote: str) -> str:
    """The JSON key closed by ``quote`` just before ``text[colon]`` (at most 64 characters)."""
    end = colon - len(quote)
    start = text.rfind(quote, max(end - 64 - len(quote), 0), end)
    return text[start + len(quote) : end] if start >= 0 else ""


def _confirmed(shape: _Shape, match: re.Match[str], value: str | None, name: str | None) -> bool:
    """Whether a match of ``shape`` is a secret (the checks a regex cannot make)."""
    check = shape.confirm
    if not check:
        return True
    found = match.group(value) if value is not None else ""
    if check == "basic":
        return _is_basic_credentials(found)
    if not found or found.startswith("[REDACTED:") or found == "***":
        return False  # nothing to mask, or masked already
    if check == "parameter":
        return name is not None and is_credential_parameter(match.group(name))
    text, colon = match.string, match.start()
    quote = '"' if check == "json_key" else '\\"'
    return is_credential_value(_json_key(text, colon, quote).replace("\\", ""), found)


def _spans(text: str, start: int) -> tuple[list[tuple[int, int, str]], bool]:
    """Where ``text`` holds secrets, from ``start`` on: ``(start, end, kind)`` in order, and
    whether it holds a URL escape (``%XX``).

    A match a Python check rejects is searched again one character on, so it hides nothing that
    starts inside it (``{"key": "sk-..."}``: the key name is no credential, its value is a key).
    """
    found: list[tuple[int, int, str]] = []
    escaped = False
    search = _SECRETS.search
    match = search(text, start)
    while match is not None:
        group = match.lastgroup
        if group is None:  # every alternative ends with its group; kept for the type checker
            break
        shape, value, name = _GROUPS[group]
        if shape.confirm == "escape":
            escaped = True
        elif not _confirmed(shape, match, value, name):
            match = search(text, match.start() + 1)
            continue
        elif value is None:
            found.append((match.start() - shape.back, match.end(), shape.kind))
        else:
            found.append((match.start(value), match.end(value), shape.kind))
        match = search(text, max(match.end(), match.start() + 1))
    return found, escaped


def _encoded_spans(text: str) -> list[tuple[int, int, str]]:
    """Secrets in the URL-decoded form of ``text``, as spans of ``text`` itself.

    Each ``%XX`` escape is decoded to one character (secrets are ASCII), so a decoded position
    maps back by counting the escapes before it.
    """
    pieces: list[str] = []
    escapes: list[int] = []  # decoded position of each escape, in order
    done = 0
    decoded_length = 0
    for escape in _ESCAPE.finditer(text):
        at = escape.start()
        pieces.append(text[done:at])
        decoded_length += at - done
        escapes.append(decoded_length)
        pieces.append(chr(int(text[at + 1 : at + 3], 16)))
        decoded_length += 1
        done = at + 3
    pieces.append(text[done:])
    decoded = "".join(pieces)

    def original(position: int) -> int:
        # Each escape before ``position`` (for an end: each it covers) took two more characters.
        return position + 2 * bisect.bisect_left(escapes, position)

    spans, _ = _spans(decoded, 0)  # an escape of an escape ("%253D") is not decoded twice
    return [(original(start), original(end), kind) for start, end, kind in spans]


def _masked(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with each span replaced by its marker; overlaps go to the earlier span."""
    pieces: list[str] = []
    done = 0  # text[:done] is already in ``pieces``
    for start, end, kind in sorted(spans):
        if end <= done:
            continue
        start = max(start, done)  # ``back`` never reaches into an earlier mask
        pieces.append(text[done:start])
        pieces.append(f"[REDACTED:{kind}]")
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


REMEMBER_FROM = 256
"""Texts at least this long that hold no secret are remembered, and not scanned again."""

REMEMBER_CHARS = 1 << 20
"""How many characters of clean texts are remembered at most; when full, it starts over."""

_clean: dict[str, None] = {}
_clean_chars = 0


def _remember_clean(text: str) -> None:
    """Remember a long text that holds no secret (see ``redact_secrets``)."""
    global _clean_chars
    if _clean_chars + len(text) > REMEMBER_CHARS:
        _clean.clear()  # a rare full start over: cheaper than tracking what was used last
        _clean_chars = 0
        if len(text) > REMEMBER_CHARS:
            return
    _clean[text] = None
    _clean_chars += len(text)


def redact_secrets(text: str) -> str:
    """``text`` with every secret shape in the table above replaced by ``[REDACTED:<kind>]``.

    Returns ``text`` itself (the same object) when it holds no secret. Never raises for a str.

    A text of ``REMEMBER_FROM`` characters or more found clean is remembered (up to
    ``REMEMBER_CHARS`` characters in all, by value: the result for equal texts is the same), so
    the same text is not scanned again: an agent sends its whole conversation again on every
    model call, and each message is then scanned once instead of once per turn. A text seen for
    the first time pays one hash beside the scan (about a tenth of it).
    """
    if len(text) < _MIN_SECRET_LENGTH and "@" not in text:
        return text  # dict keys, roles, ids: most strings are this short
    remember = len(text) >= REMEMBER_FROM and type(text) is str  # a subclass may redefine ==
    if remember and text in _clean:
        return text
    first = _SECRETS.search(text)
    if first is None:  # the common case: one scan, no iterator, no copies
        if remember:
            _remember_clean(text)
        return text
    # From the first hit on, so the clean head is not scanned twice (lookbehinds still see it).
    spans, escaped = _spans(text, first.start())
    if escaped:  # URL-encoded text is scanned decoded too: "%3Dsk-proj-..." hides nothing
        spans.extend(_encoded_spans(text))
    if not spans:
        return text
    return _masked(text, spans)


TOKEN_LISTS = frozenset({"logprobs", "logprobsResult", "logprobs_result"})
"""Keys of a model output's token lists (OpenAI chat, completions and responses; Gemini)."""


def without_token_lists(value: JsonValue) -> JsonValue:
    """``value`` (an output's JSON form, changed in place) with every token list set to null.

    A model's token lists (``logprobs``) hold its text again, one token per string: a secret
    masked in the text stays there in pieces no string redactor sees whole. So once the
    redaction of an output masked anything, they go (every SDK model types them optional).
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TOKEN_LISTS:
                value[key] = None
            elif isinstance(item, (dict, list)):
                without_token_lists(item)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                without_token_lists(item)
    return value


def default_redactors() -> list[Redactor]:
    """Chronicle's default redactors, a fresh list (append your own to it freely).

    All secret shapes live in the one redactor, ``redact_secrets``, so a clean text costs one
    scan rather than one per shape.
    """
    return [redact_secrets]


# Credential key names, compared lowercased and without "-", "_" or spaces.
_CREDENTIAL_NAMES = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "clientsecret",
        "secretkey",
        "apikey",
        "xapikey",
        "apitoken",
        "accesstoken",
        "refreshtoken",
        "idtoken",
        "authtoken",
        "bearertoken",
        "sessiontoken",
        "awssessiontoken",
        "secretaccesskey",
        "awssecretaccesskey",
        "privatekey",
        "authorization",
        "proxyauthorization",
        "cookie",
        "setcookie",
    }
)
# Suffixes that make a longer key a credential too (``db_password``, ``openai_api_key``).
_CREDENTIAL_SUFFIXES = ("password", "passwd", "apikey", "secret", "secretkey", "accesstoken")


# Bare names whose value is masked when it reads as a token (``is_credential_value``): a model's
# token lists hold ``{"token": "Hello", ...}``, a config ``{"auth": "none"}``.
_TOKEN_NAMES = frozenset({"token", "auth"})
_TOKEN_PUNCTUATION = frozenset("-_.~+/=:")


@functools.lru_cache(maxsize=4096)  # dict keys repeat endlessly ("role", "content", ...)
def is_credential_key(key: str) -> bool:
    """Whether a JSON key names a credential, so that a string stored under it is masked whole.

    Deliberately narrow: ``token`` alone (a logprobs entry), ``key`` or ``max_tokens`` are not;
    a bare ``token`` or ``auth`` masks a value that reads as one (``is_credential_value``).
    """
    name = key.lower().replace("-", "").replace("_", "").replace(" ", "")
    return name in _CREDENTIAL_NAMES or name.endswith(_CREDENTIAL_SUFFIXES)


@functools.lru_cache(maxsize=4096)
def may_name_credential(key: str) -> bool:
    """Whether a string under ``key`` may be masked as a credential, by its name alone
    (``is_credential_key``) or by its value too (a bare ``token`` or ``auth``): a key for which
    this is false never masks its value, so a walk may remember it as plain."""
    if is_credential_key(key):
        return True
    return key.lower().replace("-", "").replace("_", "").replace(" ", "") in _TOKEN_NAMES


def is_credential_value(key: str, value: str) -> bool:
    """Whether the string ``value`` stored under the dict or JSON key ``key`` is masked whole
    as a credential: ``key`` names one (``is_credential_key``: ``password``, ``secret``,
    ``access_token``, ...), or it is a bare ``token`` or ``auth`` (any case, ``_``/``-``
    ignored) and ``value`` reads as a token, not a word: 8 or more characters without a space,
    holding a digit or one of ``-_.~+/=:``, or 16 or more (``{"token": "Hello"}`` in a model's
    token list and ``{"auth": "none"}`` stay). Empty values are never masked."""
    if not value:
        return False
    if is_credential_key(key):
        return True
    if len(value) < 8 or not may_name_credential(key) or any(c.isspace() for c in value):
        return False  # the length first: a model's tokens are short
    return (
        len(value) >= 16
        or any(c.isdigit() for c in value)
        or any(c in _TOKEN_PUNCTUATION for c in value[1:-1])
    )


_SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "anthropic-api-key",
        "openai-api-key",
    }
)
_SECRET_HEADER_PARTS = (
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "apikey",
    "authorization",
    "cookie",
    "credential",
)


def is_secret_header(name: str) -> bool:
    """Whether an HTTP header of this name carries a credential (its value must not be recorded).

    Case-insensitive; ``_`` counts as ``-`` (``X_API_KEY`` as seen in WSGI environments).
    """
    normal = name.strip().lower().replace("_", "-")
    return normal in _SECRET_HEADERS or any(part in normal for part in _SECRET_HEADER_PARTS)


_SECRET_QUERY_NAMES = frozenset(
    {"key", "sig", "signature", "auth", "pass", "pwd", "code"}
    | {"x-amz-signature", "x-goog-signature"}
)


def safe_url(url: str) -> str:
    """``url`` as it may appear in a log line or an error message: with no secret in it.

    User name and password are replaced by ``***``; a query parameter named like a credential
    (``is_credential_parameter``: ``api_key``, ``token``, ``sig``, ``X-Amz-Signature``, ...)
    keeps its name and loses its value; then every secret shape ``redact_secrets`` knows is
    masked. Never raises.
    """
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rpartition("@")[2]
        query = "&".join(_safe_query_item(item) for item in parts.query.split("&"))
        url = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:  # not a URL at all: the secret shapes below still apply
        pass
    return redact_secrets(url)


def _safe_query_item(item: str) -> str:
    name, equals, value = item.partition("=")
    if equals and value and is_credential_parameter(name):
        return f"{name}=***"
    return item


@functools.lru_cache(maxsize=1024)
def is_credential_parameter(name: str) -> bool:
    """Whether a URL query parameter of this name carries a credential (``api_key``, ``token``,
    ``access_token``, ``sig``, ``X-Amz-Signature``, ``code``, ...), so that ``redact_secrets``
    masks its value in any text. URL-decoded and case-insensitive. Counts (``max_tokens``) are
    not credentials."""
    normal = unquote_plus(name).strip().lower().replace("_", "-")
    if normal.endswith("tokens"):
        return False
    return (
        normal in _SECRET_QUERY_NAMES
        or normal == "token"
        or is_secret_header(normal)
        or is_credential_key(normal)
    )


def public_url(url: object) -> str | None:
    """``url`` with no user info, query or fragment, no trailing slash, secrets redacted.

    ``None`` when it is not an absolute URL.
    """
    try:
        parts = urlsplit(str(url))
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port is not None:
            host = f"{host}:{parts.port}"
    except ValueError:
        return None
    if not parts.scheme or not host:
        return None
    return redact_secrets(urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/"))


_MAX_JSON_DEPTH = 1000
"""``Redaction.json`` fails closed on a value nested deeper. Python's recursion limit stops its
walk sooner (two calls a level); the compiled module's calls do not count toward that limit."""


class Redaction:
    """A fixed list of redactors, applied in order to text and to every string inside JSON.

    A redactor that raises, or returns something that is not a str, cannot leak what it was given:
    that string becomes ``[REDACTED:redactor_failed]`` (the remaining redactors are skipped for it)
    and a warning naming the redactor is logged once, on the ``chronicle`` logger. The warning
    names the exception type only: its message could quote the secret.
    """

    __slots__ = (
        "_apply",
        "_lock",
        "_mask_credentials",
        "_redactors",
        "_warned",
        "defaults_only",
        "text",
    )

    def __init__(self, redactors: Iterable[Redactor] = ()) -> None:
        self._redactors: tuple[Redactor, ...] = tuple(redactors)
        self._mask_credentials = any(r is redact_secrets for r in self._redactors)
        self._warned = [False] * len(self._redactors)
        self._lock = threading.Lock()
        # The defaults alone cannot fail, so they skip the guarded loop (it doubles the cost of a
        # clean string).
        self.defaults_only = self._redactors == (redact_secrets,)
        """Whether the redactors are exactly Chronicle's defaults (a clean text then stays clean:
        the capture remembers clean dict keys)."""
        self._apply: Callable[[str], str]
        if not self._redactors:
            self._apply = _unchanged
        elif self.defaults_only:
            self._apply = redact_secrets
        else:
            self._apply = self._guarded
        self.text: Callable[[str], str] = self._apply
        """``text(s)``: ``s`` after every redactor; the same object when none changed it. Never
        raises. An attribute, not a method, so the hot path calls the redactor directly."""

    @classmethod
    def default(cls) -> Redaction:
        """Only Chronicle's default redactors."""
        return cls(default_redactors())

    @classmethod
    def none(cls) -> Redaction:
        """No redaction at all: ``text`` and ``json`` return their input."""
        return cls(())

    @property
    def redactors(self) -> tuple[Redactor, ...]:
        """The redactors, in the order they run."""
        return self._redactors

    @property
    def masks_credentials(self) -> bool:
        """Whether strings under credential-named keys are masked whole (the defaults are on)."""
        return self._mask_credentials

    def _guarded(self, text: str) -> str:
        # Results typed ``object``: a redactor may return anything, which the compiled module
        # (mypyc) would otherwise check as the ``str`` a ``Redactor`` declares, and raise.
        redactors: tuple[Callable[[str], object], ...] = self._redactors
        for index, redactor in enumerate(redactors):
            try:
                result = redactor(text)
                if not isinstance(result, str):
                    self._failed(index, f"returned {type(result).__name__}, not str")
                    return FAILED
                # An equal copy keeps the original, so callers can test ``is`` for "unchanged";
                # a str subclass (whose methods could do anything later) becomes a plain str.
                if result is not text and str.__ne__(result, text):
                    text = str.__str__(result)
            except Exception as exc:
                self._failed(index, f"raised {type(exc).__name__}")
                return FAILED
        return text

    def json(self, value: JsonValue) -> JsonValue:
        """``value`` with every string in it (dict keys included) redacted.

        Shares what it did not change: the same object comes back when nothing needed masking, and
        a changed container is a new one (the input is never modified). Never raises: a value too
        deeply nested to walk becomes ``[REDACTED:redactor_failed]`` rather than risk a leak.
        """
        if not self._redactors:
            return value
        try:
            # Of the same JSON type as ``value``: what is inside is redacted, never retyped.
            return cast(JsonValue, self._json(value, 0))
        except RecursionError:
            return FAILED

    # The walk is typed ``object``: what is not JSON (a tuple, a stray object) passes through
    # as in any Python, where the compiled module (mypyc) would check a declared ``JsonValue``.

    def _json(self, value: object, depth: int) -> object:
        if isinstance(value, str):
            return self._apply(value)
        if depth > _MAX_JSON_DEPTH:
            raise RecursionError(f"deeper than {_MAX_JSON_DEPTH}")
        if isinstance(value, dict):
            return self._dict(value, depth)
        if isinstance(value, (list, tuple)):
            # A tuple is not JSON, but one slipping through must not carry a secret out.
            return self._list(value, depth)
        return value  # numbers, booleans and None carry no text

    def _dict(self, items: dict[object, object], depth: int) -> object:
        # Built lazily: most dicts hold no secret, and then the original is returned as is.
        out: dict[object, object] | None = None
        text = self._apply
        credentials = self._mask_credentials
        for position, (key, item) in enumerate(items.items()):
            if not isinstance(key, str):  # not JSON, but must not make this raise
                new_key: object = key
                named = False
            else:
                new_key = text(key)
                named = (
                    credentials
                    and isinstance(item, str)
                    and may_name_credential(key)
                    and is_credential_value(key, item)
                )
            if named:
                new_item: object = CREDENTIAL
            elif isinstance(item, str):
                new_item = text(item)
            elif isinstance(item, (dict, list, tuple)):
                new_item = self._json(item, depth + 1)
            else:
                new_item = item
            if out is None:
                if new_key is key and new_item is item:
                    continue
                out = dict(list(items.items())[:position])
            out[new_key] = new_item
        return items if out is None else out

    def _list(self, items: list[object] | tuple[object, ...], depth: int) -> object:
        out: list[object] | None = None
        for position, item in enumerate(items):
            new_item = self._json(item, depth + 1)
            if out is None:
                if new_item is item:
                    continue
                out = list(items[:position])
            out.append(new_item)
        if out is None:
            return items if isinstance(items, list) else list(items)
        return out

    def _failed(self, index: int, what: str) -> None:
        with self._lock:
            if self._warned[index]:
                return
            self._warned[index] = True
        logger.warning(
            "redactor %s %s, so the text it was given is recorded as %s; fix the "
            "redactor so that it takes a str and returns a str (this is reported once)",
            _describe(self._redactors[index]),
            what,
            FAILED,
        )


def _unchanged(text: str) -> str:
    return text


def _describe(redactor: object) -> str:
    """A redactor's name for a log line: ``module.qualname`` where it has one."""
    try:
        name = getattr(redactor, "__qualname__", None) or type(redactor).__qualname__
        module = getattr(redactor, "__module__", None)
        return f"{module}.{name}" if isinstance(module, str) else str(name)
    except Exception:
        return type(redactor).__qualname__
