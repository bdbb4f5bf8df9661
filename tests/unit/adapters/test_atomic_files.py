"""adapters/atomic_files.write_atomically: the one writer of state records, cache entries and unit files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kimik3_reconciler.adapters.atomic_files import write_atomically


def test_the_file_appears_whole_with_the_mode_asked_and_no_temp_file_left(tmp_path: Path) -> None:
    unit = tmp_path / "etc" / "systemd" / "system" / "k3.service"  # the folder is made
    write_atomically(unit, "[Unit]\nDescription=k3 é\n", mode=0o644)
    assert unit.read_text(encoding="utf-8") == "[Unit]\nDescription=k3 é\n"
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    write_atomically(unit, "replaced\n", durable=True)
    assert unit.read_text() == "replaced\n"
    assert stat.S_IMODE(unit.stat().st_mode) == 0o600  # mkstemp's, when no mode is asked
    assert sorted(p.name for p in unit.parent.iterdir()) == ["k3.service"]


def test_a_failed_write_raises_and_leaves_the_old_file_and_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    record = tmp_path / "record.json"
    record.write_text("old")

    def full(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202 - os.replace on a full or read-only disk
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        write_atomically(record, "new", durable=True)
    assert record.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
