"""The opt-in compiled wheel: ``CHRONICLE_MYPYC=1`` compiles the boundary's hot path with mypyc.

Hatchling runs this hook for every wheel it builds (``pyproject.toml``,
``[tool.hatch.build.targets.wheel.hooks.custom]``). Without ``CHRONICLE_MYPYC=1`` it does
nothing and asks for nothing: the wheel is pure Python and the build needs no compiler and no
mypy. With it, the modules in
``COMPILED`` are compiled by mypyc into extension modules that sit in the wheel beside their
``.py`` files (an extension module is imported before a ``.py`` of the same name), and the wheel
becomes a platform wheel (``cp311-cp311-linux_x86_64``, say). ``make compiled`` builds it into
``dist/``; ``make test-compiled`` runs the test suite against it.

The compiled modules run the same code as the pure ones; the figures that make it worth a
compiler are in docs/benchmarks.md, "Issue 31: the boundary's cost".

Never in place: the package is compiled in a copy of the sources in a temporary directory, and
only the extension modules go into the wheel. A ``.so`` beside ``capture.py`` in a checkout would
be imported instead of it, so an edit to the ``.py`` would silently not run. For the same
reason an editable install with ``CHRONICLE_MYPYC=1`` is refused rather than compiled.

The compile type-checks the package with the project's own mypy configuration (strict), so a
type error fails the compiled build the way it fails ``make typecheck``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SWITCH = "CHRONICLE_MYPYC"
"""``1``: compile; unset, empty or ``0``: the pure-Python wheel."""

COMPILED = (
    "chronicle/recording/capture.py",
    "chronicle/redaction.py",
    "chronicle/recording/call.py",
    "chronicle/recording/snapshot.py",
)
"""What is compiled: the walk every recorded value takes, the redaction of every string, and
what a call does on the agent's thread around its span (its lifecycle, and the snapshot of its
values). ``otel/processor.py`` was measured too and left pure: it changed nothing measurable, and
mypyc drops the docstring of its public class (docs/benchmarks.md, "The snapshot, frozen")."""

SHARED_LIBRARY = "chronicle.compiled"
"""mypyc's group name: the modules' shared code is ``chronicle/compiled__mypyc.*.so``, inside the
package rather than a top-level module of site-packages."""

SETUP = """\
from mypyc.build import mypycify
from setuptools import setup

setup(
    name="chronicle-compiled",
    ext_modules=mypycify(
        ["--config-file", {config!r}, *{modules!r}], group_name={group!r}
    ),
)
"""


def asked() -> bool:
    """Whether ``CHRONICLE_MYPYC`` asks for the compiled wheel; any value but 1, 0 or none is
    refused, so a typo does not quietly build the other wheel."""
    value = os.environ.get(SWITCH, "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"{SWITCH}={value!r}: 1 compiles; unset it (or 0) for the pure-Python wheel")


class MypycWheelHook(BuildHookInterface[BuilderConfig]):
    """Adds the mypyc-compiled ``COMPILED`` modules to the wheel when ``CHRONICLE_MYPYC=1``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: D107  # hatchling's arguments
        super().__init__(*args, **kwargs)
        self._workdir: str | None = None

    def dependencies(self) -> list[str]:
        """mypy (which brings mypyc; the release the compiled build is tested with, or later) and
        setuptools, only for the compiled wheel."""
        return ["mypy>=2.4", "setuptools>=61"] if asked() else []

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile ``COMPILED`` in a copy of the package and add the extension modules."""
        if not asked():
            return
        if version == "editable":
            raise RuntimeError(
                f"{SWITCH}=1 builds a wheel, not an editable install (an editable install runs "
                "the checkout's .py files): unset it here, and build with `make compiled`"
            )
        missing = [
            what
            for what, found in (
                ("mypyc (pip install mypy)", _importable("mypyc")),
                ("setuptools", _importable("setuptools")),
                ("a C compiler", _compiler() is not None),
            )
            if not found
        ]
        if missing:
            raise RuntimeError(
                f"{SWITCH}=1 needs {', '.join(missing)} in the build environment; unset "
                f"{SWITCH} to build the pure-Python wheel"
            )
        self._workdir = tempfile.mkdtemp(prefix="chronicle-mypyc-")
        try:
            built = _compile(Path(self.root), Path(self._workdir))
        except BaseException:  # the build stops here: ``finalize`` will not run
            self.finalize(version, build_data, "")
            raise
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        for path in built:
            build_data["force_include"][str(path)] = path.relative_to(self._workdir).as_posix()

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the copy the modules were compiled in."""
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def _importable(name: str) -> bool:
    return find_spec(name) is not None


def _compiler() -> str | None:
    command = (sysconfig.get_config_var("CC") or "cc").split()
    return shutil.which(command[0]) if command else None


def _compile(root: Path, workdir: Path) -> list[Path]:
    """Compile ``COMPILED`` from a copy of ``root``'s package in ``workdir``; the extension
    modules built, under ``workdir`` at their paths in the wheel."""
    shutil.copytree(
        root / "chronicle",
        workdir / "chronicle",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
    )
    # The mypy configuration sits apart: setuptools reads a pyproject.toml beside setup.py.
    config = workdir / "config" / "pyproject.toml"
    config.parent.mkdir()
    shutil.copyfile(root / "pyproject.toml", config)
    setup = workdir / "setup.py"
    setup.write_text(SETUP.format(config=str(config), modules=list(COMPILED), group=SHARED_LIBRARY))
    log = workdir / "mypyc.log"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, str(setup), "build_ext", "--inplace"],
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(
            f"{SWITCH}=1: mypyc could not compile {', '.join(COMPILED)} (the last lines of its "
            f"output follow); unset {SWITCH} to build the pure-Python wheel\n{tail}"
        )
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = sorted((workdir / "chronicle").rglob(f"*{suffix}"))
    expected = {Path(module).with_suffix(suffix).as_posix() for module in COMPILED}
    found = {path.relative_to(workdir).as_posix() for path in built}
    if not expected <= found:
        raise RuntimeError(f"{SWITCH}=1: mypyc built {sorted(found)}, not {sorted(expected)}")
    return built
