"""Does the quant fit the profile's GPUs? Hybrid or all-VRAM, derived from bytes, not looked up.

Seed 000 ("Key facts"): the GPU/CPU expert split "is reproducible per (quant, GPU count, GPU memory)
combination — re-tune if any of those change". The catalog's mode was measured on 8x RTX PRO 6000
(765 GiB of VRAM): UD-IQ2_XXS is all-VRAM there and hybrid on four of them. So the mode is a
function of the quant's bytes (its cached shards or the hub's listing, else the catalog's size), the
GPUs' total memory (NVML; total, not free, so that it is reproducible), the fit margins, the KV cache
and the compute buffers. Pure; a leaf of planning/ (the launch and the host gate both import it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kimik3_reconciler.engines.gpus import requested_gpus
from kimik3_reconciler.engines.llamacpp import sizing
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.catalog import QuantMode
from kimik3_reconciler.model.facts import ModelLayout, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile

MIB = 1 << 20
# What llama-server's own CUDA context takes before it measures free memory: NVML showed 143156
# MiB free on an idle H200, llama.cpp then saw 142629 MiB (tests/fixtures/h200/server.log).
CUDA_CONTEXT_BYTES = 528 * MIB


def fit_margins(profile: Profile, count: int, mode: QuantMode) -> list[int]:
    """The --fit-target per GPU in MiB when the quant runs in `mode`: serve.fit_target, else the quant's
    margin (catalog.fit_margin). A scalar repeats; a short list is the gate's refusal, padded here."""
    fit = profile.fit_target_for(mode)
    margins = list(fit) if isinstance(fit, list) else [fit] * count
    return (margins + margins[-1:] * count)[:count] if margins else [0] * count


def trained_context(observed: Observed) -> int | None:
    """The GGUF's context_length, the cap of each slot's context; None before the headers are read."""
    return observed.layout.context_length or None if observed.layout is not None else None


def context_total(profile: Profile, observed: Observed) -> int:
    """The -c llama-server gets: serve.ctx_size, else 131,072 per slot capped at the trained context."""
    return profile.ctx_size_for(trained_context(observed))


def memory_per_context(profile: Profile, observed: Observed) -> int:
    """Bytes the context takes on the devices: the KV cache of the whole -c (MLA K-only, f16) plus each slot's
    recurrent state (KDA layers, F32); 0 before the GGUF headers are read."""
    layout = observed.layout
    if layout is None:
        return 0
    return (
        context_total(profile, observed) * layout.kv_bytes_per_token
        + profile.serve.parallel * layout.state_bytes_per_slot
    )


def context_note(profile: Profile, observed: Observed) -> str:
    """What the plan says each request gets: the slot's share of -c (llama-server without --kv-unified), where
    it comes from, and the KV cache of the whole -c once the GGUF headers say the attention shape."""
    total, trained = context_total(profile, observed), trained_context(observed)
    slot = total // profile.serve.parallel
    if profile.serve.ctx_size is not None:
        source = f"serve.ctx_size {total:,} over {profile.serve.parallel} slots"
    else:
        capped = f", capped at the trained {trained:,}" if trained and trained < catalog.REQUEST_CONTEXT else ""
        source = (
            f"the default: seed 001's {catalog.REQUEST_CONTEXT:,} a request{capped}, x {profile.serve.parallel} "
            f"slots = -c {total:,}"
        )
    layout = observed.layout
    kv = ""
    if layout:
        state = (
            f" + recurrent state {gib(profile.serve.parallel * layout.state_bytes_per_slot)}"
            if layout.state_bytes_per_slot
            else ""
        )
        kv = f"; KV cache {gib(total * layout.kv_bytes_per_token)}{state} (from the GGUF headers)"
    return f"each request gets {slot:,} tokens ({source}){kv}"


def compute_bytes(ubatch: int, layout: ModelLayout) -> int:
    """One device's compute buffers for one micro-batch: an estimate, fitted to llama.cpp's own
    measurement on an H200 (96 MiB at n_embd 64, 196 MiB at n_embd 256; ubatch 4096, vocab 260)."""
    return ubatch * (4 * layout.n_vocab + 136 * layout.n_embd + 15000)


def quant_bytes(profile: Profile, observed: Observed) -> tuple[int | None, str]:
    """(bytes, where the number comes from): the tensors of its GGUF headers, else the quant folder's
    files as listed or cached, else the catalog's size."""
    quant, layout = profile.model.quant, observed.layout
    if layout is not None:
        return (
            sum(layout.layer_dense) + sum(layout.layer_experts) + layout.output_bytes + layout.token_embd_bytes
        ), "its GGUF headers"
    listed = sum(f.size for f in observed.model.files if f.path.startswith(quant + "/")) or observed.model.total_bytes
    if listed:
        return listed, "its files"
    info = catalog.lookup(quant)
    if info is not None and info.size_bytes:
        return info.size_bytes, "the catalog's size"
    return None, "unknown"


@dataclass(frozen=True)
class ModeDecision:
    """Hybrid or all-VRAM for this profile on this host, with the numbers it was decided on."""

    mode: QuantMode
    catalog_mode: QuantMode
    derived: bool  # False: no GPU facts or no size, so the catalog's mode stands
    quant: str
    quant_bytes: int | None = None
    source: str = "unknown"  # where quant_bytes comes from
    gpus: int = 0
    vram_bytes: int = 0  # the GPUs' total memory
    gpu_need_bytes: int = 0  # weights that go to the GPUs all-VRAM + KV + compute buffers
    usable_bytes: int = 0  # VRAM less CUDA contexts and fit margins
    cpu_bytes: int | None = None  # what stays in RAM: the CPU experts (+ input embedding); None = unknown
    counted: str = "weights"  # what gpu_need_bytes holds: KV and buffers only once the GGUF headers are read
    estimate_bytes: int | None = None  # kimik3's own estimate of cpu_bytes when the seed's measurement raised it
    floor: str = ""  # the measurement that raised cpu_bytes to its figure ("" = none)

    @property
    def differs(self) -> bool:
        return self.derived and self.mode != self.catalog_mode

    def note(self, profile: Profile) -> str | None:
        """What the plan says when this host's mode is not the catalog's: why, and what the launch uses."""
        if not self.differs:
            return None
        ubatch = sizing.ubatch_for(profile, self.mode)
        uses = f"the launch uses ubatch {ubatch}"
        if profile.serve.ubatch is not None and ubatch != sizing.default_ubatch(self.mode):
            # Seed 000 step 5: 4096 for hybrid (halves TTFT), 2048 for all-VRAM (no scratch OOM).
            uses += f" as set (seed 000 uses {sizing.default_ubatch(self.mode)} for {self.mode})"
        else:
            uses += f", batch {sizing.batch_for(profile, self.mode)}"
        if profile.serve.fit_target is None and profile.serve.n_cpu_moe is None:
            uses += f", fit_target {profile.fit_target_for(self.mode)} MiB"
        listed = (
            f"the catalog's {self.catalog_mode}"
            if catalog.lookup(self.quant)
            else "hybrid, assumed for a quant not in the catalog"
        )
        if self.mode == "hybrid":
            why = (
                f"{gib(self.gpu_need_bytes)} ({self.counted}) is more than the {gib(self.usable_bytes)} "
                f"usable on {self.gpus} GPU(s) ({gib(self.vram_bytes)} less fit margins and CUDA contexts); "
                f"~{gib(self.cpu_bytes or 0)} of experts stay in RAM"
            )
        else:
            why = (
                f"{gib(self.gpu_need_bytes)} ({self.counted}) fits the {gib(self.usable_bytes)} usable on "
                f"{self.gpus} GPU(s) ({gib(self.vram_bytes)})"
            )
        return (
            f"mode: {self.quant} runs {self.mode} on this host, not {listed} (measured on 8x RTX PRO 6000): "
            f"{why}; {uses}"
        )


def derive_mode(profile: Profile, observed: Observed) -> ModeDecision:
    """The mode from the quant's bytes against the profile's GPUs; the catalog's where facts are missing. The engine's
    plan (LlamaCpp.render_plan) derives it once per plan; the gate, the launch and the forecast read that one."""
    # rule: quant-mode-derived
    # Seed 000: the split is reproducible per (quant, GPU count, GPU memory) and re-tuned when any changes.
    listed = profile.quant_mode
    size, source = quant_bytes(profile, observed)
    base = ModeDecision(listed, listed, False, profile.model.quant, size, source)
    layout = observed.layout
    kv = memory_per_context(profile, observed)
    if profile.build.variant == "cpu" or profile.gpus == "none":
        # The CPU build keeps the KV cache in RAM with the weights.
        return base if size is None else _with(base, cpu_bytes=size + kv)
    gpus, _ = requested_gpus(profile, observed.host)
    if observed.host.gpu_probe != "ok" or not gpus or size is None:
        return base  # GPU facts unknown (pure tests, the gate refuses), or no size: nothing to derive from
    host_only = layout.token_embd_bytes if layout else 0  # the input embedding stays in host memory
    vram = sum(g.memory_total for g in gpus)
    base = _with(base, counted="weights, KV, buffers" if layout else "weights; KV and buffers not known yet")

    def placed(mode: QuantMode, usable: int, need: int, cpu: int | None) -> ModeDecision:
        """`base` with what `mode` puts on the GPUs (`need` of `usable` bytes) and in host memory (`cpu`)."""
        return _with(
            base,
            mode=mode,
            derived=True,
            gpus=len(gpus),
            vram_bytes=vram,
            usable_bytes=usable,
            gpu_need_bytes=need,
            cpu_bytes=cpu,
        )

    if profile.serve.n_cpu_moe is not None:
        # A manual split: the profile pins N layers' experts to the CPU; no --fit margin applies.
        usable = vram - CUDA_CONTEXT_BYTES * len(gpus)
        cpu = sum(layout.layer_experts[: profile.serve.n_cpu_moe]) if layout else None
        mode: QuantMode = "hybrid" if profile.serve.n_cpu_moe > 0 else "all-vram"
        return placed(mode, usable, size - host_only + kv, None if cpu is None else cpu + host_only)

    def on_gpus(mode: QuantMode) -> tuple[int, int]:
        """(bytes the GPUs must hold, bytes they can) with the margins and ubatch of `mode`."""
        usable = sum(
            g.memory_total - CUDA_CONTEXT_BYTES - m * MIB for g, m in zip(gpus, fit_margins(profile, len(gpus), mode))
        )
        buffers = compute_bytes(sizing.ubatch_for(profile, mode), layout) * len(gpus) if layout else 0
        return size - host_only + kv + buffers, usable

    # All-VRAM when it fits with the all-VRAM margin (the quant's: seed 000 step 5, step 2) and ubatch;
    # a hybrid keeps in RAM what does not fit with the hybrid's margin and ubatch.
    need, usable = on_gpus("all-vram")
    mode = "all-vram" if need <= usable else "hybrid"
    if mode == "hybrid":
        need, usable = on_gpus("hybrid")
    decided = placed(mode, usable, need, max(0, need - usable) + host_only)
    return _measured_floor(decided) if mode == "hybrid" else decided


def _measured_floor(decision: ModeDecision) -> ModeDecision:
    """A hybrid's RAM is at least what the seed measured for its quant on a host whose GPUs held as much
    VRAM as these or more: kimik3's estimate (bytes less usable VRAM) missed ~57 GiB of it there."""
    measured = catalog.measured_ram(decision.quant)
    # rule: hybrid-ram-measured
    # Seed 000 step 2: UD-Q2_K_XL keeps ~130 GiB of experts on CPU on 8x RTX PRO 6000 (765 GiB of VRAM); kimik3's
    # estimate before the GGUF headers are read was 73 GiB there, so a 128 GiB host passed the sizing gate.
    # "765 GiB" is the seed's rounding (8 x 97887 MiB = 764.7 GiB; 8 x 96 GiB = 768 GiB): 1 % covers the same GPUs.
    if (
        measured is None
        or decision.vram_bytes > measured.vram_bytes * 1.01
        or (decision.cpu_bytes or 0) >= measured.cpu_bytes
    ):
        return decision
    return _with(decision, cpu_bytes=measured.cpu_bytes, estimate_bytes=decision.cpu_bytes, floor=measured.source)


def margin_refusal(profile: Profile, decision: ModeDecision) -> str | None:
    """A derived all-VRAM mode with a margin below the quant's all-VRAM floor: the seed's first-request OOM.
    (Profile rules judge the catalog's mode at load; this is the host's.)"""
    floor = catalog.fit_margin(profile.model.quant, "all-vram").minimum
    if not decision.differs or decision.mode != "all-vram" or floor is None or profile.serve.n_cpu_moe is not None:
        return None
    margins = fit_margins(profile, decision.gpus, "all-vram")
    # rule: quant-mode-derived
    # Seed 000 step 5: all-VRAM needs its margin, else the CUDA scratch pool OOMs on the first request after a load.
    if min(margins) >= floor:
        return None
    return (
        f"{profile.model.quant} runs all-VRAM on this host's {decision.gpus} GPU(s) (the catalog says "
        f"{decision.catalog_mode}), and serve.fit_target {min(margins)} MiB is below the {floor} MiB it needs "
        "all-VRAM: the CUDA scratch pool OOMs on the first request after the load (seed 000 step 5); raise "
        "fit_target or leave it out"
    )


def _with(decision: ModeDecision, **changes: object) -> ModeDecision:
    return replace(decision, **changes)  # type: ignore[arg-type]
