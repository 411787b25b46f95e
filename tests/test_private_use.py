"""No module of ``chronicle`` uses another module's private (``_name``) member.

A module's interface to the others is its public names; an underscore says "this module's own".
Read statically, from each module's AST:

- ``from chronicle.x import _y`` (or a relative import) of another module is a use;
- ``obj._y`` is a use when ``_y`` is a private name some other ``chronicle`` module defines (a
  module-level name, a method or class attribute, or an attribute it assigns, ``self._y = ...``)
  and this module defines none of that name: an attribute of another module's object (a
  ``ReplayRun`` read from ``whatif/diff.py``), a private module-level name read through its
  module (``runtime._current``), or a member a subclass inherits from another module's class.

A name is matched by its spelling, not by type inference: a private member of a third-party
object (the OpenTelemetry SDK span's ``_attributes``) counts only when a ``chronicle`` module
defines that name too; ``ALLOWED`` lists those, each with why. ``namedtuple``'s API
(``_replace``, ``_asdict``, ...) is public despite its underscore.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.test_imports import MODULES

NAMEDTUPLE_API = frozenset({"_asdict", "_field_defaults", "_fields", "_make", "_replace"})
"""``collections.namedtuple``'s public methods and attributes, underscored to avoid field names."""

ALLOWED: dict[tuple[str, str], str] = {
    # (module, name): why this use of another package's private member stays
    ("chronicle.otel.counted_once", "_attributes"): (
        "the OpenTelemetry SDK span's attribute table (not redacting.py's method of that name): "
        "the SDK has no public way to drop an attribute"
    ),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_in(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, assignments (module, class or
    attribute targets such as ``self._lock``) and the names it binds by import under its own
    alias (``import x as _x``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.alias) and node.asname is not None:
            names.add(node.asname)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if _private(name)}


def _imported_module(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def private_uses() -> list[str]:
    """Every use of another module's private member in ``chronicle``, one line each."""
    trees = {
        module: ast.parse(path.read_text(encoding="utf-8")) for module, path in MODULES.items()
    }
    defined = {module: _defined_in(tree) for module, tree in trees.items()}
    where: dict[str, set[str]] = defaultdict(set)
    for module, names in defined.items():
        for name in names:
            where[name].add(module)
    found: list[str] = []
    for module, tree in trees.items():
        own = defined[module]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _imported_module(module, MODULES[module], node)
                if source != module and (source == "chronicle" or source.startswith("chronicle.")):
                    found.extend(
                        f"{module}:{node.lineno}: from {source} import {alias.name}"
                        for alias in node.names
                        if _private(alias.name) and (module, alias.name) not in ALLOWED
                    )
            elif (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and node.attr not in own
                and node.attr not in NAMEDTUPLE_API
                and (module, node.attr) not in ALLOWED
                and where.get(node.attr)
            ):
                homes = ", ".join(sorted(where[node.attr]))
                found.append(f"{module}:{node.lineno}: .{node.attr} (defined in {homes})")
    return found


def test_no_module_uses_another_modules_private_member() -> None:
    found = private_uses()
    assert found == [], (
        "a module uses another module's private member; give that module a public name for "
        "what is needed (a function taking the object, a collaborator passed in), or move the "
        "code to where the member lives:\n" + "\n".join(found)
    )


def test_the_rule_sees_each_kind_of_private_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three shapes the rule reads, each found in a package made for the test."""
    package = tmp_path / "chronicle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "home.py").write_text(
        "_table = {}\n\nclass Run:\n    def __init__(self):\n        self._calls = []\n\n"
        "    def _made(self):\n        return self._calls\n"
    )
    (package / "reader.py").write_text(
        "from chronicle import home\nfrom chronicle.home import _table\n\n"
        "def read(run):\n    return run._made(), home._table, run.x._replace(a=1)\n"
    )
    modules = {"chronicle": package / "__init__.py"}
    modules.update({f"chronicle.{p.stem}": p for p in package.glob("[!_]*.py")})
    monkeypatch.setattr(f"{__name__}.MODULES", modules)
    found = sorted(private_uses())
    assert found == [
        "chronicle.reader:2: from chronicle.home import _table",
        "chronicle.reader:5: ._made (defined in chronicle.home)",
        "chronicle.reader:5: ._table (defined in chronicle.home)",
    ]
