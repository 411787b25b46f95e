"""A module's names loaded when first asked for (PEP 562), for the modules that must stay cheap
to import: the facade (``import chronicle``), ``chronicle.testing`` and the pytest plugin's entry
module (every pytest session imports them).

Each such module writes its names three times: imported under ``TYPE_CHECKING`` (what type
checkers read), in a map of name to module (what is loaded), and in ``__all__``; then::

    __getattr__ = loaded_on_use(__name__, _FROM)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["loaded_on_use"]


def loaded_on_use(
    module: str, where: Mapping[str, str], *, unknown: str = ""
) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``module``: a name of ``where`` is imported from the module
    it maps to the first time it is asked for, and kept in ``module`` (the next use is a plain
    attribute); any other name raises ``AttributeError``, followed by ``unknown`` (what to do)."""
    namespace = sys.modules[module].__dict__

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}{unknown}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
