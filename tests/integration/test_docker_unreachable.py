"""No Docker daemon behind DOCKER_HOST: `kimik3 plan` fails at once, saying so, instead of retrying for 90 s as
for a daemon that is restarting (a socket that answered earlier in the run). Needs no daemon at all."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from support.background import Background
from support.fakes import FAKE_PROFILE
from support.realparts import KIMIK3


def plan_with_docker_host(work: Path, docker_host: str) -> tuple[subprocess.CompletedProcess[str], float]:
    (work / "src.tar.gz").write_bytes(b"source")
    (work / "profile.yaml").write_text(FAKE_PROFILE)
    env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "state"), "DOCKER_HOST": docker_host}
    started = time.monotonic()
    result = subprocess.run(
        [*KIMIK3, "plan", "profile.yaml"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    return result, time.monotonic() - started


def test_a_missing_docker_socket_fails_at_once_naming_it(tmp_path: Path) -> None:
    result, elapsed = plan_with_docker_host(tmp_path, f"unix://{tmp_path}/k3un-no-such.sock")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"no docker daemon: unix://{tmp_path}/k3un-no-such.sock does not exist (is dockerd running?" in result.stderr
    assert "docker-retry" not in result.stderr and elapsed < 15, f"{elapsed:.1f} s"


def test_a_socket_nobody_accepts_on_is_retried_as_a_restarting_daemon(tmp_path: Path, background: Background) -> None:
    """Connection refused on an existing socket is what a daemon restarting looks like: kimik3 says it retries."""
    path = tmp_path / "k3un-dead.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: ECONNREFUSED
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "profile.yaml").write_text(FAKE_PROFILE)
    proc = background.kimik3(tmp_path, "plan", "profile.yaml", DOCKER_HOST=f"unix://{path}")
    try:
        time.sleep(6)  # long enough for the first retries, far short of the 90 s window
        assert proc.poll() is None, "gave up on a refused socket before the restart window"
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert "docker-retry" in err and "kimik3 keeps trying for 90 s in all" in err
