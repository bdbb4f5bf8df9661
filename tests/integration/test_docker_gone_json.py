"""The JSON and exit contracts when the Docker daemon goes away under `kimik3 apply --json` (issue 39 item 5).

The daemon is taken away from this apply alone: DOCKER_HOST points at a relay socket (support/docker_relay.py) in
front of the real dockerd, and the relay's socket is removed with every connection through it cut. The shared
dockerd is never touched. Mid-build: the image build's stream is cut while a RUN step sleeps (a Dockerfile of this
test's, on the offline base image; nothing is compiled). Mid-download: the socket goes while the model is still
coming from the (throttled) fixture hub; the build that follows finds no daemon. Either way stdout holds exactly one
JSON document, `{"ok": false, "error": {...}}` with the table's exit code (1: a step failed), and stderr no
traceback.

Names and ports are this module's own (k3dj-*, 19390-19391)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from support.docker_relay import DockerRelay
from support.realparts import KIMIK3, demo_hub, demo_profile, remove_leftovers, wait_for, write_profile

from kimik3_reconciler.adapters.docker_socket import engine_socket

pytestmark = pytest.mark.docker

NAME_BUILD, PORT_BUILD = "k3dj-build", 19390
NAME_DOWNLOAD, PORT_DOWNLOAD = "k3dj-download", 19391
BUILD_MARK = "kimik3: i39 slow build"  # a build line apply logs at info (steps/image.py: "kimik3:" lines)


def _slow_dockerfile(work: Path) -> Path:
    """A Dockerfile that says it started, then sleeps: the build is mid-stream for a minute. A nonce keeps
    Docker's layer cache from answering it."""
    path = work / "Dockerfile.slow"
    path.write_text(f"ARG BUILD_IMAGE\nFROM ${{BUILD_IMAGE}}\nRUN echo '{BUILD_MARK} {uuid.uuid4().hex}' && sleep 60\n")
    return path


class _Apply:
    """`kimik3 apply --json` with DOCKER_HOST at the relay; stderr read line by line as it comes."""

    def __init__(self, work: Path, relay: DockerRelay, dockerfile: Path):
        env = {
            **os.environ,
            "KIMIK3_STATE_DIR": str(work / "state"),
            "HF_HOME": str(work / "hf-home"),
            "KIMIK3_HOST_LOCK": str(work / "host.lock"),
            "DOCKER_HOST": f"unix://{relay.path}",
        }
        self.proc = subprocess.Popen(
            [*KIMIK3, "--dockerfile", str(dockerfile), "apply", "--json", "profile.yaml"],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err: list[str] = []
        self._reader = threading.Thread(target=self._read_err, daemon=True)
        self._reader.start()

    def _read_err(self) -> None:
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.err.append(line)

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.err))

    def finish(self, timeout: float) -> tuple[int, str, str]:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
        self._reader.join(timeout=10)
        return self.proc.returncode, out, "".join(self.err)


def _one_json_error(code: int, out: str, err: str, exit_code: int) -> dict:
    assert "Traceback" not in err, err[-3000:]
    document = json.loads(out)  # exactly one document: json.loads refuses anything after it
    assert document["ok"] is False and document["error"]["exit_code"] == exit_code == code, (code, out, err[-2000:])
    return document["error"]


def _relay(work: Path) -> DockerRelay:
    upstream = engine_socket(None)
    assert upstream, "the tests' dockerd listens on a unix socket"
    relay = DockerRelay(work / "docker.sock", upstream)
    relay.forward()
    return relay


def _apply_losing_docker(work: Path, name: str, port: int, when: str, timeout: float) -> dict:
    """`apply --json` of the demo profile as `name` on `port` through a relay, the relay taken away `when` ("build":
    the RUN step is running; "download": the throttled hub has started sending). Its JSON error, once checked."""
    remove_leftovers(name)
    relay = _relay(work)
    try:
        with demo_hub() as hub:
            write_profile(work, demo_profile(work, name, port, hub.url))
            if when == "download":
                hub.faults.bytes_per_second = 256 << 10  # the shards take seconds: the socket goes while they come
            apply = _Apply(work, relay, _slow_dockerfile(work))
            started = (
                (lambda: apply.said(BUILD_MARK)) if when == "build" else (lambda: sum(hub.faults.served.values()) > 0)
            )
            wait_for(f"the {when}", lambda: started() or apply.proc.poll() is not None, timeout=600, interval=0.05)
            assert apply.proc.poll() is None, "".join(apply.err)[-3000:]
            relay.vanish()
            hub.faults.bytes_per_second = None
            code, out, err = apply.finish(timeout=timeout)
    finally:
        relay.close()
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    error = _one_json_error(code, out, err, 1)
    print(f"\n{error['type']}: {error['message']}")
    return error


def test_the_daemon_gone_mid_build_gives_one_json_error(tmp_path: Path) -> None:
    """The build's stream cut: urllib3's ProtocolError escaped as a traceback with an empty stdout (issue 39)."""
    error = _apply_losing_docker(tmp_path, NAME_BUILD, PORT_BUILD, "build", timeout=300)
    assert error["type"] == "TransientError" and "docker daemon not answering" in error["message"], error


def test_the_daemon_gone_mid_download_gives_one_json_error(tmp_path: Path) -> None:
    """The download goes on (the hub is not Docker); the build after it finds no daemon, rides out a restart for
    90 s (docker_engine.DAEMON_RESTART_S), then fails naming the socket."""
    error = _apply_losing_docker(tmp_path, NAME_DOWNLOAD, PORT_DOWNLOAD, "download", timeout=400)
    assert error["type"] == "TransientError" and "docker.sock is gone" in error["message"], error
