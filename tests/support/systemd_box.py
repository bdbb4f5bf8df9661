"""systemd as PID 1 in a container (TESTING.md section 6), for the integration tests that drive real units: the
image ensured, the box started and waited for until systemd runs, its root filesystem (overlay2's merged dir) as this
machine sees it. Each module starts a box of its own name; `rm` names the containers to remove with it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from support.realparts import REPO_ROOT, docker, require_docker_and_demo_hub, wait_for

IMAGE = "kimik3-test/systemd:bookworm"
DOCKER_STAND_IN = """[Unit]
Description=the host's dockerd, reached through the mounted socket (test stand-in for docker.service)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/docker version
"""


def in_box(box: str, *args: str, check: bool = True, timeout: float = 120) -> str:
    """What `args` print in the box; one that exits non-zero fails the test unless `check` is off."""
    result = subprocess.run(["docker", "exec", box, *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode:
        raise AssertionError(f"{' '.join(args)} in {box} exited {result.returncode}: {result.stderr}")
    return result.stdout.strip()


def start_box(box: str, *run_args: str, rm: tuple[str, ...] = (), network: str = "host") -> Path:
    """Start `box` (those named in `rm` removed first, as a run before left them), with `run_args` before the image
    (mounts); returns its root filesystem once systemd in it runs."""
    require_docker_and_demo_hub()
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "ensure-systemd-image.sh")], check=True)
    remove(box, *rm)
    docker(
        "run",
        "-d",
        "--name",
        box,
        "--cap-add",
        "SYS_ADMIN",
        "--security-opt",
        "seccomp=unconfined",
        "--network",
        network,
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        "-v",
        "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        *run_args,
        IMAGE,
    )
    wait_for(
        "systemd in the box",
        lambda: in_box(box, "systemctl", "is-system-running", check=False) in ("running", "degraded"),
        timeout=60,
    )
    return Path(docker("inspect", "-f", "{{.GraphDriver.Data.MergedDir}}", box))


def host_docker(*extra: str) -> tuple[str, ...]:
    """`docker run` mounts that let the box's units drive this machine's dockerd: its socket and its CLI."""
    cli = Path(shutil.which("docker") or "/usr/bin/docker").resolve()
    return ("-v", "/var/run/docker.sock:/var/run/docker.sock", "-v", f"{cli}:/usr/bin/docker:ro", *extra)


def with_docker_service(box: str, root: Path, present: bool) -> None:
    """The box's systemd does not run dockerd (the host's does): a stand-in unit says it is there (or, taken away,
    that it is not)."""
    stand_in = root / "etc/systemd/system/docker.service"
    if stand_in.exists() == present:
        return
    if present:
        stand_in.write_text(DOCKER_STAND_IN)
    else:
        stand_in.unlink()
    in_box(box, "systemctl", "daemon-reload")


def remove(*containers: str) -> None:
    subprocess.run(["docker", "rm", "-f", *containers], capture_output=True)
