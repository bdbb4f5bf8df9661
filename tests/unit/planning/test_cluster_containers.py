"""A replica over several hosts as containers (planning/cluster_render.py): the head's container runs Ray's head and
then the server through a constant bash script whose every profile value is an argument (run here by the real bash:
the argv arrive as written, quotes and `$` included, in order, and the server is exec'd); a node's member container is
the engine's node argv, the head's image, environment (the node's own VLLM_HOST_IP), model mount and restart policy,
on the node's GPUs, fingerprinted; SGLang's head keeps its one server argv."""

from __future__ import annotations

import subprocess

from support.observed import observed

from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.model.labels import MEMBER_FINGERPRINT
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.cluster_render import HEAD_SCRIPT, rendered_members
from kimik3_reconciler.planning.launch import render_launch

HOST = HostFacts(physical_cores=16, cpu_flags=("avx512f",))
PROFILE = """apiVersion: kimik3/v1
name: kimi-k3
engine: {engine}
model: {{repo: moonshotai/Kimi-K3, revision: 0123456789abcdef0123456789abcdef01234567}}
image: {{ref: "vllm/vllm-openai:kimi-k3@sha256:{digest}"}}
gpus: all
{engine}:
{knobs}  cluster:
    bind: 10.0.0.1
    nodes:
      - {{name: gpu2, docker: "ssh://kimik3@10.0.0.2", bind: 10.0.0.2, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}}
"""
VLLM_KNOBS = "  tensor_parallel_size: 8\n  pipeline_parallel_size: 2\n"
SGLANG_KNOBS = (
    "  mamba_full_memory_ratio: 0.9\n  workload: {prompt_tokens: 4000, output_tokens: 1000}\n"
    "  tp_size: 16\n  dcp_size: 8\n  pp_size: 1\n"
)


def _launch(engine: str = "vllm", knobs: str = VLLM_KNOBS, digest: str = "1" * 64):
    profile = parse_profile(PROFILE.format(engine=engine, knobs=knobs, digest=digest), "p.yaml").profile
    return profile, render_launch(profile, observed(profile, host=HOST), profile.image.ref, profile.image.digest)


def test_the_head_script_runs_each_argv_as_written_then_execs_the_last() -> None:
    odd = ["a b", "$HOME", "'q'", "--", ";", "x\ny"]
    done = subprocess.run(
        [
            "bash",
            "-c",
            HEAD_SCRIPT,
            "kimik3-head",
            "2",
            "printf",
            "first:%s\n",
            str(len(odd) + 2),
            "printf",
            "%s|\n",
            *odd,
            "--",
            "printf",
            "last:%s\n",
            "z",
        ],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    assert done.stdout == "first:\n" + "".join(f"{a}|\n" for a in odd) + "last:z\n"


def test_a_failing_first_process_stops_the_head_before_the_server() -> None:
    done = subprocess.run(
        ["bash", "-c", HEAD_SCRIPT, "kimik3-head", "1", "false", "--", "echo", "server"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert done.returncode == 1 and "server" not in done.stdout


def test_the_vllm_head_runs_rays_head_then_the_server_in_one_container() -> None:
    _, launch = _launch()
    head = launch.cluster[0]
    (ray_head, server) = head.processes
    spec = launch.spec
    assert spec.entrypoint == ("bash", "-c", HEAD_SCRIPT, "kimik3-head")
    assert spec.command == (str(len(ray_head.command)), *ray_head.command, "--", *server.command)
    assert "--block" not in ray_head.command  # it returns once Ray's head is up: the server follows
    assert server.command[:2] == ("vllm", "serve")


def test_a_node_member_is_its_ray_worker_on_the_heads_image_mount_and_env() -> None:
    profile, launch = _launch()
    ((node, _, member, digest),) = rendered_members(profile, launch)
    assert member.name == "kimi-k3-node-gpu2" and member.image == launch.spec.image
    assert (*member.entrypoint, *member.command) == node.processes[0].command
    assert member.command[-1] == "--block"  # the container's main process: it exits when Ray does
    assert member.mounts == launch.spec.mounts[:1] and member.mounts[0].read_only  # the model at the head's path
    env = dict(member.env)
    assert env["VLLM_HOST_IP"] == "10.0.0.2" and env["RAY_ADDRESS"] == "10.0.0.1:6379"
    assert member.gpus == tuple(str(g) for g in range(8)) and member.network_mode == "host"
    assert dict(member.labels)[MEMBER_FINGERPRINT] == digest


def test_a_members_fingerprint_moves_with_the_image_and_not_otherwise() -> None:
    profile, launch = _launch()
    _, again = _launch()
    _, moved = _launch(digest="2" * 64)
    assert rendered_members(profile, launch)[0][3] == rendered_members(profile, again)[0][3]
    assert rendered_members(profile, launch)[0][3] != rendered_members(profile, moved)[0][3]


def test_the_sglang_head_keeps_its_one_server_and_a_node_runs_it_at_its_rank() -> None:
    profile, launch = _launch("sglang", SGLANG_KNOBS)
    assert launch.spec.entrypoint is None and launch.spec.command == launch.cluster[0].processes[0].command
    ((node, _, member, _),) = rendered_members(profile, launch)
    argv = (*member.entrypoint, *member.command)
    assert argv == node.processes[0].command and argv[argv.index("--node-rank") + 1] == "1"
