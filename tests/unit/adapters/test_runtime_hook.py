"""LinuxHost.runtime_hook: the toolkit's nvidia-container-runtime-hook, executable, in one of the folders of
dockerd's PATH (systemd's default): what dockerd's `--gpus` goes through when no nvidia runtime is registered."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3_reconciler.adapters import host_linux
from kimik3_reconciler.adapters.host_linux import LinuxHost


def test_the_hook_counts_only_executable_in_dockerds_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir, other = tmp_path / "usr-bin", tmp_path / "opt-bin"
    bin_dir.mkdir(), other.mkdir()
    monkeypatch.setattr(host_linux, "_DOCKERD_PATH", (str(tmp_path / "absent"), str(bin_dir)))
    assert LinuxHost().runtime_hook() is False
    hook = bin_dir / "nvidia-container-runtime-hook"
    hook.write_text("#!/bin/sh\n")
    assert LinuxHost().runtime_hook() is False  # not executable: dockerd's LookPath skips it
    hook.chmod(0o755)
    assert LinuxHost().runtime_hook() is True
    (other / "nvidia-container-runtime-hook").write_text("")
    monkeypatch.setattr(host_linux, "_DOCKERD_PATH", (str(other),))
    assert LinuxHost().runtime_hook() is False
