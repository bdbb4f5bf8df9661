"""The host gate for engine vllm (seed 001's numbers, engines/vllm host_needs): driver R580+ for the CUDA 13 image,
tensor_parallel_size GPUs of the recipe's kinds (B300/GB300) unless vllm.any_gpu, and the checkpoint's safetensors
within gpu_memory_utilization of their VRAM. Judged on the recorded H200 host (tests/support/recorded_hosts.py)."""

from __future__ import annotations

from support.observed import model_fact, observed
from support.recorded_hosts import h200_host

from kimik3_reconciler.model.facts import GpuFact, RemoteFile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.host_gate import host_gate

GIB = 1 << 30
PROFILE = """apiVersion: kimik3/v1
name: kimi-k3
engine: vllm
model: {repo: moonshotai/Kimi-K3, revision: %s}
image: {ref: "vllm/vllm-openai:kimi-k3@sha256:%s"}
""" % ("a" * 40, "b" * 64)


def _checkpoint(gib: int, shards: int = 4) -> tuple[RemoteFile, ...]:
    weights = tuple(
        RemoteFile(path=f"model-{i:05d}-of-{shards:05d}.safetensors", size=gib * GIB // shards, sha256=str(i) * 64)
        for i in range(1, shards + 1)
    )
    return (*weights, RemoteFile(path="config.json", size=4000, git_oid="c" * 40))


def _gate(extra: str = "", gpus: int = 8, weights_gib: int = 500, **host: object):
    profile = parse_profile(PROFILE + extra, "p.yaml").profile
    facts = h200_host(gpus, **host)
    model = model_fact(profile, quant="", files=_checkpoint(weights_gib))
    return host_gate(profile, observed(profile, host=facts, model=model))


def _b300(host_gpus: tuple[GpuFact, ...]) -> tuple[GpuFact, ...]:
    return tuple(g.model_copy(update={"name": "NVIDIA B300 SXM6 AC", "memory_total": 288 * GIB}) for g in host_gpus)


def test_eight_b300_on_r580_with_a_fitting_checkpoint_pass() -> None:
    gpus = _b300(h200_host(8).gpus)
    profile = parse_profile(PROFILE, "p.yaml").profile
    facts = h200_host(8).model_copy(update={"gpus": gpus})
    model = model_fact(profile, quant="", files=_checkpoint(1500))
    refusals, warnings = host_gate(profile, observed(profile, host=facts, model=model))
    assert refusals == [] and warnings == []


def test_h200s_are_refused_naming_the_recipe_and_the_override_field() -> None:
    refusals, _ = _gate()
    kinds = [r for r in refusals if "not B300 or GB300" in r]
    assert kinds and kinds[0].field == ("vllm", "any_gpu") and "seed 001" in kinds[0]
    assert "NVIDIA H200" in kinds[0] and "set vllm.any_gpu: true" in kinds[0]
    refusals, _ = _gate("vllm: {any_gpu: true}\n")
    assert not any("not B300" in r for r in refusals)


def test_fewer_gpus_than_tensor_parallel_ranks_are_refused() -> None:
    refusals, _ = _gate("vllm: {any_gpu: true}\n", gpus=4, weights_gib=100)
    (short,) = [r for r in refusals if "tensor-parallel ranks" in r]
    assert short.field == ("vllm", "tensor_parallel_size") and "8 tensor-parallel ranks" in short and "4 GPU" in short
    refusals, _ = _gate("vllm: {any_gpu: true, tensor_parallel_size: 4}\n", gpus=4, weights_gib=100)
    assert refusals == []


def test_an_old_driver_is_refused_with_the_r580_floor() -> None:
    refusals, _ = _gate("vllm: {any_gpu: true}\n", weights_gib=100, driver_version="570.133.20")
    assert any("NVIDIA driver 570.133.20 is older than 580" in r and "seed 001" in r for r in refusals)


def test_a_checkpoint_larger_than_the_vram_share_is_refused_and_a_tight_one_warned() -> None:
    # 8 recorded H200s: 8 x 143771 MiB = 1123 GiB; x 0.95 = 1067 GiB for vLLM.
    refusals, _ = _gate("vllm: {any_gpu: true}\n", weights_gib=1200)
    assert any("do not fit engine vllm's memory" in r and "1200 GiB" in r for r in refusals), refusals
    refusals, warnings = _gate("vllm: {any_gpu: true}\n", weights_gib=1000)
    assert refusals == [] and any("for the KV cache" in w for w in warnings)
    refusals, warnings = _gate("vllm: {any_gpu: true}\n", weights_gib=500)
    assert refusals == [] and warnings == []


def test_no_gpus_is_refused_and_gpus_none_is_the_cpu_build() -> None:
    refusals, _ = _gate(gpus=0, gpu_probe="no-driver")
    assert any("engine vllm needs 8 GPUs" in r for r in refusals)
    refusals, _ = _gate("gpus: none\nvllm: {tensor_parallel_size: 1, attention_backend: null}\n")
    assert refusals == []


def test_numa_balancing_is_llama_cpps_stall_not_vllms() -> None:
    refusals, _ = _gate("vllm: {any_gpu: true}\n", weights_gib=100, numa_balancing=1)
    assert refusals == []
