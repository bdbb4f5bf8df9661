"""The memory half of the sizing gate and the draft GPU's room (engines/llamacpp/memory_gate.py), on the recorded
H200 host's facts (tests/fixtures/h200 through tests/support/recorded_hosts.py)."""

from __future__ import annotations

from support.observed import model_fact, observed
from support.recorded_hosts import h200_host, seed000_host

from kimik3_reconciler.engines.llamacpp.memory_gate import draft_room_refusals, memory_findings
from kimik3_reconciler.engines.llamacpp.vram_fit import derive_mode
from kimik3_reconciler.model.facts import GpuFact
from kimik3_reconciler.model.profile_source import parse_profile

GIB = 1 << 30
TIB = 1 << 40


def profile(gpus: str = "[0, 1, 2, 3]", serve: str = "{}", quant: str = "UD-IQ2_XXS", variant: str = "cuda"):
    return parse_profile(f"""
apiVersion: kimik3/v1
name: kimi-k3
model: {{repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: {quant}}}
build: {{source: mainline, variant: {variant}, cuda_architectures: ["90"], patches: [p/kimi-k3-rs-rollback.patch]}}
gpus: {gpus}
serve: {serve}
""").profile


DRAFT = "spec_draft: {model: /drafts/dspark.gguf}"


def test_the_draft_gpu_needs_its_room_in_the_fit_target_list() -> None:
    host = h200_host(4, ram_total=TIB)

    def refusals(serve: str) -> list[str]:
        q2 = profile(serve=serve, quant="UD-Q2_K_XL")  # 802 GiB: hybrid on four H200s, 4096 MiB margins
        return draft_room_refusals(q2, observed(q2, host=host, model=model_fact(q2, shards=2, size=401 * GIB)))

    assert refusals(f"{{parallel: 2, {DRAFT}}}") == [
        "serve.fit_target leaves 4096 MiB free on the draft's GPU CUDA3 (GPU 3, NVIDIA H200, 143771 MiB); it needs "
        "~9216 MiB (~9 GB) there plus room for the draft's snapshots (seed 000): write one margin per GPU, >= 9216 "
        "for CUDA3"
    ]
    assert refusals(f"{{parallel: 2, fit_target: [4096, 4096, 4096, 16384], {DRAFT}}}") == []
    # The room is on the draft's GPU, not another one.
    wrong = refusals(f"{{parallel: 2, fit_target: [16384, 4096, 4096, 4096], {DRAFT}}}")
    assert wrong[0].startswith("serve.fit_target[3] leaves 4096 MiB")
    # A margin bigger than the GPU leaves no layer (and no output.weight) there.
    huge = refusals(f"{{parallel: 2, fit_target: [4096, 4096, 4096, 200000], {DRAFT}}}")
    assert "is more than the draft's GPU CUDA3" in huge[0]


def test_a_gpu_smaller_than_the_draft_and_a_manual_split() -> None:
    small = GpuFact(
        index=0,
        uuid="GPU-small",
        name="NVIDIA T4",
        compute_capability=(7, 5),
        memory_total=8 * GIB,
        memory_free=8 * GIB,
    )
    host = h200_host(1).model_copy(update={"gpus": (small,)})
    draft = profile(gpus="[0]", serve=f"{{parallel: 2, fit_target: [16384], {DRAFT}}}")
    assert draft_room_refusals(draft, observed(draft, host=host)) == [
        "the draft's GPU CUDA0 (GPU 0, NVIDIA T4, 8192 MiB) is smaller than the ~9216 MiB the DSpark draft needs "
        "(seed 000)"
    ]
    manual = profile(serve=f"{{parallel: 2, n_cpu_moe: 10, {DRAFT}}}")
    assert draft_room_refusals(manual, observed(manual, host=h200_host(4))) == []
    assert draft_room_refusals(profile(), observed(profile(), host=h200_host(4))) == []  # no draft


def test_memory_total_and_expert_ram_on_four_h200() -> None:
    iq2 = profile()
    model = model_fact(iq2, shards=2, size=331 * GIB)  # 662 GiB
    # 561.6 GiB of VRAM + 125.8 GiB of RAM < 728.2 GiB (662 + 10 %)
    refusals, _ = memory_findings(iq2, observed(iq2, host=h200_host(4), model=model), ours_running=False)
    assert refusals == [
        "the quant is 662.0 GiB, 728.2 GiB with seed 001's 10% runtime headroom, but VRAM + RAM is "
        "687.5 GiB (4 GPU(s) 561.6 GiB + RAM 125.8 GiB): it cannot run at any split"
    ]
    # With 1 TiB the ~118.5 GiB of experts the GPUs leave fit; with little available RAM it warns, unless our own
    # server (about to be replaced) is what holds it.
    busy = h200_host(4, ram_total=TIB, ram_available=100 * GIB)
    refusals, warnings = memory_findings(iq2, observed(iq2, host=busy, model=model), ours_running=False)
    assert refusals == [] and warnings[0].startswith("the hybrid keeps ~118.5 GiB of experts the 4 GPU(s) cannot hold")
    assert memory_findings(iq2, observed(iq2, host=busy, model=model), ours_running=True) == ([], [])


def test_the_cpu_variant_keeps_the_whole_quant_in_ram() -> None:
    cpu = profile(gpus="none", variant="cpu", quant="UD-Q2_K_XL")
    model = model_fact(cpu, shards=2, size=200 * GIB)
    refusals, _ = memory_findings(
        cpu,
        observed(cpu, host=h200_host(0, ram_total=420 * GIB, gpu_probe="no-driver"), model=model),
        ours_running=False,
    )
    assert refusals == [
        "the quant is 400.0 GiB, 440.0 GiB with seed 001's 10% runtime headroom, but VRAM + RAM is "
        "420.0 GiB (0 GPU(s) 0 B + RAM 420.0 GiB): it cannot run at any split"
    ]
    busy = h200_host(0, ram_total=TIB, ram_available=300 * GIB, gpu_probe="no-driver")
    _, warnings = memory_findings(cpu, observed(cpu, host=busy, model=model), ours_running=False)
    assert warnings == [
        "the CPU build keeps the whole quant in RAM, 440.0 GiB with 10% headroom, + the prompt cache "
        "8.0 GiB (serve.cache_ram; llama-server's default 8192 MiB) + the slots' context checkpoints 36.9 GiB "
        "(serve.parallel 8 x 32 (llama-server's default --ctx-checkpoints) x 147.7 MiB of recurrent state, assumed "
        "until the GGUF headers are read: Kimi-Linear-48B-A3B's KDA shape, 69 layers of 32 heads of 128) = 484.9 GiB, "
        "but only 300.0 GiB of the 1024.0 GiB is available now: other processes hold the rest (the load may be killed "
        "for memory)"
    ]


def test_nothing_is_judged_before_the_listing_is_known() -> None:
    iq2 = profile()
    unlisted = model_fact(iq2, files=())
    assert memory_findings(iq2, observed(iq2, host=h200_host(4), model=unlisted), ours_running=False) == ([], [])


def test_on_an_all_vram_quant_the_draft_room_comes_on_top_of_the_quant_floor() -> None:
    """Review of issue 14: 9216 MiB on the draft's GPU leaves the draft its room but not the CUDA scratch pool's
    6144 (UD-IQ2_XXS all-VRAM, seed 000 step 5): both are needed there, 15360; interactive.yaml's 16384 passes."""
    host = h200_host(8, ram_total=TIB)

    def refusals(last: int) -> list[str]:
        iq2 = profile(
            gpus="[0, 1, 2, 3, 4, 5, 6, 7]",
            serve=f"{{parallel: 2, fit_target: [6144, 6144, 6144, 6144, 6144, 6144, 6144, {last}], {DRAFT}}}",
        )
        files = model_fact(iq2, shards=2, size=331 * GIB)  # 662 GiB: all-VRAM on eight H200s
        return draft_room_refusals(iq2, observed(iq2, host=host, model=files))

    (refused,) = refusals(9216)
    assert refused.startswith("serve.fit_target[7] leaves 9216 MiB free on the draft's GPU CUDA7 (GPU 7, NVIDIA H200")
    assert (
        "it needs 6144 MiB (UD-IQ2_XXS's all-VRAM margin: the CUDA scratch pool's room) + 9216 MiB (the DSpark "
        "draft, ~9 GB) there"
    ) in refused and refused.endswith(">= 15360 for CUDA7")
    assert refusals(15360) == [] and refusals(16384) == []


def test_with_gpus_all_a_named_draft_device_must_be_the_hosts_last_gpu() -> None:
    """Review of issue 14: `gpus: all` has no list for the profile rules to count, so the host's GPU count
    (NVML) decides; CUDA3 of eight is refused naming the field, CUDA7 and auto pass this check."""
    host = h200_host(8, ram_total=TIB)

    def refusals(device: str) -> list[str]:
        draft = profile(gpus="all", serve=f"{{parallel: 2, spec_draft: {{model: /d.gguf, device: {device}}}}}")
        return draft_room_refusals(draft, observed(draft, host=host, model=model_fact(draft, shards=2, size=331 * GIB)))

    (refused,) = refusals("CUDA3")
    assert refused.field == ("serve", "spec_draft", "device")
    assert refused.startswith(
        "serve.spec_draft.device must be CUDA7 (the GPU holding output.weight, the last of "
        "the split): it is CUDA3, and gpus: all splits the model over this host's 8 GPUs"
    )
    assert not any("spec_draft.device" in r for r in refusals("CUDA7"))
    assert not any("spec_draft.device" in r for r in refusals("auto"))


def test_the_seed_hosts_hybrid_ram_is_at_least_what_the_seed_measured() -> None:
    """Issue 27 item 2: on seed 000's host (8x RTX PRO 6000, 765 GiB of VRAM) the sizing gate counts at least the
    ~130 GiB of UD-Q2_K_XL experts the seed measured in RAM (kimik3's own estimate: ~73 GiB), plus the prompt
    cache; more VRAM than the seed's (eight H200s) is not that host, and IQ2_XXS was never measured hybrid."""
    q2 = profile(gpus="all", quant="UD-Q2_K_XL")
    seed = seed000_host()
    files = model_fact(q2, shards=2, size=401 * GIB)  # 802 GiB
    decision = derive_mode(q2, observed(q2, host=seed, model=files))
    assert decision.mode == "hybrid" and decision.cpu_bytes is not None and decision.cpu_bytes >= 130 * GIB
    assert decision.estimate_bytes is not None and decision.estimate_bytes < 80 * GIB
    # 1 TiB (the seed's RAM) holds it; 187 GiB holds 143 GiB of experts with headroom and the 8 slots' 36.9 GiB of
    # context checkpoints, not the 8 GiB prompt cache too (187.9 GiB)
    assert memory_findings(q2, observed(q2, host=seed, model=files), ours_running=False) == ([], [])
    (refused,), _ = memory_findings(q2, observed(q2, host=seed000_host(ram_total=187 * GIB), model=files), False)
    assert "= 187.9 GiB, but the host has 187.0 GiB of RAM" in refused
    cache_1g = profile(gpus="all", quant="UD-Q2_K_XL", serve="{cache_ram: 1024}")
    assert memory_findings(
        cache_1g, observed(cache_1g, host=seed000_host(ram_total=187 * GIB), model=files), False
    ) == ([], [])
    h200s = derive_mode(q2, observed(q2, host=h200_host(8, ram_total=TIB), model=files))
    assert h200s.mode == "all-vram" and h200s.estimate_bytes is None
    iq2 = profile(gpus="[0, 1, 2, 3]", quant="UD-IQ2_XXS")
    four = derive_mode(iq2, observed(iq2, host=seed000_host(4), model=model_fact(iq2, shards=2, size=331 * GIB)))
    assert four.mode == "hybrid" and four.estimate_bytes is None  # its own estimate: no measurement to floor it
