"""The dashboard and docs/operations.md name the exporter's series as the code writes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = "\n".join(p.read_text() for p in (ROOT / "kimik3_reconciler" / "exporter").glob("*.py"))
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def base(name: str) -> str:
    return re.sub(r"_(bucket|sum|count|total)$", "", name)


def test_every_dashboard_series_is_exported_and_documented() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-kimik3.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"kimik3_[a-z_]+", e)}
    assert len(names) > 20
    for name in names:
        assert f'"{base(name)}' in SOURCES, f"{name}: the dashboard reads a series no exporter module writes"
        assert base(name) in OPERATIONS, f"{name}: not named in docs/operations.md"


def test_every_exported_series_is_documented() -> None:
    written = set(re.findall(r'"(kimik3_[a-z_]+)"', SOURCES))
    assert len(written) > 25
    missing = sorted(n for n in written if n not in OPERATIONS)
    assert not missing, f"docs/operations.md 'Metrics' does not name {missing}"
