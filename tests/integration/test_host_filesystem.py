"""The cache dir's filesystem through the real Linux adapter: a tmpfs mounted here, reached through a
symlink, is what observe reports (the host gate judges the type; a network one warns)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.observe.host import collect_filesystem


@pytest.fixture
def mounted(tmp_path: Path):
    target = tmp_path / "k3hf-mnt"
    target.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "k3hf-cache", str(target)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_cache_dir_behind_a_symlink_is_found_on_its_real_mount(mounted: Path, tmp_path: Path) -> None:
    link = tmp_path / "hub-link"
    os.symlink(mounted, link)
    fact = collect_filesystem(LinuxHost(), str(link / "hub" / "not-created-yet"))
    assert fact is not None
    assert (fact.fstype, fact.source, fact.mountpoint) == ("tmpfs", "k3hf-cache", str(mounted.resolve()))
    assert fact.path == str(mounted.resolve() / "hub" / "not-created-yet")
