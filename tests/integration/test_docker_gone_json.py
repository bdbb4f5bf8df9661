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
from support.realparts import KIMIK3, demo_hub, demo_profile, wait_for, write_profile

from kimik3_reconciler.adapters.docker_socket import engine_socket

pytestmark = pytest.mark.docker

NAME_BUILD, PORT_BUILD = "k3dj-build", 19390
NAME_DOWNLOAD, PORT_DOWNLOAD = "k3dj-download", 19391
BUILD_MARK = "kimik3: i39 slow build"  # a build line apply logs at info (steps/image.py: "kimik3:" lines)


def _slow_dockerfile(work: Path) -> Path:
    """A Dockerfile that says it started, then sleeps: the build is mid-stream for a minute. A nonce keeps
    Docker's layer cache from answering it."""
    path = work / "Dockerfile.slow"
    path.write_text("ARG BUILD_IMAGE\nFROM ${BUILD_IMAGE}\n"
                    f"RUN echo '{BUILD_MARK} {uuid.uuid4().hex}' && sleep 60\n")
    return path


class _Apply:
    """`kimik3 apply --json` with DOCKER_HOST at the relay; stderr read line by line as it comes."""

    def __init__(self, work: Path, relay: DockerRelay, dockerfile: Path):
        env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "state"), "HF_HOME": str(work / "hf-home"),
               "KIMIK3_HOST_LOCK": str(work / "host.lock"), "DOCKER_HOST": f"unix://{relay.path}"}
        self.proc = subprocess.Popen([*KIMIK3, "--dockerfile", str(dockerfile), "apply", "--json", "profile.yaml"],
                                     cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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


def test_the_daemon_gone_mid_build_gives_one_json_error(tmp_path: Path) -> None:
    relay = _relay(tmp_path)
    try:
        with demo_hub() as hub:
            write_profile(tmp_path, demo_profile(tmp_path, NAME_BUILD, PORT_BUILD, hub.url))
            apply = _Apply(tmp_path, relay, _slow_dockerfile(tmp_path))
            wait_for("the build's RUN step", lambda: apply.said(BUILD_MARK) or apply.proc.poll() is not None,
                     timeout=600)
            assert apply.proc.poll() is None, "".join(apply.err)[-3000:]
            relay.vanish()
            code, out, err = apply.finish(timeout=300)
    finally:
        relay.close()
        subprocess.run(["docker", "rm", "-f", NAME_BUILD], capture_output=True)
    error = _one_json_error(code, out, err, 1)
    print(f"\n{error['type']}: {error['message']}")
    assert "docker" in error["message"], error


def test_the_daemon_gone_mid_download_gives_one_json_error(tmp_path: Path) -> None:
    relay = _relay(tmp_path)
    try:
        with demo_hub() as hub:
            write_profile(tmp_path, demo_profile(tmp_path, NAME_DOWNLOAD, PORT_DOWNLOAD, hub.url))
            hub.faults.bytes_per_second = 256 << 10  # the shards take seconds: the socket goes while they come
            apply = _Apply(tmp_path, relay, _slow_dockerfile(tmp_path))
            wait_for("the download", lambda: sum(hub.faults.served.values()) > 0 or apply.proc.poll() is not None,
                     timeout=300, interval=0.05)
            assert apply.proc.poll() is None, "".join(apply.err)[-3000:]
            relay.vanish()
            hub.faults.bytes_per_second = None
            # The build after the download finds no daemon: its calls ride out a restart for 90 s, then fail.
            code, out, err = apply.finish(timeout=400)
    finally:
        relay.close()
        subprocess.run(["docker", "rm", "-f", NAME_DOWNLOAD], capture_output=True)
    error = _one_json_error(code, out, err, 1)
    print(f"\n{error['type']}: {error['message']}")
    assert "docker" in error["message"], error
