"""The framework pages: the README's table links each instrumentor to a page a test runs."""

from __future__ import annotations

import re
from pathlib import Path

import chronicle

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "frameworks"
TESTS = Path(__file__).resolve().parent


def _table_rows() -> dict[str, str]:
    """``instrument_<name>`` -> the page its README row links to."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| \[[^\]]+\]\((docs/frameworks/[^)]+)\)[^|]*\| `(instrument_\w+)\(\)`", readme, re.M
    )
    return {function: page for page, function in rows}


def test_every_instrumentor_has_a_row_and_a_page() -> None:
    instrumentors = {name for name in chronicle.__all__ if name.startswith("instrument_")}
    instrumentors -= {"instrument_httpx", "instrument_langgraph"}  # not frameworks' one line
    rows = _table_rows()
    assert set(rows) == instrumentors
    for page in rows.values():
        assert (ROOT / page).is_file(), page


def test_every_page_example_runs_in_a_test() -> None:
    """Each page's python example is exec'd by the framework's test module."""
    sources = "\n".join(path.read_text(encoding="utf-8") for path in TESTS.glob("test_*.py"))
    for page in PAGES.glob("*.md"):
        blocks = re.findall(r"```python\n", page.read_text(encoding="utf-8"))
        assert len(blocks) == 1, f"{page.name}: one python example, run by its test"
        assert f'"{page.name}"' in sources, f"no test runs {page.name}'s example"
