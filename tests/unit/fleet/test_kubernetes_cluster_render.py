"""`kimik3 fleet render --target kubernetes` of replicas over several hosts (issue 41 item 4): a vllm.cluster /
sglang.cluster replica is one LeaderWorkerSet group of 1 + len(nodes) pods whose members meet at the LWS's addresses,
never the profile's; the leader runs the engine's head processes (vLLM: Ray's head, then the server, through the
constant launcher), each worker pod a node's. The schemas and the golden file: test_kubernetes_render.py
(tests/fixtures/kubernetes/fleet-vllm-cluster.yaml). No API server, LWS controller or Ray runs here: what a pod does
once scheduled is not tested, except the launcher's own process handling (below, with stand-in programs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.shipped import pinned_text

from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.targets.kubernetes import render_kubernetes
from kimik3_reconciler.fleet.targets.kubernetes_cluster import LEADER, LEADER_PROGRAM

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "tests" / "fixtures" / "kubernetes" / "fleet-vllm-cluster.yaml"
PROFILE = ROOT / "tests" / "cases" / "fleet" / "profiles" / "vllm-pp2.yaml"


def _profile_fleet(tmp_path: Path, profile: str, engine: str = "vllm") -> Path:
    """The example fleet over `profile` (written next to it), its clusters under `engine`'s section."""
    (tmp_path / "profile.yaml").write_text(profile)
    text = EXAMPLE.read_text().replace("../../cases/fleet/profiles/vllm-pp2.yaml", "profile.yaml")
    (tmp_path / "fleet.yaml").write_text(text.replace("    vllm:\n", f"    {engine}:\n"))
    return tmp_path / "fleet.yaml"


def _render(path: Path) -> dict:
    fleet = parse_fleet(path.read_text(), str(path), lambda p: pinned_text(Path(p)))
    (lws, *_) = render_kubernetes(fleet)
    return lws.body


def test_a_vllm_cluster_replica_is_one_group_of_its_hosts_pods() -> None:
    lws = _render(EXAMPLE)
    group = lws["spec"]["leaderWorkerTemplate"]
    assert (lws["spec"]["replicas"], group["size"], group["restartPolicy"]) == (2, 2, "RecreateGroupOnPodRestart")
    (leader,) = group["leaderTemplate"]["spec"]["containers"]
    (worker,) = group["workerTemplate"]["spec"]["containers"]
    # The leader: the constant launcher, Ray's head on the pod's own address, then the engine's server argv.
    assert leader["command"] == list(LEADER_PROGRAM)
    cut = leader["args"].index("--")
    head, server = leader["args"][:cut], leader["args"][cut + 1 :]
    # (Ray's head blocking or returning once up is the engine's choice: the launcher takes either.)
    assert head[:5] == ["ray", "start", "--head", "--node-ip-address", "$(K3_POD_IP)"]
    assert server[:2] == ["vllm", "serve"] and server[server.index("--distributed-executor-backend") + 1] == "ray"
    assert server[server.index("--pipeline-parallel-size") + 1] == "2"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in leader["env"]}
    assert leader["env"][0] == {"name": "K3_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert (env["RAY_ADDRESS"], env["VLLM_HOST_IP"]) == ("$(K3_POD_IP):6379", "$(K3_POD_IP)")
    # A worker: Ray's worker joining the leader at the LWS's address, the model mounted where the server names it.
    assert worker["command"][:4] == ["ray", "start", "--address", "$(LWS_LEADER_ADDRESS):6379"]
    assert "--block" in worker["command"] and "$(K3_POD_IP)" in worker["command"]
    assert worker["volumeMounts"] == leader["volumeMounts"]
    # GPUs per pod: each host's share of 8 × 2 ranks; readiness (and the serving port) on the leader only.
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == worker["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "readinessProbe" in leader and "readinessProbe" not in worker and "ports" not in worker
    # Each pod of the group fills its node's cache before it starts.
    assert group["workerTemplate"]["spec"]["initContainers"] == group["leaderTemplate"]["spec"]["initContainers"]
    # The profile's addresses (the hosts') reach no pod: the members meet at the LWS's.
    assert "10.0.1." not in json.dumps(lws)


def test_an_sglang_cluster_replica_ranks_its_worker_pods_by_the_lws_index(tmp_path: Path) -> None:
    path = _profile_fleet(tmp_path, pinned_text(ROOT / "profiles" / "sglang-tp8.yaml"), "sglang")
    group = _render(path)["spec"]["leaderWorkerTemplate"]
    (leader,) = group["leaderTemplate"]["spec"]["containers"]
    (worker,) = group["workerTemplate"]["spec"]["containers"]
    assert "command" not in leader  # one process: the server alone, rank 0
    flags = leader["args"]
    assert flags[flags.index("--nnodes") + 1 :][:5] == [
        "2",
        "--node-rank",
        "0",
        "--dist-init-addr",
        "$(K3_POD_IP):20000",
    ]
    argv = worker["command"]
    assert argv[:2] == ["sglang", "serve"] and argv[argv.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert argv[argv.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "4"  # tp 8 over two hosts
    assert "readinessProbe" not in worker


def test_a_profiles_own_dollar_paren_is_never_expanded_by_kubernetes(tmp_path: Path) -> None:
    """Only kimik3's own $(NAME) words are left for Kubernetes: a profile's `$(` reaches the server as written
    (Kubernetes' `$$(` escape), even where it spells one of the names the render uses."""
    extra = '\n  extra_args: [--override-generation-config, \'{"x": "$(K3_POD_IP)"}\']'
    profile = pinned_text(PROFILE).replace("  port: 8000", "  port: 8000" + extra, 1)
    group = _render(_profile_fleet(tmp_path, profile))["spec"]["leaderWorkerTemplate"]
    (leader,) = group["leaderTemplate"]["spec"]["containers"]
    assert leader["args"][-1] == '{"x": "$$(K3_POD_IP)"}'


def test_nodes_of_one_group_that_differ_are_refused_at_the_node(tmp_path: Path) -> None:
    """LWS makes every worker pod of a group from one template: a node with fewer GPUs than another is refused."""
    text = EXAMPLE.read_text().replace(
        'nodes: [{name: gpu-b, docker: "ssh://kimik3@10.0.1.12", bind: 10.0.1.12}]',
        'nodes: [{name: gpu-b, docker: "ssh://kimik3@10.0.1.12", bind: 10.0.1.12}, '
        '{name: gpu-e, docker: "ssh://kimik3@10.0.1.15", bind: 10.0.1.15, gpus: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}]',
    )
    path = tmp_path / "fleet.yaml"
    (tmp_path / "profile.yaml").write_text(
        pinned_text(PROFILE).replace("pipeline_parallel_size: 2", "pipeline_parallel_size: 3")
    )
    path.write_text(text.replace("../../cases/fleet/profiles/vllm-pp2.yaml", "profile.yaml"))
    with pytest.raises(ProfileError) as refused:
        _render(path)
    assert any(
        p.field == "overrides.gpu-a.vllm.cluster.nodes[1].gpus" and "one template" in p.message
        for p in refused.value.problems
    ), refused.value.problems


def _launcher(tmp_path: Path, head: str, server: str, alive: int) -> subprocess.CompletedProcess:
    """LEADER with stand-ins: `python3` on PATH answers the Ray node count `alive`; head and server are programs."""
    fake = tmp_path / "bin"
    fake.mkdir(parents=True)
    (fake / "python3").write_text(f"#!/bin/sh\necho {alive}\n")
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "LWS_GROUP_SIZE": "2"}
    argv = [sys.executable, "-c", LEADER, sys.executable, "-c", head, "--", sys.executable, "-c", server]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_the_leader_execs_the_server_once_every_pod_joined(tmp_path: Path) -> None:
    """Ray's head returning once up (the host rendering's) or blocking (`--block`): the server follows either way."""
    # (Ray's table counts a node that joined again once alive: more than the group's size is no reason to wait.)
    for head, alive in (("raise SystemExit(0)", 2), ("import time; time.sleep(2)", 3)):
        done = _launcher(tmp_path / head[:6], head, "import os; print(os.getppid()); raise SystemExit(7)", alive)
        # The server's own exit, and its parent is the test: it replaced the launcher (exec), not its child.
        assert (done.returncode, done.stdout.strip()) == (7, str(os.getpid()))


def test_the_leader_ends_when_rays_head_fails_before_any_server(tmp_path: Path) -> None:
    done = _launcher(tmp_path, "raise SystemExit(3)", "print('served')", alive=1)
    assert done.returncode == 3 and "served" not in done.stdout


def test_the_waiting_leader_ends_on_sigterm(tmp_path: Path) -> None:
    """As its pod's PID 1 an unhandled SIGTERM would be ignored (the pod waits out its grace period): its handler
    exits 143, where an unhandled one here would die by the signal (-15)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 1\n")  # one node alive of the group's 2: it waits
    (fake / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "LWS_GROUP_SIZE": "2"}
    argv = [sys.executable, "-c", LEADER, sys.executable, "-c", "raise SystemExit(0)", "--", "true"]
    leader = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    assert "waiting for 2 Ray nodes" in leader.stderr.readline()
    leader.send_signal(signal.SIGTERM)
    assert leader.wait(timeout=30) == 143
