"""docs/layout.md names every module of the package, and names only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "floe_dagster"
LAYOUT = ROOT / "docs" / "layout.md"


def _modules() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def _named() -> set[str]:
    return set(re.findall(r"`([\w/]+\.py)`", LAYOUT.read_text()))


def test_every_module_is_in_the_layout():
    assert sorted(_modules() - _named()) == []


def test_every_module_the_layout_names_exists():
    missing = [name for name in _named() if not (PACKAGE / name).is_file() and not (ROOT / name).is_file()]
    assert missing == []
