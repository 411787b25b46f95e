"""Arguments by name (SPEC section 6): which arguments a call actually passed, named.

``ArgumentBinder(fn).bind(args, kwargs)`` names the arguments the caller actually passed:
declared parameters keep their names (positional-only too), a first ``self``/``cls`` is skipped,
``**kwargs`` is flattened into top-level keys, ``*args`` keeps its name and holds a list. Defaults
are not applied. When the signature cannot be read, or the arguments do not fit it, positionals go
under ``"args"`` and keywords are top-level keys. ``bind`` never raises.

The per-function work (reading the signature) happens once, when the binder is built; ``bind``
and ``patch`` run per call without touching ``inspect``. ``recording/capture.py`` turns the
bound arguments into JSON.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Mapping

__all__ = ["ArgumentBinder"]

logger = logging.getLogger("chronicle")

_PARAMETER = inspect.Parameter
_EMPTY = inspect.Parameter.empty


class ArgumentBinder:
    """Names one function's call arguments the way SPEC section 6 records them.

    Build it once per wrapped function; ``bind`` and ``patch`` then run per call without touching
    ``inspect``. Accepts plain functions, functions defined in a class body (their ``self`` or
    ``cls`` arrives as the first positional argument and is skipped), ``staticmethod`` and
    ``classmethod`` objects, bound methods, partials, callable objects and builtins.
    """

    __slots__ = (
        "_index",
        "_keywordable",
        "_min_positional",
        "_positional",
        "_positional_defaults",
        "_positional_only",
        "_readable",
        "_required",
        "_skip_first",
        "_skip_keyword",
        "_var_keyword",
        "_var_positional",
    )

    def __init__(self, fn: object) -> None:
        target = fn
        skip_first = False
        name_rule = True
        if isinstance(fn, classmethod):
            # The wrapper sees the class as its first positional argument, whatever it is called.
            target = fn.__func__
            skip_first = True
            name_rule = False
        elif isinstance(fn, staticmethod):
            # No implicit first argument: a first parameter named ``self`` is a real argument.
            target = fn.__func__
            name_rule = False

        self._readable = True
        self._skip_first = skip_first
        self._skip_keyword: str | None = None
        self._positional: tuple[str, ...] = ()
        self._positional_only = 0
        self._positional_defaults: tuple[object, ...] = ()
        self._min_positional = 0
        self._keywordable: frozenset[str] = frozenset()
        self._required: tuple[str, ...] = ()
        self._var_positional: str | None = None
        self._var_keyword: str | None = None
        self._index: dict[str, int] = {}

        try:
            if not callable(target):
                raise TypeError("not callable")
            # Follows ``__wrapped__``, so a function already wrapped by ``functools.wraps``
            # decorators is named by its original signature.
            parameters = list(inspect.signature(target).parameters.values())
        except Exception:  # builtins and C callables without text signatures
            self._readable = False
            return

        if parameters and parameters[0].kind in (
            _PARAMETER.POSITIONAL_ONLY,
            _PARAMETER.POSITIONAL_OR_KEYWORD,
        ):
            first = parameters[0]
            if skip_first or (name_rule and first.name in ("self", "cls")):
                self._skip_first = True
                parameters = parameters[1:]
                if first.kind is _PARAMETER.POSITIONAL_OR_KEYWORD:
                    # ``Class.method(self=obj)`` is a legal (if odd) way to pass it.
                    self._skip_keyword = first.name
        elif skip_first:
            # A classmethod taking only ``*args``: the class is the first item of ``*args``.
            self._skip_first = True

        positional: list[str] = []
        defaults: list[object] = []
        keywordable: set[str] = set()
        required: list[str] = []
        for parameter in parameters:
            kind = parameter.kind
            name = parameter.name
            if kind is _PARAMETER.POSITIONAL_ONLY:
                positional.append(name)
                defaults.append(parameter.default)
                self._positional_only += 1
                if parameter.default is _EMPTY:
                    self._min_positional += 1
            elif kind is _PARAMETER.POSITIONAL_OR_KEYWORD:
                positional.append(name)
                defaults.append(parameter.default)
                keywordable.add(name)
                if parameter.default is _EMPTY:
                    required.append(name)
            elif kind is _PARAMETER.VAR_POSITIONAL:
                self._var_positional = name
            elif kind is _PARAMETER.KEYWORD_ONLY:
                keywordable.add(name)
                if parameter.default is _EMPTY:
                    required.append(name)
            else:
                self._var_keyword = name
        self._positional = tuple(positional)
        self._positional_defaults = tuple(defaults)
        self._keywordable = frozenset(keywordable)
        self._required = tuple(required)
        self._index = {name: i for i, name in enumerate(positional)}

    @property
    def readable(self) -> bool:
        """Whether the signature could be read; ``False`` means every call uses the fallback."""
        return self._readable

    def accepts(self, name: str, value: object = _EMPTY) -> bool:
        """Whether the function takes an argument called ``name`` (so a hook may patch it), and,
        when ``value`` is given, whether ``patch`` can apply it: the ``*args`` name takes a list
        or tuple only (anything else would reach the function as a keyword it does not take).

        ``True`` for any other name when the function takes ``**kwargs`` or its signature is
        unknown.
        """
        if name == self._var_positional and self._readable:
            return value is _EMPTY or isinstance(value, (list, tuple))
        if not self._readable or self._var_keyword is not None:
            return True
        return name in self._index or name in self._keywordable

    @property
    def positional_names(self) -> tuple[str, ...]:
        """Names of the parameters that can be passed by position, in order, ``self`` excluded."""
        return self._positional

    @property
    def skips_first(self) -> bool:
        """Whether the first positional argument (``self`` or ``cls``) is left out of ``bind``."""
        return self._skip_first

    def bind(self, args: tuple[object, ...], kwargs: Mapping[str, object]) -> dict[str, object]:
        """The arguments the caller passed, by name, as live values (not yet JSON).

        Defaults are not applied. Never raises: when the arguments do not fit the signature (the
        real call will raise its own ``TypeError``), the result is the fallback form, positionals
        under ``"args"`` (``"*args"`` if a keyword named ``args`` was also passed) and keywords as
        top-level keys. A keyword that lands in ``**kwargs`` with the same name as an argument
        already bound by position (only possible for positional-only parameters and the ``*args``
        name) cannot be flattened and also gives the fallback form.
        """
        if self._readable:
            try:
                bound = self._named(args, kwargs)
            except Exception:  # defensive: a hostile mapping must not break the call
                bound = None
            if bound is not None:
                return bound
        return self._fallback(args, kwargs)

    def _named(
        self, args: tuple[object, ...], kwargs: Mapping[str, object]
    ) -> dict[str, object] | None:
        """The named form, or ``None`` when the arguments do not fit the signature."""
        if self._skip_first:
            if args:
                args = args[1:]
            elif self._skip_keyword is not None and self._skip_keyword in kwargs:
                skipped = self._skip_keyword
                kwargs = {key: value for key, value in kwargs.items() if key != skipped}
            else:
                return None
        if len(args) < self._min_positional:
            return None
        names = self._positional
        # ``zip`` stops at the shorter side: exactly the parameters that were passed by position.
        # (No ``strict=False``: passing the keyword more than doubles this line's cost.)
        out: dict[str, object] = dict(zip(names, args))  # noqa: B905
        if len(args) > len(names):
            if self._var_positional is None:
                return None
            out[self._var_positional] = list(args[len(names) :])
        if kwargs:
            keywordable = self._keywordable
            open_ended = self._var_keyword is not None
            for key, value in kwargs.items():
                if key in out:
                    return None  # a second value for the same name
                if not open_ended and key not in keywordable:
                    return None  # unexpected keyword
                out[key] = value
        for name in self._required:
            if name not in out:
                return None
        return out

    def _fallback(
        self, args: tuple[object, ...], kwargs: Mapping[str, object]
    ) -> dict[str, object]:
        if self._skip_first and args:
            args = args[1:]
        out: dict[str, object] = {}
        if args:
            try:
                clash = "args" in kwargs
            except Exception:  # a hostile mapping: the positionals are still worth recording
                clash = False
            out["*args" if clash else "args"] = list(args)
        # A mapping whose iteration raises: keep what was read.
        with contextlib.suppress(Exception):
            out.update(kwargs)
        return out

    def patch(
        self,
        args: tuple[object, ...],
        kwargs: Mapping[str, object],
        patches: Mapping[str, object],
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        """The call's ``(args, kwargs)`` with each named argument in ``patches`` replaced.

        A name passed by keyword is replaced there; a name passed by position is replaced in
        place; a name not passed at all is added as a keyword, except a positional-only parameter,
        which is appended by position (earlier skipped positional-only parameters are filled with
        their defaults). The ``*args`` name replaces the extra positionals with the given list.
        The inputs are not modified.
        """
        if not patches:
            return args, dict(kwargs)
        positional = list(args)
        keywords = dict(kwargs)
        offset = 1 if self._skip_first and args else 0
        named = len(self._positional)
        for name, value in patches.items():
            if name in keywords:
                keywords[name] = value
                continue
            index = self._index.get(name)
            if index is not None:
                at = offset + index
                if at < len(positional):
                    positional[at] = value
                    continue
                if index < self._positional_only and self._fill_positional(
                    positional, offset, index
                ):
                    positional.append(value)
                    continue
            elif name == self._var_positional and self._var_positional is not None:
                if isinstance(value, (list, tuple)) and len(positional) >= offset + named:
                    positional[offset + named :] = value
                else:
                    # Not applied: as a keyword it would break the call.
                    logger.warning(
                        "a hook's patch of *%s was left out: it must be a list and "
                        "the call must pass every named positional argument by position; patch "
                        "those by name instead",
                        name,
                    )
                continue
            keywords[name] = value
        return tuple(positional), keywords

    def _fill_positional(self, positional: list[object], offset: int, index: int) -> bool:
        """Pad ``positional`` with defaults up to parameter ``index``; ``False`` if one has none."""
        missing = self._positional_defaults[len(positional) - offset : index]
        if any(default is _EMPTY for default in missing):
            return False
        positional.extend(missing)
        return True
