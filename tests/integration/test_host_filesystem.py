"""The cache dir's filesystem through the real Linux adapter: a tmpfs mounted here, reached through a
symlink, is what observe reports (the host gate judges the type; a network one warns)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.demo_work import tmpfs

from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.observe.host import collect_filesystem


@pytest.fixture
def mounted(tmp_path: Path):
    target = tmp_path / "k3hf-mnt"
    target.mkdir()
    with tmpfs(target, "k3hf-cache", required=False, lazy=False):
        yield target


def test_a_cache_dir_behind_a_symlink_is_found_on_its_real_mount(mounted: Path, tmp_path: Path) -> None:
    link = tmp_path / "hub-link"
    os.symlink(mounted, link)
    fact = collect_filesystem(LinuxHost(), str(link / "hub" / "not-created-yet"))
    assert fact is not None
    assert (fact.fstype, fact.source, fact.mountpoint) == ("tmpfs", "k3hf-cache", str(mounted.resolve()))
    assert fact.path == str(mounted.resolve() / "hub" / "not-created-yet")
