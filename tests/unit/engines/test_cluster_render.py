"""A replica over several hosts (vllm.cluster, sglang.cluster), as each engine renders it host by host
(`ServingEngine.cluster_launch`): vLLM on Ray (the head's `ray start --head` and the server with
`--distributed-executor-backend ray`, a `ray start --address` per node), SGLang's own multi-node flags (the same
server at each node's rank). Every argv is a list from the profile's values, and each is accepted by the engine's
own parser: vLLM's (tests/support/vllm_parse.py in the vLLM venv) and SGLang's ServerArgs (in the SGLang venv), as
test_vllm_render.py and test_sglang_argv.py do for one host; skipped, saying why, where a venv is absent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.observed import observed

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.launch import render_launch

ROOT = Path(__file__).resolve().parents[3]
HOST = HostFacts(physical_cores=16, cpu_flags=("avx512f",))
VLLM_PYTHON = Path(os.environ.get("KIMIK3_VLLM_PYTHON", "/work/venv-vllm/bin/python"))
SGLANG_PYTHON = Path(os.environ.get("KIMIK3_SGLANG_PYTHON", "/work/venv-sglang/bin/python"))
REVISION = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "1" * 64

CLUSTER = """  cluster:
    bind: 10.0.0.1
{port}    nodes:
      - {{name: gpu2, docker: "ssh://kimik3@10.0.0.2", bind: 10.0.0.2}}
"""


def _profile(engine: str, image: str, knobs: str, port: str = "") -> str:
    head = f"apiVersion: kimik3/v1\nname: kimi-k3\nengine: {engine}\n"
    head += f"model: {{repo: moonshotai/Kimi-K3, revision: {REVISION}}}\n"
    return head + f'image: {{ref: "{image}@sha256:{DIGEST}"}}\n{engine}:\n{knobs}' + CLUSTER.format(port=port)


VLLM = _profile("vllm", "vllm/vllm-openai:kimi-k3", "  tensor_parallel_size: 8\n  pipeline_parallel_size: 2\n")
SGLANG = _profile(
    "sglang",
    "lmsysorg/sglang:kimi-k3",
    "  mamba_full_memory_ratio: 0.9\n  workload: {prompt_tokens: 4000, output_tokens: 1000}\n"
    "  tp_size: 16\n  dcp_size: 8\n  pp_size: 1\n",
    port="    port: 5000\n",
)


def _nodes(text: str):
    profile = parse_profile(text, "p.yaml").profile
    launch = render_launch(profile, observed(profile, host=HOST), profile.image.ref, profile.image.digest)
    command = launch.spec.command
    flag = "--model" if profile.engine == "vllm" else "--model-path"
    snapshot = command[command.index(flag) + 1]
    return launch, engine_for(profile.engine).cluster_launch(launch.input, snapshot)


def _pairs(argv: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(argv, argv[1:]))


def test_vllm_renders_rays_head_the_server_and_a_worker_per_node() -> None:
    launch, (head, gpu2) = _nodes(VLLM)
    assert (head.name, head.rank, head.docker, head.bind) == ("head", 0, None, "10.0.0.1")
    assert (gpu2.name, gpu2.rank, gpu2.docker, gpu2.bind) == ("gpu2", 1, "ssh://kimik3@10.0.0.2", "10.0.0.2")
    (ray_head, server), (ray_worker,) = head.processes, gpu2.processes
    assert ray_head.role == "ray-head" and ray_head.command[:3] == ("ray", "start", "--head")
    assert _pairs(ray_head.command)["--node-ip-address"] == "10.0.0.1" and _pairs(ray_head.command)["--port"] == "6379"
    assert ray_worker.command[:2] == ("ray", "start")
    assert _pairs(ray_worker.command)["--address"] == "10.0.0.1:6379"
    assert _pairs(ray_worker.command)["--node-ip-address"] == "10.0.0.2"
    # A node's Ray is its container's main process; the head's returns once up, the server following it there.
    assert "--block" not in ray_head.command and "--block" in ray_worker.command
    # The head's container runs Ray's head, then the server (planning/cluster_render.py's script): `vllm serve` in front.
    command = launch.spec.command
    assert command[: command.index("--")] == (str(len(ray_head.command)), *ray_head.command)
    assert server.role == "server" and server.command == command[command.index("--") + 1 :]
    assert server.command[:2] == ("vllm", "serve")
    flags = _pairs(server.command)
    assert flags["--distributed-executor-backend"] == "ray"
    assert (flags["--tensor-parallel-size"], flags["--pipeline-parallel-size"]) == ("8", "2")
    env = dict(launch.spec.env)
    assert env["RAY_ADDRESS"] == "10.0.0.1:6379" and env["VLLM_HOST_IP"] == "10.0.0.1"
    assert dict(gpu2.env) == {"VLLM_HOST_IP": "10.0.0.2"}
    # The knobs that make it a cluster are inputs of the server's fingerprint: a node added relaunches it.
    assert launch.inputs["vllm.cluster"]["nodes"][0]["bind"] == "10.0.0.2"
    assert launch.inputs["vllm.pipeline_parallel_size"] == 2


def test_sglang_renders_the_same_server_at_each_nodes_rank() -> None:
    launch, (head, gpu2) = _nodes(SGLANG)
    (server0,), (server1,) = head.processes, gpu2.processes
    assert server0.command == launch.spec.command  # the head's is the container kimik3 launches here
    for rank, server in enumerate((server0, server1)):
        flags = _pairs(server.command)
        assert (flags["--nnodes"], flags["--node-rank"], flags["--dist-init-addr"]) == ("2", str(rank), "10.0.0.1:5000")
        assert (flags["--tp-size"], flags["--pp-size"]) == ("16", "1")
    differ = [(a, b) for a, b in zip(server0.command, server1.command) if a != b]
    assert differ == [("0", "1")] and len(server0.command) == len(server1.command)  # only the rank


def test_one_host_renders_no_cluster_and_no_new_flags() -> None:
    """Without a cluster nothing changes: the single-host goldens hold (test_vllm_render, test_sglang_argv)."""
    single = VLLM.split("  pipeline_parallel_size")[0]
    launch, nodes = _nodes(single)
    assert nodes == ()
    assert not {"--distributed-executor-backend", "--pipeline-parallel-size"} & set(launch.spec.command)
    assert "vllm.cluster" not in launch.inputs and "RAY_ADDRESS" not in dict(launch.spec.env)


def test_profile_text_stays_one_argv_item() -> None:
    """Values reach the argv as list items, never through a shell: an address is one item wherever it appears."""
    _, nodes = _nodes(VLLM)
    for node in nodes:
        for process in node.processes:
            assert all(isinstance(item, str) and item for item in process.command)
            assert not any(" " in item for item in process.command if not item.startswith("{"))


def _run(python: Path, script: Path | str, argvs: list[list[str]], *args: str) -> list[dict]:
    command = [str(python), str(script)] if isinstance(script, Path) else [str(python), "-c", script]
    done = subprocess.run(
        [*command, *args],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.engines
@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM venv at {VLLM_PYTHON} (TESTING.md §10)")
def test_vllms_own_parser_reads_the_cluster_server() -> None:
    _, (head, _) = _nodes(VLLM)
    server = head.processes[1].command
    assert server[:2] == ("vllm", "serve")
    parsed, wrong = _run(
        VLLM_PYTHON,
        ROOT / "tests" / "support" / "vllm_parse.py",
        [list(server[2:]), [*server[2:], "--pipeline-parallel-size", "two"]],
    )
    assert "args" in parsed, parsed
    args = parsed["args"]
    assert args["distributed_executor_backend"] == "ray"
    assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (8, 2)
    # The parser refuses what it cannot read (it takes any backend name: vLLM checks that later), so the check can fail.
    assert "pipeline-parallel-size" in wrong["error"]


SGLANG_PARSE = """import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs
out = []
for argv in json.load(sys.stdin):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = parser.parse_args(argv)
    except SystemExit:
        out.append({"error": said.getvalue()})
        continue
    keys = ("nnodes", "node_rank", "dist_init_addr", "tp_size", "pp_size", "dcp_size", "host", "port")
    out.append({"args": {k: getattr(args, k) for k in keys}})
print(json.dumps(out))
"""


@pytest.mark.engines
@pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason=f"no SGLang venv at {SGLANG_PYTHON} (TESTING.md §10)")
def test_sglangs_own_parser_reads_every_nodes_server() -> None:
    _, nodes = _nodes(SGLANG)
    argvs = [list(node.processes[0].command[2:]) for node in nodes]
    *parsed, wrong = _run(SGLANG_PYTHON, SGLANG_PARSE, [*argvs, [*argvs[1], "--node-rank", "one"]])
    for rank, result in enumerate(parsed):
        assert "args" in result, result
        args = result["args"]
        assert (args["nnodes"], args["node_rank"], args["dist_init_addr"]) == (2, rank, "10.0.0.1:5000")
        assert (args["tp_size"], args["pp_size"], args["dcp_size"]) == (16, 1, 8)
    assert "node-rank" in wrong["error"]


def test_the_host_gate_no_longer_refuses_a_cluster() -> None:
    """kimik3 converges the other hosts' members (planning/cluster_step.py): the gate judges the head as any host and
    says nothing of the replica spanning hosts (the rule cluster-not-converged is gone)."""
    from kimik3_reconciler.planning.host_gate import host_gate

    for text in (VLLM, SGLANG):
        profile = parse_profile(text, "p.yaml").profile
        refusals, _ = host_gate(profile, observed(profile, host=HOST))
        assert not any("spans" in r or "cluster" in r for r in refusals), refusals
