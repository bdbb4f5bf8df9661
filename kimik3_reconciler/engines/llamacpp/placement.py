"""The MoE placement forecast, before anything is downloaded: from the quant's GGUF headers and the
GPUs' free memory, which layers' routed experts stay on the CPU and what each device holds.

It follows llama.cpp's `--fit` (reference/llama-cpp.md §1.2.1 step 4) as measured on an H200
(tests/fixtures/h200/forecast-cases.jsonl): dense weights, the output head, the KV cache and the
compute buffers go to the GPU first; the layers' experts then fill the GPU from the first layer
on; the last layers keep their experts on the CPU, the first of them partly (one or two of its
gate/up/down tensors still fit). With `n_cpu_moe` the split is the profile's: the first N
layers' experts on the CPU. llama.cpp measures its compute buffers; kimik3 estimates them
(calibrated on the same runs), so the forecast is an estimate, shown as one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimik3_reconciler.engines.gpus import requested_gpus
from kimik3_reconciler.engines.llamacpp import sizing
from kimik3_reconciler.engines.llamacpp.host_ram import ram_lines
from kimik3_reconciler.engines.llamacpp.vram_fit import (
    CUDA_CONTEXT_BYTES,
    ModeDecision,
    compute_bytes,
    derive_mode,
    fit_margins,
    memory_per_context,
)
from kimik3_reconciler.model.facts import ModelLayout, Observed
from kimik3_reconciler.model.humanize import SEED_LOAD_BYTES_PER_S, gib
from kimik3_reconciler.model.profile import Profile

MIB = 1 << 20


@dataclass(frozen=True)
class DeviceShare:
    device: str  # CUDA0.. in the container's numbering
    layers: int
    weight_bytes: int
    total_bytes: int  # weights + KV share + compute buffer


@dataclass(frozen=True)
class Forecast:
    mode: str  # "all-vram" | "hybrid" | "cpu"
    cpu_expert_layers: tuple[int, ...]
    devices: tuple[DeviceShare, ...]
    host_bytes: int  # input embedding + CPU-resident experts (RAM)
    load_seconds: float
    rpc: tuple[str, ...] = ()  # one line per RPC worker device: what it offers and the layers it gets
    measured_ram: str = ""  # where the seed measured more RAM than this forecast (the sizing gate counts that)
    ram: tuple[str, ...] = ()  # host RAM beside the weights: the prompt cache, the slots' context checkpoints

    def lines(self) -> list[str]:
        cpu = self.cpu_expert_layers
        # A CPU build has no other device: every expert is there, "partly" would be untrue.
        share = "all on" if self.mode == "cpu" else "(partly) on"
        where = f"{len(cpu)} layers' experts {share} the CPU ({cpu[0]}-{cpu[-1]})" if cpu else "no experts on the CPU"
        out = [
            f"placement forecast: {self.mode}, {where}; RAM {gib(self.host_bytes)}{self.measured_ram}; "
            f"load ~{self.load_seconds / 60:.0f} min"
        ]
        out += [
            f"  {d.device}: {d.layers} layers, weights {gib(d.weight_bytes)}, with KV+compute {gib(d.total_bytes)}"
            for d in self.devices
        ]
        out += [f"  {line}" for line in self.rpc]
        out += [f"  {line}" for line in self.ram]
        return out


def rpc_lines(profile: Profile, observed: Observed, layout: ModelLayout) -> tuple[str, ...]:
    """Where layers land on the RPC workers: llama.cpp lists RPC devices before the local ones and splits
    the offloaded layers over devices by free memory, so the workers take the first layers (an estimate:
    the same share of the layers as of the devices' free memory; the verify step reads the real split)."""
    if not profile.workers:
        return ()
    devices = [(f"{w.name}/{d.name}", d.free or d.total) for w in observed.workers for d in w.devices]
    devices += [(f"{w.name}/(not running)", w.mem_total or 0) for w in observed.workers if not w.devices]
    local = sum(g.memory_free for g in observed.host.gpus) if profile.build.variant == "cuda" else 0
    total = sum(size for _, size in devices) + local
    lines, first = [], 0
    for name, size in devices:
        count = min(layout.n_layer - first, round(layout.n_layer * size / total)) if total else 0
        span = f"layers {first}-{first + count - 1}" if count else "no layers"
        lines.append(f"RPC {name}: {gib(size)} free, ~{span} (devices before the local ones)")
        first += count
    return tuple(lines)


def _cpu_experts(profile: Profile, layout: ModelLayout, spare: int) -> dict[int, int]:
    """layer -> expert bytes left on the CPU (a partial layer keeps only some of its tensors there)."""
    with_experts = [i for i, e in enumerate(layout.layer_experts) if e]
    if profile.serve.n_cpu_moe is not None:
        return {i: layout.layer_experts[i] for i in with_experts if i < profile.serve.n_cpu_moe}
    on_cpu: dict[int, int] = {}
    for i in with_experts:  # front to back: --fit keeps the first layers' experts on the GPU
        size = layout.layer_experts[i]
        if not on_cpu and size <= spare:
            spare -= size
            continue
        # The first layer that does not fit keeps as many of its three expert tensors as fit.
        thirds = 0 if on_cpu else min(2, max(0, spare) * 3 // size)
        on_cpu[i] = size - size * thirds // 3
    return on_cpu


def _split(
    layout: ModelLayout, cpu: dict[int, int], budgets: list[int], fixed: int, kv_per_layer: int
) -> list[DeviceShare]:
    """Layers back to front over the devices (the last device gets the last layers and the output)."""
    shares, layer = [], layout.n_layer - 1
    for d in reversed(range(len(budgets))):
        weights = layout.output_bytes if d == len(budgets) - 1 else 0
        used, count = weights + fixed, 0
        while layer >= 0:
            cost = layout.layer_dense[layer] + layout.layer_experts[layer] - cpu.get(layer, 0) + kv_per_layer
            if d > 0 and used + cost > budgets[d]:
                break
            weights += cost - kv_per_layer
            used += cost
            count += 1
            layer -= 1
        shares.append(DeviceShare(f"CUDA{d}", count, weights, used))
    return list(reversed(shares))


def forecast(profile: Profile, observed: Observed, decision: ModeDecision | None = None) -> Forecast | None:
    layout, host = observed.layout, observed.host
    if layout is None:
        return None
    total = sum(layout.layer_dense) + sum(layout.layer_experts) + layout.output_bytes + layout.token_embd_bytes
    load = total / (observed.load_rate or SEED_LOAD_BYTES_PER_S)
    rpc = rpc_lines(profile, observed, layout)
    if profile.build.variant == "cpu" or profile.gpus == "none":
        layers = tuple(i for i, e in enumerate(layout.layer_experts) if e)
        return Forecast("cpu", layers, (), total, load, rpc, ram=ram_lines(profile, observed))
    gpus, _ = requested_gpus(profile, host)
    if not gpus:
        return None  # GPU facts unknown (or absent: the gate says so)
    decision = decision or derive_mode(profile, observed)
    mode = decision.mode
    # The margins and buffers of the mode this host runs the quant in: the profile's, else the quant's.
    budgets = [
        g.memory_free - CUDA_CONTEXT_BYTES - t * MIB for g, t in zip(gpus, fit_margins(profile, len(gpus), mode))
    ]
    kv = memory_per_context(profile, observed)
    fixed = compute_bytes(sizing.ubatch_for(profile, mode), layout)
    dense = sum(layout.layer_dense) + layout.output_bytes + kv + fixed * len(gpus)
    cpu = _cpu_experts(profile, layout, sum(budgets) - dense)
    shares = _split(layout, cpu, budgets, fixed, kv // max(1, layout.n_layer))
    host_bytes = layout.token_embd_bytes + sum(cpu.values())
    # rule: hybrid-ram-measured
    # Seed 000 step 2 measured more RAM on its host than an aggregate forecast gives: the gate counts the measurement.
    measured = (
        f" (the sizing gate counts {gib(decision.cpu_bytes or 0)}: {decision.floor})"
        if decision.floor and (decision.cpu_bytes or 0) > host_bytes
        else ""
    )
    mode_seen = "hybrid" if cpu else "all-vram"
    ram = ram_lines(profile, observed)
    return Forecast(mode_seen, tuple(sorted(cpu)), tuple(shares), host_bytes, load, rpc, measured, ram)
