"""Hybrid or all-VRAM per (quant, GPU count, GPU memory), on the recorded H200 (engines/llamacpp/vram_fit.py)."""

from __future__ import annotations

import json
from pathlib import Path

from support.observed import model_fact, observed
from support.recorded_hosts import h200_host

from kimik3_reconciler.engines.llamacpp.vram_fit import derive_mode
from kimik3_reconciler.model.facts import HostFacts, ModelLayout
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.host_gate import host_gate
from kimik3_reconciler.planning.launch import render_launch

GIB = 1 << 30
# context_length 0: the synthetic model's header gives none (the recorded layout predates the field)
LAYOUT = ModelLayout(
    **json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "h200" / "synth-layout.json").read_text()),
    context_length=0,
    state_bytes_per_slot=0,
)


def profile(quant: str = "UD-IQ2_XXS", gpus: str = "all", serve: str = "{}", variant: str = "cuda", gate: str = "{}"):
    from kimik3_reconciler.model import catalog

    # A quant made locally (REAP770) is served from its file (issue 27 item 3): the profile names one.
    info = catalog.lookup(quant)
    local = ", local_path: /srv/models/reap770.gguf" if info is not None and info.made_locally else ""
    return parse_profile(f"""
apiVersion: kimik3/v1
name: kimi-k3
model: {{repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: {quant}{local}}}
build: {{source: mainline, variant: {variant}, cuda_architectures: ["90"]}}
gpus: {gpus}
serve: {serve}
gate: {gate}
""").profile


def test_iq2_xxs_is_all_vram_on_eight_h200_and_hybrid_on_four() -> None:
    iq2 = profile()
    unlisted = model_fact(iq2, files=())
    eight = derive_mode(iq2, observed(iq2, host=h200_host(8), model=unlisted))  # no listing yet: the catalog's 662 GiB
    assert (eight.mode, eight.differs, eight.source, eight.gpus) == ("all-vram", False, "the catalog's size", 8)
    four = derive_mode(iq2, observed(iq2, host=h200_host(4), model=model_fact(iq2, shards=2, size=331 * GIB)))
    assert (four.mode, four.differs, four.source) == ("hybrid", True, "its files")
    assert four.cpu_bytes and 118 * GIB < four.cpu_bytes < 119 * GIB


def test_the_catalog_stands_without_gpu_facts_or_a_size() -> None:
    iq2 = profile()
    assert not derive_mode(iq2, observed(iq2, host=HostFacts(physical_cores=8))).derived  # pure tests, no NVML
    unknown = profile(quant="UD-Q3_K_M")  # not in the catalog and nothing listed: hybrid, assumed
    assert (
        derive_mode(unknown, observed(unknown, host=h200_host(8), model=model_fact(unknown, files=()))).mode == "hybrid"
    )


def test_a_manual_split_and_the_cpu_variant() -> None:
    manual = profile(serve="{n_cpu_moe: 0}")
    assert derive_mode(manual, observed(manual, host=h200_host(1))).mode == "all-vram"  # the profile's choice
    cpu = profile(gpus="none", variant="cpu")
    decision = derive_mode(cpu, observed(cpu, host=h200_host(1), model=model_fact(cpu, files=())))
    assert not decision.derived and decision.cpu_bytes == 662 * GIB  # all of it in RAM


def test_the_headers_count_kv_and_buffers() -> None:
    """The synthetic kimi-k3 GGUF measured on the H200 (tests/fixtures/h200/forecast-cases.jsonl): all-VRAM with a
    1024 MiB margin, hybrid with 141027 MiB (only ~1.6 GB usable)."""
    synth = profile(quant="UD-SYNTH", gpus="[0]", serve="{ctx_size: 4096, parallel: 1, fit_target: 1024}")
    fits = derive_mode(synth, observed(synth, host=h200_host(1), layout=LAYOUT))
    assert (fits.mode, fits.source, fits.counted) == ("all-vram", "its GGUF headers", "weights, KV, buffers")
    tight = profile(quant="UD-SYNTH", gpus="[0]", serve="{ctx_size: 4096, parallel: 1, fit_target: 141027}")
    assert derive_mode(tight, observed(tight, host=h200_host(1), layout=LAYOUT)).mode == "hybrid"


def test_the_plan_note_names_a_set_ubatch_and_the_defaults_it_takes() -> None:
    q2 = profile(quant="UD-Q2_K_XL", serve="{ubatch: 4096}")
    launch = render_launch(
        q2, observed(q2, host=h200_host(8), model=model_fact(q2, shards=2, size=401 * GIB)), "img", "fp"
    )
    (note,) = launch.warnings
    assert note.startswith(
        "mode: UD-Q2_K_XL runs all-vram on this host, not the catalog's hybrid (measured on 8x "
        "RTX PRO 6000): 802.0 GiB (weights; KV and buffers not known yet) fits the "
    )
    assert note.endswith("the launch uses ubatch 4096 as set (seed 000 uses 2048 for all-vram), fit_target 6144 MiB")
    assert (launch.input.serve.ubatch, launch.input.serve.batch, launch.input.serve.fit_target) == (4096, 4096, 6144)
    assert launch.mode.mode == "all-vram"


def test_a_derived_all_vram_mode_with_a_short_margin_is_refused() -> None:
    """Profile rules judge the catalog's mode (UD-Q2_K_XL: hybrid, 4096 MiB is fine); on eight H200s it runs
    all-VRAM, where seed 000 step 5 needs the margin (6144 for a quant nobody measured all-VRAM)."""
    q2 = profile(quant="UD-Q2_K_XL", serve="{fit_target: 4096}")
    facts = observed(q2, host=h200_host(8, ram_total=1 << 40), model=model_fact(q2, shards=2, size=401 * GIB))
    refusals, _ = host_gate(q2, facts)
    assert refusals == [
        "UD-Q2_K_XL runs all-VRAM on this host's 8 GPU(s) (the catalog says hybrid), and "
        "serve.fit_target 4096 MiB is below the 6144 MiB it needs all-VRAM: the CUDA scratch pool OOMs "
        "on the first request after the load (seed 000 step 5); raise fit_target or leave it out"
    ]
    four = observed(q2, host=h200_host(4, ram_total=1 << 40), model=model_fact(q2, shards=2, size=401 * GIB))
    assert host_gate(q2, four)[0] == []  # hybrid on four: 4096 is the hybrid's margin


def test_the_derivation_reproduces_the_catalog_on_the_seed_host() -> None:
    """Seed 000's host: 8x RTX PRO 6000, "765 GiB of VRAM in total". Every catalog quant with a size gets the
    mode the seed measured there (with its catalog default margins), so the derivation only departs from the
    catalog where the GPUs differ."""
    from kimik3_reconciler.model import catalog
    from kimik3_reconciler.model.facts import GpuFact

    per_gpu = 765 * GIB // 8
    pool = tuple(
        GpuFact(
            index=i,
            uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            compute_capability=(12, 0),
            memory_total=per_gpu,
            memory_free=per_gpu,
        )
        for i in range(8)
    )
    host = h200_host(1).model_copy(update={"gpus": pool})
    checked = 0
    for info in catalog.CATALOG.values():
        if info.size_bytes is None or info.refused:
            continue
        p = profile(quant=info.name, gate="{quant: {}}")  # unvetted IQ quants need the gate to load
        decision = derive_mode(p, observed(p, host=host, model=model_fact(p, files=())))
        assert (decision.mode, decision.differs) == (info.mode, False), (info.name, decision)
        checked += 1
    assert checked == 6
