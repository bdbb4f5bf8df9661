"""Every test module's file name is unique across tests/: pytest imports them by basename (rootdir-relative
`sys.path` insertion, no packages), so a second `test_x.py` in another folder stops collection of the whole run with
"import file mismatch" (seen: CI's stage 1 stopped after 10 s on tests/unit/fleet/test_fleet_slurm.py beside
tests/integration/test_fleet_slurm.py)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_file_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        where[path.name].append(path.relative_to(TESTS).as_posix())
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
