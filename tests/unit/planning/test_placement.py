"""The placement forecast against what llama-server's --fit really did on an H200
(tools/gpu_proof/run-forecast.sh: a 2.2 GB synthetic kimi-k3 GGUF, 24 layers, three fit targets;
recorded in tests/fixtures/h200/forecast-cases.jsonl and forecast-server-*.log)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.observed import observed

from kimik3_reconciler.engines.llamacpp.placement import forecast
from kimik3_reconciler.model.facts import GpuFact, HostFacts, ModelLayout
from kimik3_reconciler.model.profile_source import parse_profile

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "h200"
MIB = 1 << 20
LAYOUT = ModelLayout(
    **json.loads((H200 / "synth-layout.json").read_text()),
    context_length=0,  # none recorded
    state_bytes_per_slot=0,
)
CASES = [json.loads(line) for line in (H200 / "forecast-cases.jsonl").read_text().splitlines()]
REV = "d3e0c0de" * 5


def cpu_layers_in_log(fit_target: int) -> list[int]:
    """Layers whose expert tensors the real load put in host memory (after the fit passes)."""
    log = (H200 / f"forecast-server-{fit_target}.log").read_text()
    final = log[log.index("successfully fit params") :]
    return sorted({int(m) for m in re.findall(r"tensor blk\.(\d+)\.ffn_\w+_exps\.weight .*CUDA_Host", final)})


def predicted(case: dict):
    profile = parse_profile(f"""
apiVersion: kimik3/v1
name: k3-forecast
model: {{repo: kimik3-demo/Kimi-K3-tiny-GGUF, revision: {REV}, quant: UD-SYNTH}}
build: {{source: mainline, cuda_architectures: ["90"]}}
gpus: [0]
serve: {{ctx_size: 4096, parallel: 1, fit_target: {case["fit_target_mib"]}}}
""").profile
    gpu = GpuFact(
        index=0,
        uuid="GPU-71bec584",
        name="NVIDIA H200",
        compute_capability=(9, 0),
        memory_total=150754820096,
        memory_free=case["nvml_free_mib"] * MIB,
    )
    return forecast(profile, observed(profile, host=HostFacts(gpu_probe="ok", gpus=(gpu,)), layout=LAYOUT))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"fit_target={c['fit_target_mib']}")
def test_forecast_is_within_one_layer_and_5_percent_of_bytes(case: dict) -> None:
    got, real = predicted(case), case["actual"]
    real_cpu = cpu_layers_in_log(case["fit_target_mib"])
    assert abs(len(got.cpu_expert_layers) - len(real_cpu)) <= 1, (got.cpu_expert_layers, real_cpu)
    assert got.mode == ("hybrid" if real_cpu else "all-vram")
    gpu_mib = got.devices[0].weight_bytes / MIB
    assert abs(gpu_mib - real["gpu_weights_mib"]) <= 0.05 * real["gpu_weights_mib"], (gpu_mib, real)
    host_mib = got.host_bytes / MIB
    assert abs(host_mib - real["host_weights_mib"]) <= max(1.0, 0.05 * real["host_weights_mib"]), (host_mib, real)


def test_the_plan_text_says_what_goes_where() -> None:
    lines = predicted(CASES[1]).lines()
    assert lines[0].startswith("placement forecast: hybrid, 10 layers' experts (partly) on the CPU (14-23); RAM 928.")
    assert lines[1].startswith("  CUDA0: 24 layers, weights 1.3 GiB")


def test_a_cpu_forecast_says_every_expert_is_on_the_cpu_not_partly() -> None:
    """Review: the demo's plan said "3 layers' experts (partly) on the CPU" for a CPU build, where all of them are."""
    from kimik3_reconciler.engines.llamacpp.placement import Forecast

    cpu = Forecast(mode="cpu", cpu_expert_layers=(1, 2, 3), devices=(), host_bytes=0, load_seconds=0.0)
    assert cpu.lines()[0].startswith("placement forecast: cpu, 3 layers' experts all on the CPU (1-3)")
