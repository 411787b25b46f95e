"""A real consumer runs unmodified: TokenOps's bundled demo halts at its budget.

``agent-tokenops`` drives agents through Chronicle's public API (``Hook``, ``CallInfo``,
``default_hooks``, ``AbortCall``, ``wrap_llm``, ``span``, ``current_session``). It declares a
dependency on the prior Chronicle distribution, which has the same import name, so it is installed
with ``--no-deps`` in a throwaway virtual environment of its own that sees this package (and
TokenOps's other requirements) from the test run's environment.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

TOKENOPS = "agent-tokenops==2.0.1"
# TokenOps's own requirements, less the prior Chronicle (this package replaces it).
TOKENOPS_DEPS = [
    "pyyaml>=6.0",
    "python-dotenv>=1.0",
    "httpx>=0.27",
    "fastapi>=0.115",
    "openai>=1.0",
    "anthropic>=0.40",
]


QUIET = ("--quiet", "--disable-pip-version-check")


def _pip(python: Path, *args: str) -> None:
    """``pip install ARGS`` into the environment of ``python``, run by this run's own pip
    (``--python``): the environment needs no pip of its own, whose install (``ensurepip``) was
    most of this test's time (15-75 s, against 0.4 s for the environment without it)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", *QUIET, *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        pytest.fail(f"pip install {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def _missing(requirements: list[str]) -> list[str]:
    """The requirements this run's environment does not satisfy (the new one sees its
    packages, so it lacks the same)."""
    lacking = []
    for text in requirements:
        requirement = Requirement(text)
        try:
            found = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            lacking.append(text)
            continue
        if not requirement.specifier.contains(found, prereleases=True):
            lacking.append(text)
    return lacking


@pytest.fixture(scope="module")
def tokenops_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment that sees this test run's packages (this Chronicle, installed
    editable, and TokenOps's requirements, which the dev extra's SDKs bring) through a ``.pth``
    that adds their site directories, so only TokenOps itself is installed into it: no second
    install of the whole stack per run. A requirement the run lacks is installed as before."""
    env_dir = tmp_path_factory.mktemp("tokenops-venv")
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    found = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [f"import site; site.addsitedir({folder!r})\n" for folder in site.getsitepackages()]
    (Path(found.stdout.strip()) / "chronicle-test-run.pth").write_text("".join(lines))
    lacking = _missing(TOKENOPS_DEPS)
    if lacking:
        _pip(python, *lacking)
    _pip(python, "--no-deps", TOKENOPS)
    return python


def test_the_tokenops_demo_halts_at_call_14(tokenops_python: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONICLE_", "OTEL_"))}
    result = subprocess.run(
        [str(tokenops_python), "-m", "tokenops.demo"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # TokenOps reads a .env from the working directory: keep it empty
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "halted at call 14" in result.stdout, result.stdout
    assert "40 calls run, spend $5.80" in result.stdout
    assert "spend $2.03" in result.stdout
    # the Chronicle TokenOps imported is this one, not the prior distribution
    check = subprocess.run(
        [str(tokenops_python), "-c", "import chronicle; print(chronicle.ChronicleSpanProcessor)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert "chronicle.otel.processor.ChronicleSpanProcessor" in check.stdout, check.stderr
    assert sys.executable != str(tokenops_python)
