"""The package's import graph is a DAG, in the layers ``LAYERS`` draws (docs/design.md too).

Three checks, each over every module of ``chronicle``:

- **Layers** (static, from each module's AST): a module imports only from its own unit and the
  units its row of ``LAYERS`` lists. A unit is a top-level module (``chronicle.runtime``) or a
  subpackage (``chronicle.llm``). Imports under ``if TYPE_CHECKING:`` do not count: they never
  run, and let a lower layer name a higher layer's type in an annotation.
- **No deferred imports** (static): no ``import`` of a ``chronicle`` module inside a function
  (a deferred import is how a cycle hides). A function-level import of a third-party package is
  allowed when it avoids loading an optional (or heavy) package, and a comment on its line or
  the line above says so.
- **No circles** (static): the modules, with every import between them (those under
  ``if TYPE_CHECKING:`` too), have an order in which nothing imports a module above it.
- **No cycles** (at run time): one fresh interpreter imports every module in turn, the package
  facade (``chronicle/__init__.py``) last, with a hook on ``__import__`` that fails any import of
  a ``chronicle`` module that is still executing (which is what a cycle is). Every import must
  succeed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "chronicle"

ENGINE_USES = frozenset(
    {"errors", "config", "redaction", "wire", "llm", "otel", "recording", "save", "runtime"}
)
"""What the replay engine (``replay``) may import: everything below it but ``read``."""
ON_THE_ENGINE = ENGINE_USES | {"replay"}
"""What a unit built on the engine may import: the engine and all it may."""

LAYERS: dict[str, frozenset[str]] = {
    # unit: the units it may import (its own unit is always allowed), lowest layers first
    "_version": frozenset(),
    "log": frozenset(),
    "lazy": frozenset(),  # chronicle/lazy.py: names loaded on first use (PEP 562)
    "errors": frozenset(),
    "agent": frozenset({"errors"}),
    "config": frozenset({"errors", "agent"}),
    "traceparent": frozenset(),
    "redaction": frozenset({"errors"}),
    "llm": frozenset({"errors"}),
    "wire": frozenset({"errors", "llm"}),
    "otel": frozenset({"errors", "config", "redaction", "wire", "llm"}),
    "save": frozenset({"errors", "config", "redaction", "wire", "otel", "_version"}),
    "runtime": frozenset({"errors", "config", "redaction", "_version", "otel", "save"}),
    "recording": frozenset(
        {"errors", "config", "agent", "redaction", "traceparent", "llm", "wire", "otel", "runtime"}
    ),
    "read": frozenset({"errors", "config", "wire", "save", "runtime"}),
    "replay": ENGINE_USES,
    "integrations": ON_THE_ENGINE | {"traceparent"},
    "whatif": ON_THE_ENGINE,  # chronicle/whatif/: the corpus runner and diff, built on the engine
    # the test doubles and the pytest plugin, test tooling on replay; "read" for the corpus
    # report's page (--chronicle-report)
    "testing": ON_THE_ENGINE | {"read", "whatif", "lazy"},
    "check": frozenset(  # chronicle/check/: traces checked against their agent's profile
        {
            "errors",
            "agent",
            "config",
            "wire",
            "recording",
            "save",
            "runtime",
            "read",
            "replay",
            "whatif",
            "integrations",
        }
    ),
    "cli": frozenset(
        {"errors", "config", "save", "read", "replay", "whatif", "runtime", "_version", "check"}
    ),
    "__main__": frozenset({"cli"}),
    "pytest_plugin_shim": frozenset(  # chronicle/replay/pytest_plugin.py: the old path, deprecated
        {"testing"}
    ),
    "old_paths": frozenset({"whatif"}),  # replay/{diff,corpus,corpus_entry}.py: moved, deprecated
    "chronicle": frozenset(  # the facade, chronicle/__init__.py: what users import
        {
            "log",
            "lazy",
            "errors",
            "config",
            "redaction",
            "wire",
            "traceparent",
            "_version",
            "llm",
            "otel",
            "recording",
            "save",
            "runtime",
            "replay",
            "whatif",
            "integrations",
            "agent",
            "read",
            "check",
        }
    ),
}
"""Which unit may import which. Nothing imports ``__main__``, the facade or the shim, and nothing
of the library imports ``testing`` (test tooling: pytest loads its plugin by the entry point)."""

SHIM = "chronicle.replay.pytest_plugin"
OLD_PATHS = frozenset(
    {"chronicle.replay.diff", "chronicle.replay.corpus", "chronicle.replay.corpus_entry"}
)
"""Modules that moved to ``chronicle.whatif`` and re-export it from their old path for one
release: a unit of their own (``old_paths``) that nothing imports. Delete with the modules."""
"""The pytest plugin's old path, kept for one release (it re-exports ``chronicle.testing.
pytest_plugin`` and warns): a unit of its own (``pytest_plugin_shim``), a top nothing imports, so
its import of ``testing`` from inside ``replay/`` is no edge of ``replay``'s. Delete the row with
the module."""

KNOWN_VIOLATIONS: dict[str, str] = {
    # module: why it breaks a rule today (strict xfail: remove the entry once it holds)
}


@dataclass(frozen=True)
class Import:
    module: str
    """The module imported, resolved (``from chronicle import runtime`` is chronicle.runtime)."""
    line: int
    deferred: bool
    """Inside a function: runs when the function is called, not when the module is loaded."""
    type_only: bool
    """Under ``if TYPE_CHECKING:``."""
    commented: bool
    """A comment on the import's first line or on the line just above it."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {
    module_name(path): path
    for path in sorted(PACKAGE.rglob("*.py"))
    if "__pycache__" not in path.parts
}


def unit_of(module: str) -> str:
    """``chronicle.llm.openai`` -> ``llm``; the facade and the plugin's deprecated old path
    are units of their own.
    """
    if module == SHIM:
        return "pytest_plugin_shim"
    if module in OLD_PATHS:
        return "old_paths"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "chronicle"


def resolve(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """The modules a ``from ... import ...`` loads: a name that is a submodule counts as one."""
    if node.level:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    found = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
    return found or [base]


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: list[Import] = []

    def commented(line: int) -> bool:
        above = lines[line - 2].strip() if line >= 2 else ""
        return "#" in lines[line - 1] or above.startswith("#")

    def visit(node: ast.AST, deferred: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.body:
                    visit_one(statement, deferred, True)
                for statement in child.orelse:
                    visit_one(statement, deferred, type_only)
            else:
                visit_one(child, deferred, type_only)

    def visit_one(node: ast.AST, deferred: bool, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = resolve(module, path, node)
        else:
            inside = deferred or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(node, inside, type_only)
            return
        for name in names:
            found.append(Import(name, node.lineno, deferred, type_only, commented(node.lineno)))

    visit(ast.parse(source, str(path)), False, False)
    return found


def is_chronicle(module: str) -> bool:
    return module == "chronicle" or module.startswith("chronicle.")


def problems_of(module: str) -> list[str]:
    """Every rule ``module`` breaks, one line each."""
    own = unit_of(module)
    allowed = LAYERS.get(own)
    if allowed is None:
        return [f"{module}: unit {own!r} has no row in LAYERS (add it, and to docs/design.md)"]
    problems: list[str] = []
    for found in imports_of(module):
        where = f"{module}:{found.line}"
        if not is_chronicle(found.module):
            if found.deferred and not found.commented:
                problems.append(
                    f"{where}: function-level import of {found.module} with no comment saying "
                    "why (an optional package?); import it at the top, or say why"
                )
            continue
        if found.deferred:
            problems.append(f"{where}: deferred import of {found.module}; import it at the top")
        if found.type_only:
            continue
        target = unit_of(found.module)
        if target != own and target not in allowed:
            problems.append(f"{where}: {own} may not import {target} ({found.module}); see LAYERS")
    return problems


def _marked(module: str) -> object:
    reason = KNOWN_VIOLATIONS.get(module)
    if reason is None:
        return module
    return pytest.param(module, marks=pytest.mark.xfail(strict=True, reason=reason))


def test_the_layer_table_is_itself_a_dag():
    order: list[str] = []
    done: set[str] = set()

    def place(unit: str, path: tuple[str, ...]) -> None:
        assert unit not in path, f"LAYERS has a cycle: {' -> '.join((*path, unit))}"
        if unit in done:
            return
        for below in sorted(LAYERS[unit]):
            place(below, (*path, unit))
        done.add(unit)
        order.append(unit)

    for unit in LAYERS:
        place(unit, ())
    assert set(order) == set(LAYERS)
    tops = {"chronicle", "pytest_plugin_shim", "old_paths", "__main__"}
    assert not any(tops & allowed for allowed in LAYERS.values()), "nothing imports the tops"
    importers = {unit for unit, allowed in LAYERS.items() if "testing" in allowed}
    assert importers == {"pytest_plugin_shim"}, "the library never builds on its test tooling"


def test_every_unit_of_the_package_has_a_row():
    assert {unit_of(module) for module in MODULES} <= set(LAYERS)


@pytest.mark.parametrize("module", [_marked(m) for m in MODULES])
def test_imports_follow_the_layers_and_none_is_deferred(module):
    assert problems_of(module) == []


def test_the_module_graph_has_an_order_where_nothing_imports_a_module_above_it():
    """No import circle, counting the imports made for annotations only (``TYPE_CHECKING``): a
    type two modules share belongs below both, or is named where it is used (a ``Protocol``)."""
    graph = {
        module: sorted(
            {
                found.module
                for found in imports_of(module)
                if is_chronicle(found.module) and not found.deferred
            }
            - {module}
        )
        for module in MODULES
    }
    order: list[str] = []
    state: dict[str, str] = {}

    def place(module: str, path: tuple[str, ...]) -> None:
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", f"import cycle: {' -> '.join((*path, module))}"
        state[module] = "open"
        for imported in graph.get(module, []):
            if imported != "chronicle":  # the facade: a rule above forbids importing it
                place(imported, (*path, module))
        state[module] = "done"
        order.append(module)

    for module in sorted(graph):
        place(module, ())
    assert set(order) == set(MODULES)


_IMPORT_EVERY_MODULE = """
import builtins, importlib, importlib.machinery, importlib.util, json, sys, types

package, names = sys.argv[1], json.loads(sys.argv[2])
root = types.ModuleType("chronicle")  # the package without running its facade yet
root.__path__ = [package]
root.__spec__ = importlib.machinery.ModuleSpec("chronicle", None, is_package=True)
root.__spec__.submodule_search_locations = [package]
sys.modules["chronicle"] = root
cycles = []
real_import = builtins.__import__

def still_running(name):
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return name != "chronicle" and getattr(spec, "_initializing", False)

def checked_import(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "?")
    absolute = name
    if level:
        package = (globals or {}).get("__package__")
        absolute = importlib.util.resolve_name("." * level + name, package)
    if absolute == "chronicle" or absolute.startswith("chronicle."):
        targets = [absolute] + [f"{absolute}.{item}" for item in fromlist or () if item != "*"]
        for target in targets:
            if still_running(target) and importer != target:
                cycles.append(f"{importer} imports {target} while {target} is still running")
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = checked_import
failures = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failures[name] = f"{type(exc).__name__}: {exc}"
facade = package + "/__init__.py"
try:
    exec(compile(open(facade, encoding="utf-8").read(), facade, "exec"), root.__dict__)
except Exception as exc:
    failures["chronicle"] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"cycles": cycles, "failures": failures}))
"""


def import_in_a_fresh_interpreter(package: Path, names: list[str]) -> dict[str, object]:
    """The cycles met and the imports that failed, importing ``names`` then the facade."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERY_MODULE, str(package), json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_a_fresh_interpreter_imports_every_module_with_no_cycle():
    names = [module for module in MODULES if module != "chronicle"]
    assert import_in_a_fresh_interpreter(PACKAGE, names) == {"cycles": [], "failures": {}}


def test_the_fresh_interpreter_check_catches_a_cycle(tmp_path):
    package = tmp_path / "chronicle"
    package.mkdir()
    (package / "__init__.py").write_text("from chronicle.a import A\n")
    (package / "a.py").write_text("from chronicle.b import B\nA = 1\n")
    (package / "b.py").write_text("from chronicle import a\nB = 2\n")  # a cycle that imports
    report = import_in_a_fresh_interpreter(package, ["chronicle.a", "chronicle.b"])
    assert report == {
        "cycles": ["chronicle.b imports chronicle.a while chronicle.a is still running"],
        "failures": {},
    }
