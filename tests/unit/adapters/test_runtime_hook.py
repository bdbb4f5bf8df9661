"""LinuxHost.runtime_hook: the toolkit's nvidia-container-runtime-hook, executable, in one of the folders of the
PATH the running dockerd has (its /proc/<pid>/environ, its pid from the pid file beside its socket), systemd's
default PATH where that cannot be read: what moby's nvidia device driver (`--gpus`) looks up when dockerd starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimik3_reconciler.adapters import host_linux
from kimik3_reconciler.adapters.host_linux import LinuxHost

HOOK = "nvidia-container-runtime-hook"


def _hook_in(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    hook = folder / HOOK
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    return hook


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A process named dockerd whose PATH is one folder of tmp_path (the hook's folder, made by the test), its pid
    in docker.pid beside docker.sock, as dockerd writes them (/var/run, or $XDG_RUNTIME_DIR when rootless)."""
    run, own = tmp_path / "run", tmp_path / "dockerd-bin"
    run.mkdir()
    dockerd = tmp_path / "dockerd"
    dockerd.symlink_to(sys.executable)  # comm (the name /proc shows) is dockerd
    proc = subprocess.Popen(
        [str(dockerd), "-c", "import time; time.sleep(60)"], env={"PATH": f"{own}:{tmp_path / 'gone'}"}
    )
    try:
        # vfork: Popen may return before the kernel names the child (exec sets comm after waking the parent).
        deadline = time.monotonic() + 5
        while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "dockerd" and time.monotonic() < deadline:
            time.sleep(0.01)
        (run / "docker.pid").write_text(f"{proc.pid}\n")
        yield run / "docker.sock", own
    finally:
        proc.kill()
        proc.wait()


def test_the_hook_counts_only_executable_in_systemds_path_where_dockerds_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, other = tmp_path / "usr-bin", tmp_path / "opt-bin"
    bin_dir.mkdir(), other.mkdir()
    monkeypatch.setattr(host_linux, "_DOCKERD_PATH", (str(tmp_path / "absent"), str(bin_dir)))
    nowhere = f"unix://{tmp_path}/no-daemon/docker.sock"  # no pid file beside it: dockerd's PATH unknown
    assert LinuxHost(nowhere).runtime_hook() is False
    hook = bin_dir / HOOK
    hook.write_text("#!/bin/sh\n")
    assert LinuxHost(nowhere).runtime_hook() is False  # not executable: dockerd's LookPath skips it
    hook.chmod(0o755)
    assert LinuxHost(nowhere).runtime_hook() is True
    (other / HOOK).write_text("")
    monkeypatch.setattr(host_linux, "_DOCKERD_PATH", (str(other),))
    assert LinuxHost(nowhere).runtime_hook() is False
    monkeypatch.setattr(host_linux, "_DOCKERD_PATH", (str(bin_dir),))
    assert LinuxHost(nowhere).runtime_hook() is True
    # A daemon reached over ssh:// or tcp:// runs on another host: the hook on this one's disk says nothing of it.
    assert LinuxHost("ssh://k3@10.0.0.2").runtime_hook() is False
    assert LinuxHost("tcp://10.0.0.2:2376").runtime_hook() is False


def test_the_running_dockerds_own_path_is_the_one_searched(
    daemon: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dockerd started by hand or by a script (this machine's: root's login PATH) or a rootless one (the PATH
    dockerd-rootless-setuptool.sh wrote into its unit) has its own PATH, not systemd's: the hook counts on that one."""
    socket, own = daemon
    systemd = tmp_path / "systemd-bin"
    monkeypatch.setattr(host_linux, "_DOCKERD_PATH", (str(systemd),))
    _hook_in(systemd)
    assert LinuxHost(f"unix://{socket}").runtime_hook() is False  # on systemd's PATH, not on this dockerd's
    _hook_in(own)
    assert LinuxHost(f"unix://{socket}").runtime_hook() is True
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket}")
    assert LinuxHost().runtime_hook() is True  # DOCKER_HOST names the daemon where --docker-host does not


def test_a_stale_pid_file_is_not_taken_for_dockerd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pid file outlives a dockerd that died, and its pid may be another process's now: systemd's PATH then."""
    run, systemd = tmp_path / "run", tmp_path / "systemd-bin"
    run.mkdir()
    (run / "docker.pid").write_text(f"{os.getpid()}\n")  # this test's python, not a dockerd
    monkeypatch.setattr(host_linux, "_DOCKERD_PATH", (str(systemd),))
    _hook_in(systemd)
    assert LinuxHost(f"unix://{run / 'docker.sock'}").runtime_hook() is True
