"""Routes are the engines' plans on the host's facts (issue 37 item 4): a route is feasible exactly when the plan's
host gate passes it, with the gate's own reason when not; llama.cpp only where kimik3 can build its image; and one
route to start with, in seed 001's order. The property runs every shipped profile on every recorded or described
host of tests/ (tests/fixtures/h200, tests/fixtures/host, seed 000's host as tests/support/recorded_hosts.py builds
it, this dev machine's shape)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.observed import model_fact, observed
from support.recorded_hosts import h200_host, seed000_host
from support.shipped import pinned_text

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.llamacpp.routes import GGUF_REPO
from kimik3_reconciler.engines.native_route import NATIVE_MIN_BYTES
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.described_host import described_host
from kimik3_reconciler.model.facts import HostFacts, RemoteFile
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.host_gate import host_gate
from kimik3_reconciler.planning.routes import profile_routes, routes

ROOT = Path(__file__).resolve().parents[3]
HOSTS = ROOT / "tests" / "fixtures" / "host"
GIB = 1 << 30


def shipped(name: str, **edits: object) -> Profile:
    text = pinned_text(ROOT / "profiles" / name)
    data = yaml.safe_load(text)
    for dotted, value in edits.items():
        section, _, key = dotted.partition("__")
        data.setdefault(section, {})[key] = value
    return parse_profile(yaml.safe_dump(data), name).profile


def described(name: str, **changes: object) -> HostFacts:
    return described_host(yaml.safe_load((HOSTS / name).read_text()) | changes, name)


PROFILES = sorted(p.name for p in (ROOT / "profiles").glob("*.yaml") if "kind: Fleet" not in p.read_text())
HOST_FACTS = {
    "described-b300": lambda: described("described-b300.yaml"),
    "described-seed-rtx-pro-6000": lambda: described("described-seed-rtx-pro-6000.yaml"),
    "seed-000-128gib": lambda: seed000_host(8, ram_total=128 * GIB, ram_available=120 * GIB),
    "h200x1": lambda: h200_host(1),
    "h200x4": lambda: h200_host(4),
    "h200x8-1tib": lambda: h200_host(8, ram_total=1 << 40, ram_available=1000 * GIB),
    "seed-000": lambda: seed000_host(8),
    "dev-no-gpu": lambda: HostFacts(physical_cores=2, ram_total=25276203008, gpu_probe="no-driver"),
}


def weights(profile: Profile) -> tuple[RemoteFile, ...]:
    """What the hub would list: a catalog quant at its size, another GGUF (the demo's) tiny, the checkpoint at its
    lower bound."""
    if profile.engine != "llamacpp":
        return (RemoteFile(path="model-00001-of-00001.safetensors", size=NATIVE_MIN_BYTES, sha256="1" * 64),)
    info = catalog.lookup(profile.model.quant) if profile.model.repo == GGUF_REPO else None
    size = info.size_bytes if info is not None and info.size_bytes else 10 << 20
    quant = profile.model.quant
    return (RemoteFile(path=f"{quant}/Kimi-K3-{quant}-00001-of-00001.gguf", size=size, sha256="1" * 64),)


@pytest.mark.parametrize("host_name", sorted(HOST_FACTS))
@pytest.mark.parametrize("profile_name", PROFILES)
def test_routes_says_yes_iff_the_plans_gate_passes(profile_name: str, host_name: str) -> None:
    profile = shipped(profile_name)
    host = HOST_FACTS[host_name]()
    quant = "checkpoint" if profile.engine != "llamacpp" else profile.model.quant
    facts = observed(profile, host=host, model=model_fact(profile, quant=quant, files=weights(profile)))
    refusals, _ = host_gate(profile, facts)
    report = profile_routes(profile, host, host_name, observed=facts)  # `kimik3 routes FILE`: the gate asked here
    ours = [r for r in report.routes if r.profile]
    assert len(ours) == 1, report.lines()
    assert ours[0].feasible == (not refusals), (ours[0].line(), refusals)
    for refusal in refusals:  # the real reason: the gate's own words
        assert refusal in ours[0].why


def test_any_gpu_and_tensor_parallel_size_are_the_profiles() -> None:
    """On 8x H200 with vllm.any_gpu the kinds are not the reason (routes ignored any_gpu: "not a listed kind"); what
    refuses the checkpoint is its size against 0.95 of 1128 GiB. With 4x B300 and tensor_parallel_size 4, the
    count is not the reason either (routes asked for 8)."""
    h200 = h200_host(8, ram_total=1 << 40)
    report = profile_routes(shipped("vllm-tp8.yaml", vllm__any_gpu=True), h200, "h200x8")
    ours = next(r for r in report.routes if r.profile)
    assert not ours.feasible
    assert ours.why.startswith("the checkpoint's weights (1385 GiB of safetensors at ")
    assert "not B300 or GB300" not in ours.why and "not a listed kind" not in ours.why
    b300 = described("described-b300.yaml", gpus=[{"name": "NVIDIA B300 SXM6 AC", "count": 4, "memory_gib": 268}])
    tp4 = next(
        r for r in profile_routes(shipped("vllm-tp8.yaml", vllm__tensor_parallel_size=4), b300).routes if r.profile
    )
    assert tp4.placement == "tp4"
    assert "ranks" not in tp4.why and "8 needed" not in tp4.why
    assert "do not fit engine vllm's memory (1018 GiB: 0.95 of the 1072 GiB of VRAM on 4 GPU(s))" in tp4.why


def test_hybrid_on_a_128_gib_host_counts_the_measured_experts_and_the_prompt_cache() -> None:
    """Seed 000's GPUs with 128 GiB of RAM: UD-Q2_K_XL keeps ~130 GiB of experts in RAM (seed 000 step 2's
    measurement) plus the prompt cache; routes said "yes ~73 GiB in RAM" where the plan refuses."""
    host = seed000_host(8, ram_total=128 * GIB, ram_available=120 * GIB)
    q2 = next(r for r in routes(host).routes if r.model == f"{GGUF_REPO}:UD-Q2_K_XL")
    assert not q2.feasible and q2.placement == "hybrid"
    assert "130.0 GiB" in q2.why and "prompt cache" in q2.why


def test_llamacpp_is_not_offered_on_amd_gpus() -> None:
    """kimik3 builds llama.cpp for CUDA (or the CPU) only: on 8x MI355X no GPU placement is offered, the CPU build
    says the GPUs go unused; vLLM's AMD route needs the ROCm image kimik3 does not deploy."""
    amd = {
        "gpus": [{"name": "AMD Instinct MI355X", "count": 8, "memory_gib": 288}],
        "ram_gib": 256,
        "driver": "580.95.05",
    }
    report = routes(described_host(amd, "mi355x.yaml"))
    gguf = [r for r in report.routes if r.engine == "llamacpp" and "refused" not in r.why]
    assert {r.placement for r in gguf} == {"cpu"}
    assert not any(r.feasible for r in gguf)  # 256 GiB of RAM holds no quant
    by_engine = {r.engine: r for r in report.routes}
    assert "AMD Instinct MI355X: seed 001's AMD route needs the ROCm image" in by_engine["vllm"].why
    big = amd | {"ram_gib": 2048}
    cpu = [r for r in routes(described_host(big, "mi355x.yaml")).routes if r.engine == "llamacpp" and r.feasible]
    assert cpu and all(r.placement == "cpu" for r in cpu)
    assert all("AMD Instinct MI355X: kimik3 builds llama.cpp for CUDA only" in r.why for r in cpu)


def test_a_llamacpp_profile_on_amd_gpus_is_refused_with_the_reason() -> None:
    amd = {"gpus": [{"name": "AMD Instinct MI355X", "count": 8, "memory_gib": 288}], "ram_gib": 2048, "driver": "580"}
    report = profile_routes(shipped("allvram-iq2xxs.yaml"), described_host(amd, "mi355x.yaml"))
    ours = next(r for r in report.routes if r.profile)
    assert not ours.feasible and "kimik3 builds llama.cpp's image for NVIDIA (CUDA) only" in ours.why


@pytest.mark.parametrize(
    "host_name, start",
    [
        ("described-b300", "start with: vllm moonshotai/Kimi-K3 tp8 (seed 001: on an 8-GPU Blackwell-class server"),
        ("described-seed-rtx-pro-6000", f"start with: llamacpp {GGUF_REPO}:UD-IQ2_XXS all-vram"),
        ("h200x4", f"start with: llamacpp {GGUF_REPO}:UD-IQ1_M hybrid"),  # 125 GiB of RAM: no larger hybrid
    ],
)
def test_one_route_to_start_with_in_seed_001s_order(host_name: str, start: str) -> None:
    lines = routes(HOST_FACTS[host_name](), source=host_name).lines()
    assert lines[1].startswith(start), lines[:3]


def test_gb300_starts_with_vllm_and_a_host_without_a_route_names_none() -> None:
    gb300 = {"gpus": [{"name": "NVIDIA GB300", "count": 8, "memory_gib": 268}], "ram_gib": 1024, "driver": "580.95.05"}
    report = routes(described_host(gb300, "gb300.yaml"))
    assert report.recommended is not None and report.recommended[0].engine == "vllm"
    assert report.to_json()["recommended"]["engine"] == "vllm"
    dev = routes(HOST_FACTS["dev-no-gpu"]())
    assert dev.recommended is None and not any(line.startswith("start with") for line in dev.lines())


def test_native_defaults_are_the_schemas() -> None:
    """Routes judge vLLM and SGLang for a profile of another engine with the recipes' knobs: the schema's defaults."""
    from kimik3_reconciler.model.profile_schema import SglangSpec, VllmSpec

    for engine, schema in (("vllm", VllmSpec), ("sglang", SglangSpec)):
        for knob, value in engine_for(engine).native_route.knobs.items():
            assert schema.model_fields[knob].default == value, (engine, knob)
