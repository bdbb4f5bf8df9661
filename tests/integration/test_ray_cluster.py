"""A real Ray cluster of two nodes started from the commands kimik3 renders for `vllm.cluster` (issue 41 item 4), on
this one host: the head's `ray start --head` and the node's `ray start --address`, each with its own address on
loopback (127.0.0.2, 127.0.0.3: Ray takes them as written; 127.0.0.1 it replaces with the host's own address) and
its own session folder (TMPDIR; on two hosts each has its own /tmp). Ray's node table (kimik3's observation,
observe/cluster.py's RAY_NODES run through the head) shows both joined; the node's `ray start` is then stopped, and
the observation names it missing. The reads started no driver: Ray's job table stays empty.

Not run here: vLLM's server on this cluster (the CPU build's Ray executor with two nodes), and the containers kimik3
would start for it. Ray comes from the `cluster` extra (`pip install -e .[cluster]`); without it the test skips (and
fails in CI's engines stage, which installs it)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.observed import observed

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.cluster import RAY_NODES, missing, ray_alive
from kimik3_reconciler.planning.launch import render_launch

HEAD, NODE = "127.0.0.2", "127.0.0.3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HEAD, 0))
        return s.getsockname()[1]


def _profile(port: int) -> str:
    return f"""apiVersion: kimik3/v1
name: k3-ray
engine: vllm
model: {{repo: kimik3-demo/Kimi-K3-tiny, revision: {"a" * 40}}}
image: {{ref: "vllm/vllm-openai:kimi-k3@sha256:{"b" * 64}"}}
gpus: none
vllm: {{tensor_parallel_size: 1, pipeline_parallel_size: 2, attention_backend: null,
       cluster: {{bind: {HEAD}, port: {port}, nodes: [{{name: node2, docker: "ssh://k3@{NODE}", bind: {NODE}}}]}}}}
"""


def _start(command: tuple[str, ...], session: Path, log: Path) -> subprocess.Popen:
    # The rendered argv as it is, `ray` found beside this Python (the venv's console script).
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "TMPDIR": str(session), "PATH": path, "RAY_USAGE_STATS_ENABLED": "0"}
    session.mkdir()
    return subprocess.Popen(
        list(command), env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(process: subprocess.Popen) -> None:
    """The process group (`ray start --block` and the raylet, GCS, workers it started): TERM, then KILL."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _observe(port: int, session: Path) -> frozenset[str]:
    env = {**os.environ, "RAY_ADDRESS": f"{HEAD}:{port}", "TMPDIR": str(session), "RAY_USAGE_STATS_ENABLED": "0"}
    command = (sys.executable, *RAY_NODES[1:])  # RAY_NODES runs `python3` in the head's container; here, this venv's
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return ray_alive(done.stdout)


def _jobs(port: int) -> int:
    """The rows of Ray's job table (one per driver that ever connected), read the same driverless way."""
    read = f"from ray._raylet import GcsClient; print(len(GcsClient(address='{HEAD}:{port}').get_all_job_info(timeout=30)))"
    done = subprocess.run((sys.executable, "-c", read), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.strip().splitlines()[-1])


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(1)


@pytest.fixture
def short_dir() -> Path:
    """A session folder short enough for Ray's unix sockets (107 bytes: pytest's tmp_path is too long)."""
    folder = Path(tempfile.mkdtemp(prefix="k3ray-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.engines  # CI's engines stage installs the cluster extra (scripts/test-engines.sh)
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is the cluster extra's (pip install -e .[cluster])"
)
def test_rendered_ray_commands_make_a_cluster_and_a_stopped_node_is_missing(short_dir: Path) -> None:
    tmp_path = short_dir
    assert shutil.which("ray", path=str(Path(sys.executable).parent)), "the ray console script"
    port = _free_port()
    profile = parse_profile(_profile(port), "p.yaml").profile
    launch = render_launch(profile, observed(profile), profile.image.ref, profile.image.digest)
    nodes = engine_for("vllm").cluster_launch(launch.input, "/models/snapshot")
    head, node2 = nodes
    # The head's `ray start --head` returns once up (the server follows it in the head's container); run alone here,
    # it is kept in the foreground so that its process group is what the test stops.
    ray_head = (*next(p.command for p in head.processes if p.role == "ray-head"), "--block")
    (ray_worker,) = (p.command for p in node2.processes)
    started = []
    try:
        started.append(_start(ray_head, tmp_path / "head", tmp_path / "head.log"))
        _until(lambda: _port_open(port) or started[0].poll() is not None, 90, f"Ray's head on {HEAD}:{port}")
        assert started[0].poll() is None, "Ray's head exited (its log below)"
        started.append(_start(ray_worker, tmp_path / "node2", tmp_path / "node2.log"))

        def joined() -> frozenset[str] | bool:
            if started[1].poll() is not None:
                return True  # the node's `ray start` exited: said below, not waited on
            alive = _observe(port, tmp_path / "head")
            return alive >= {HEAD, NODE} and alive

        alive = _until(joined, 120, "both nodes alive")
        assert started[1].poll() is None, "the node's `ray start` exited (its log below)"
        assert missing(nodes, alive) == ()
        # The node's member dies (its container stopped, its host gone): Ray marks its raylet dead, the observation
        # names the member missing, while the head is still there.
        _stop(started[1])
        alive = _until(lambda: NODE not in (a := _observe(port, tmp_path / "head")) and a, 90, "node2 seen dead")
        assert missing(nodes, alive) == ("node2",) and HEAD in alive
        # Each read went to the GCS with a plain client: no driver joined, so Ray's job table holds no job of them
        # (`ray.init()` added one per read: per `plan`, `status` and reconcile pass).
        assert _jobs(port) == 0
    finally:
        for process in reversed(started):
            _stop(process)
        for log in ("head.log", "node2.log"):
            if (tmp_path / log).exists():
                print(f"--- {log}\n" + (tmp_path / log).read_text(errors="replace")[-3000:])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HEAD, port)) == 0
