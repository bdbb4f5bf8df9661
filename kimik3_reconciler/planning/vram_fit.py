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

from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.catalog import QuantMode
from kimik3_reconciler.model.facts import GpuFact, HostFacts, ModelLayout, Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import ALL_VRAM_MIN_FIT_TARGET
from kimik3_reconciler.planning.humanize import gib

MIB = 1 << 20
# What llama-server's own CUDA context takes before it measures free memory: NVML showed 143156
# MiB free on an idle H200, llama.cpp then saw 142629 MiB (tests/fixtures/h200/server.log).
CUDA_CONTEXT_BYTES = 528 * MIB


def requested_gpus(profile: Profile, host: HostFacts) -> tuple[tuple[GpuFact, ...], list[str]]:
    """The GPUs the profile claims, resolved against the host (indices or UUIDs), and what is absent."""
    if profile.gpus == "all":
        return host.gpus, []
    if profile.gpus == "none":
        return (), []
    found, absent = [], []
    for ref in profile.gpus:
        gpu = next((g for g in host.gpus if (g.index == ref if isinstance(ref, int) else g.uuid == ref)), None)
        (found.append(gpu) if gpu else absent.append(str(ref)))
    return tuple(found), absent


def fit_margins(profile: Profile, count: int) -> list[int]:
    """serve.fit_target per GPU in MiB (a scalar repeats; a short list is the gate's refusal, padded here)."""
    fit = profile.serve.fit_target
    margins = list(fit) if isinstance(fit, list) else [fit] * count
    return (margins + margins[-1:] * count)[:count] if margins else [0] * count


def compute_bytes(ubatch: int, layout: ModelLayout) -> int:
    """One device's compute buffers for one micro-batch: an estimate, fitted to llama.cpp's own
    measurement on an H200 (96 MiB at n_embd 64, 196 MiB at n_embd 256; ubatch 4096, vocab 260)."""
    return ubatch * (4 * layout.n_vocab + 136 * layout.n_embd + 15000)


def quant_bytes(profile: Profile, observed: Observed) -> tuple[int | None, str]:
    """(bytes, where the number comes from): the tensors of its GGUF headers, else the quant folder's
    files as listed or cached, else the catalog's size."""
    quant, layout = profile.model.quant, observed.layout
    if layout is not None:
        return (sum(layout.layer_dense) + sum(layout.layer_experts) + layout.output_bytes
                + layout.token_embd_bytes), "its GGUF headers"
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

    @property
    def differs(self) -> bool:
        return self.derived and self.mode != self.catalog_mode

    def note(self, profile: Profile) -> str | None:
        """What the plan says when this host's mode is not the catalog's: why, and what the launch uses."""
        if not self.differs:
            return None
        ubatch = profile.ubatch_for(self.mode)
        uses = f"the launch uses ubatch {ubatch}"
        if profile.serve.ubatch is not None and ubatch != profile.ubatch_for_default(self.mode):
            # Seed 000 step 5: 4096 for hybrid (halves TTFT), 2048 for all-VRAM (no scratch OOM).
            uses += f" as set (seed 000 uses {profile.ubatch_for_default(self.mode)} for {self.mode})"
        short = [m for m in fit_margins(profile, self.gpus) if m < ALL_VRAM_MIN_FIT_TARGET]
        if self.mode == "all-vram" and profile.serve.n_cpu_moe is None and short:
            # Seed 000 step 5: all-VRAM needs a fit margin, else the CUDA scratch pool OOMs on the first request.
            uses += (f"; fit_target {min(short)} MiB is below the {ALL_VRAM_MIN_FIT_TARGET} MiB an all-VRAM "
                     "load needs (the first request OOMs)")
        listed = f"the catalog's {self.catalog_mode}" if catalog.lookup(self.quant) else "hybrid, assumed for a quant " \
            "not in the catalog"
        if self.mode == "hybrid":
            why = (f"{gib(self.gpu_need_bytes)} ({self.counted}) is more than the {gib(self.usable_bytes)} "
                   f"usable on {self.gpus} GPU(s) ({gib(self.vram_bytes)} less fit margins and CUDA contexts); "
                   f"~{gib(self.cpu_bytes or 0)} of experts stay in RAM")
        else:
            why = (f"{gib(self.gpu_need_bytes)} ({self.counted}) fits the {gib(self.usable_bytes)} usable on "
                   f"{self.gpus} GPU(s) ({gib(self.vram_bytes)})")
        return (f"mode: {self.quant} runs {self.mode} on this host, not {listed} (measured on 8x RTX PRO 6000): "
                f"{why}; {uses}")


def derive_mode(profile: Profile, observed: Observed) -> ModeDecision:
    """The mode from the quant's bytes against the profile's GPUs; the catalog's where facts are missing."""
    # rule: quant-mode-derived
    # Seed 000: the split is reproducible per (quant, GPU count, GPU memory) and re-tuned when any changes.
    listed = profile.quant_mode
    size, source = quant_bytes(profile, observed)
    base = ModeDecision(listed, listed, False, profile.model.quant, size, source)
    if profile.build.variant == "cpu" or profile.gpus == "none":
        return base if size is None else _with(base, cpu_bytes=size)
    gpus, _ = requested_gpus(profile, observed.host)
    if observed.host.gpu_probe != "ok" or not gpus or size is None:
        return base  # GPU facts unknown (pure tests, the gate refuses), or no size: nothing to derive from
    layout = observed.layout
    kv = profile.serve.ctx_size * layout.kv_bytes_per_token if layout else 0
    host_only = layout.token_embd_bytes if layout else 0  # the input embedding stays in host memory
    vram = sum(g.memory_total for g in gpus)
    base = _with(base, counted="weights, KV, buffers" if layout else "weights; KV and buffers not known yet")
    if profile.serve.n_cpu_moe is not None:
        # A manual split: the profile pins N layers' experts to the CPU; no --fit margin applies.
        usable = vram - CUDA_CONTEXT_BYTES * len(gpus)
        cpu = sum(layout.layer_experts[:profile.serve.n_cpu_moe]) if layout else None
        mode: QuantMode = "hybrid" if profile.serve.n_cpu_moe > 0 else "all-vram"
        return _with(base, mode=mode, derived=True, gpus=len(gpus), vram_bytes=vram, usable_bytes=usable,
                     gpu_need_bytes=size - host_only + kv, cpu_bytes=None if cpu is None else cpu + host_only)
    usable = sum(g.memory_total - CUDA_CONTEXT_BYTES - m * MIB for g, m in zip(gpus, fit_margins(profile, len(gpus))))
    buffers = compute_bytes(profile.ubatch_for("all-vram"), layout) * len(gpus) if layout else 0
    need = size - host_only + kv + buffers
    mode = "all-vram" if need <= usable else "hybrid"
    return _with(base, mode=mode, derived=True, gpus=len(gpus), vram_bytes=vram, usable_bytes=usable,
                 gpu_need_bytes=need, cpu_bytes=max(0, need - usable) + host_only)


def _with(decision: ModeDecision, **changes: object) -> ModeDecision:
    return replace(decision, **changes)  # type: ignore[arg-type]


def effective_ubatch(profile: Profile, observed: Observed) -> int:
    """serve.ubatch, else the default of the mode this host runs the quant in (seed 000 step 5)."""
    return profile.ubatch_for(derive_mode(profile, observed).mode)
