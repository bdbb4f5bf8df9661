"""Every `from kimik3_… import NAME` in the tree names a module and a name that exist, including the imports made
inside functions (lazy, for a no-op plan's start-up cost) and in tests/support, bench/ and scripts/, which only run
when their test or bench does. A module moved to another floor once left such an import behind in
tests/support/llama_replicas.py, and only CI's last stage, minutes in, found it."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FROM_IMPORT = re.compile(r"^[ \t]*from (kimik3_\w+(?:\.\w+)*) import (\([^)]*\)|[^\n]+)", re.M)


def _split(clause: str) -> list[str]:
    out = []
    for part in clause.strip("()").replace("\n", ",").split(","):
        name = part.split("#")[0].strip().split(" as ")[0].strip()
        if name and name != "*":
            out.append(name)
    return out


def _sources() -> list[Path]:
    folders = ("kimik3_reconciler", "kimik3_demo", "tests", "bench", "scripts", "tools")
    return [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))]


def test_every_kimik3_import_resolves() -> None:
    unresolved = []
    for path in _sources():
        for match in FROM_IMPORT.finditer(path.read_text(encoding="utf-8", errors="replace")):
            module_name, clause = match.groups()
            where = f"{path.relative_to(ROOT)}: from {module_name}"
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                unresolved.append(f"{where}: {exc}")
                continue
            for name in _split(clause):
                if not hasattr(module, name) and importlib.util.find_spec(f"{module_name}.{name}") is None:
                    unresolved.append(f"{where} import {name}: no such name")
    assert not unresolved, "\n".join(unresolved)
