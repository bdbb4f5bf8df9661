"""The sizing gate's memory half, and the draft GPU's room: refuse, with the numbers, what cannot load.

- VRAM + RAM (seed 000 "Sizing gate is disk-and-memory"): a quant that does not fit both cannot run
  at any split. Seed 001 plans memory as the download size + 10-15 % runtime headroom, so the total
  must hold the quant + 10 %.
- RAM for the CPU experts: a hybrid keeps what the GPUs do not hold in RAM (seed 000: UD-Q2_K_XL
  keeps ~130 GiB busy); `--load-mode none` reads it into allocated memory, so it must fit the RAM,
  and what other processes hold now (MemAvailable) is worth a warning.
- The speculative draft (seed 000): "~9 GB free on the draft's GPU plus room for the snapshots — use
  a per-device --fit-target list": the margin --fit leaves on that GPU must hold it, and the GPU too.
Pure; the host gate calls it.
"""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import DRAFT_ROOM_MIB
from kimik3_reconciler.planning.humanize import gib
from kimik3_reconciler.planning.launch import draft_device
from kimik3_reconciler.planning.vram_fit import (
    CUDA_CONTEXT_BYTES,
    MIB,
    ModeDecision,
    derive_mode,
    fit_margins,
    quant_bytes,
    requested_gpus,
)

# Seed 001: "download size plus about 10-15 % runtime headroom"; refuse below the lower bound.
RUNTIME_HEADROOM = 0.10


def _with_headroom(n: int) -> int:
    return int(n * (1 + RUNTIME_HEADROOM))


def memory_findings(profile: Profile, observed: Observed, ours_running: bool) -> tuple[list[str], list[str]]:
    """(refusals, warnings) of the memory half of the sizing gate. `ours_running`: a kimik3 server of this
    host (ours, or one the plan stops first) holds RAM now, so MemAvailable understates what we will have."""
    host = observed.host
    if host.ram_total is None or not observed.model.files:
        return [], []  # not observed, or the listing is not known yet (the gate runs again once it is)
    size, _ = quant_bytes(profile, observed)
    gpus, _ = requested_gpus(profile, host) if profile.build.variant == "cuda" else ((), [])
    vram = sum(g.memory_total for g in gpus)
    need = _with_headroom(size)
    # rule: sizing-headroom
    # Seed 000: if the quant does not fit VRAM + RAM it cannot run at any split; seed 001: + 10-15 % headroom.
    if need > vram + host.ram_total:
        return [f"the quant is {gib(size)}, {gib(need)} with seed 001's {RUNTIME_HEADROOM:.0%} runtime headroom, "
                f"but VRAM + RAM is {gib(vram + host.ram_total)} ({len(gpus)} GPU(s) {gib(vram)} + RAM "
                f"{gib(host.ram_total)}): it cannot run at any split"], []
    return _expert_ram(derive_mode(profile, observed), host.ram_total, host.ram_available, ours_running)


def _expert_ram(decision: ModeDecision, ram_total: int, ram_available: int | None,
                ours_running: bool) -> tuple[list[str], list[str]]:
    cpu = decision.cpu_bytes
    if not cpu:
        return [], []  # all-VRAM, or the split is unknown (no GPU facts)
    need = _with_headroom(cpu)
    where = "the CPU build keeps the whole quant" if decision.gpus == 0 else \
        f"the hybrid keeps ~{gib(cpu)} of experts the {decision.gpus} GPU(s) cannot hold"
    # rule: sizing-headroom
    # Seed 000: the hybrid keeps its CPU experts in RAM (~130 GiB for UD-Q2_K_XL); --load-mode none allocates them.
    if need > ram_total:
        return [f"{where} in RAM, {gib(need)} with {RUNTIME_HEADROOM:.0%} headroom, but the host has "
                f"{gib(ram_total)} of RAM: use more GPUs, a smaller quant, or more RAM"], []
    if ram_available is not None and need > ram_available and not ours_running:
        return [], [f"{where} in RAM, {gib(need)} with {RUNTIME_HEADROOM:.0%} headroom, but only "
                    f"{gib(ram_available)} of the {gib(ram_total)} is available now: other processes hold the "
                    "rest (the load may be killed for memory)"]
    return [], []


def draft_room_refusals(profile: Profile, observed: Observed) -> list[str]:
    """The draft's GPU must keep ~9 GB (+ snapshots) free after --fit, and be big enough for it at all."""
    host, draft = observed.host, profile.serve.spec_draft
    if draft is None or profile.build.variant != "cuda" or host.gpu_probe != "ok":
        return []
    gpus, absent = requested_gpus(profile, host)
    if absent or not gpus:
        return []  # the GPU refusals name them
    device = draft_device(profile, len(gpus))
    index = int(device.removeprefix("CUDA")) if device else len(gpus)
    if index >= len(gpus):
        return []  # profile rules refuse a draft device outside the split
    gpu = gpus[index]
    name = f"{device} (GPU {gpu.index}, {gpu.name}, {gpu.memory_total // MIB} MiB)"
    # rule: draft-gpu-room
    # Seed 000: the DSpark draft needs ~9 GB free on its GPU plus room for the snapshots.
    if gpu.memory_total - CUDA_CONTEXT_BYTES < DRAFT_ROOM_MIB * MIB:
        return [f"the draft's GPU {name} is smaller than the ~{DRAFT_ROOM_MIB} MiB the DSpark draft needs (seed 000)"]
    if profile.serve.n_cpu_moe is not None:
        return []  # a manual split has no margin to check; the forecast shows what each GPU holds
    margin = fit_margins(profile, len(gpus), derive_mode(profile, observed).mode)[index]
    if margin < DRAFT_ROOM_MIB:
        return [f"{_margin_field(profile, index)} leaves {margin} MiB free on the draft's GPU {name}; the DSpark draft needs ~{DRAFT_ROOM_MIB} "
                f"MiB (~9 GB) there plus room for its snapshots (seed 000): write one margin per GPU, >= "
                f"{DRAFT_ROOM_MIB} for {device}"]
    if margin * MIB >= gpu.memory_total - CUDA_CONTEXT_BYTES:
        return [f"{_margin_field(profile, index)} = {margin} MiB is more than the draft's GPU {name} has: --fit would "
                "put no layer there, but the draft must sit with output.weight"]
    return []


def _margin_field(profile: Profile, index: int) -> str:
    """The profile field holding the GPU's --fit-target margin."""
    return f"serve.fit_target[{index}]" if isinstance(profile.serve.fit_target, list) else "serve.fit_target"
