"""The sizing gate's memory half, and the draft GPU's room: refuse, with the numbers, what cannot load.

- VRAM + RAM (seed 000 "Sizing gate is disk-and-memory"): a quant that does not fit both cannot run
  at any split. Seed 001 plans memory as the download size + 10-15 % runtime headroom, so the total
  must hold the quant + 10 %.
- RAM for the CPU experts: a hybrid keeps what the GPUs do not hold in RAM (seed 000: UD-Q2_K_XL
  keeps ~130 GiB busy); `--load-mode none` reads it into allocated memory, so it must fit the RAM,
  and what other processes hold now (MemAvailable) is worth a warning.
- RAM beside the weights (host_ram.py): the prompt cache (--cache-ram) and the live slots' context checkpoints
  (serve.parallel x --ctx-checkpoints x one sequence's recurrent state), in every mode.
- The speculative draft (seed 000): "~9 GB free on the draft's GPU plus room for the snapshots — use
  a per-device --fit-target list": the margin --fit leaves on that GPU must hold it on top of the quant's
  all-VRAM floor (6144 for UD-IQ2_XXS: 6144 + 9216), and the GPU too; with `gpus: all` the named
  draft device must be the host's last GPU.
Pure; the host gate calls it.
"""

from __future__ import annotations

from kimik3_reconciler.engines.gpus import requested_gpus
from kimik3_reconciler.engines.llamacpp.drafts import draft_device
from kimik3_reconciler.engines.llamacpp.host_ram import (
    CheckpointMemory,
    checkpoint_memory,
    prompt_cache_bytes,
    prompt_cache_words,
)
from kimik3_reconciler.engines.llamacpp.rules.drafts import DRAFT_ROOM_MIB
from kimik3_reconciler.engines.llamacpp.vram_fit import (
    CUDA_CONTEXT_BYTES,
    MIB,
    ModeDecision,
    context_total,
    derive_mode,
    fit_margins,
    memory_per_context,
    quant_bytes,
    trained_context,
)
from kimik3_reconciler.errors import FieldRefusal
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.facts import HostFacts, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile

# Seed 001: "download size plus about 10-15 % runtime headroom"; refuse below the lower bound.
RUNTIME_HEADROOM = 0.10


def _with_headroom(n: int) -> int:
    return int(n * (1 + RUNTIME_HEADROOM))


def worker_memory(observed: Observed) -> tuple[int, list[str]]:
    """(bytes the RPC workers offer, one note per worker): the devices a running rpc-server lists (VRAM of
    its GPUs, or its CPU device's RAM), else the worker host's RAM (docker info) for a worker not started yet."""
    total, notes = 0, []
    for worker in observed.workers:
        if worker.devices:
            size = sum(d.total for d in worker.devices)
            notes.append(f"{worker.name} {gib(size)} ({', '.join(d.name for d in worker.devices)})")
        else:
            size = worker.mem_total or 0
            notes.append(f"{worker.name} {gib(size)} (host RAM; its devices are known once rpc-server runs)")
        total += size
    return total, notes


def memory_findings(
    profile: Profile, observed: Observed, ours_running: bool, decision: ModeDecision | None = None
) -> tuple[list[str], list[str]]:
    """(refusals, warnings) of the memory half of the sizing gate. `ours_running`: a kimik3 server of this
    host (ours, or one the plan stops first) holds RAM now, so MemAvailable understates what we will have.
    RPC workers (issue 18) add their devices' memory: the layers placed there leave this host's RAM."""
    host = observed.host
    if host.ram_total is None or not observed.model.files:
        return [], []  # not observed, or the listing is not known yet (the gate runs again once it is)
    size, _ = quant_bytes(profile, observed)
    gpus, _ = requested_gpus(profile, host) if profile.build.variant == "cuda" else ((), [])
    vram = sum(g.memory_total for g in gpus)
    remote, notes = worker_memory(observed)
    need = _with_headroom(size)
    # rule: sizing-headroom
    # Seed 000: if the quant does not fit VRAM + RAM it cannot run at any split; seed 001: + 10-15 % headroom.
    if need > vram + host.ram_total + remote:
        workers = f" + RPC workers {gib(remote)} ({'; '.join(notes)})" if notes else ""
        return [
            f"the quant is {gib(size)}, {gib(need)} with seed 001's {RUNTIME_HEADROOM:.0%} runtime headroom, "
            f"but VRAM + RAM is {gib(vram + host.ram_total + remote)} ({len(gpus)} GPU(s) {gib(vram)} + RAM "
            f"{gib(host.ram_total)}{workers}): it cannot run at any split"
        ], []
    return _expert_ram(
        decision or derive_mode(profile, observed),
        host.ram_total,
        host.ram_available,
        ours_running,
        remote,
        prompt_cache_bytes(profile),
        checkpoint_memory(profile, observed),
    )


def _beside_weights(cache: int, checkpoints: CheckpointMemory | None) -> tuple[int, list[str]]:
    """(bytes, words) of what llama-server keeps in RAM beside the weights: the prompt cache, the checkpoints."""
    parts = [(cache, prompt_cache_words(cache))] if cache else []
    if checkpoints is not None and checkpoints.total:
        parts.append((checkpoints.total, checkpoints.words()))
    return sum(n for n, _ in parts), [w for _, w in parts]


def _expert_ram(
    decision: ModeDecision,
    ram_total: int,
    ram_available: int | None,
    ours_running: bool,
    remote: int = 0,
    cache: int = 0,
    checkpoints: CheckpointMemory | None = None,
) -> tuple[list[str], list[str]]:
    # What the RPC workers hold does not stay in this host's RAM (llama.cpp puts their devices first).
    cpu = max(0, (decision.cpu_bytes or 0) - remote) if decision.cpu_bytes and remote else decision.cpu_bytes
    beside, words = _beside_weights(cache, checkpoints)
    if not cpu and not beside:
        return [], []  # all-VRAM with no prompt cache nor checkpoints, or the split is unknown (no GPU facts)
    if not cpu:
        where, weights = "the server keeps", 0  # all-VRAM (or the split unknown): only the prompt cache is in RAM
    elif decision.gpus == 0:
        where, weights = "the CPU build keeps the whole quant", _with_headroom(cpu)
    elif remote:
        where = f"this host keeps ~{gib(cpu)} of the quant its GPUs and the RPC workers ({gib(remote)}) cannot hold"
        weights = _with_headroom(cpu)
    else:
        where, weights = (
            f"the hybrid keeps ~{gib(cpu)} of experts the {decision.gpus} GPU(s) cannot hold",
            _with_headroom(cpu),
        )
    if decision.floor and cpu:
        where += f" ({decision.floor}; kimik3's own estimate was {gib(decision.estimate_bytes or 0)})"
    need = weights + beside
    if cpu and beside:
        held = f"in RAM, {gib(weights)} with {RUNTIME_HEADROOM:.0%} headroom, + {' + '.join(words)} = {gib(need)}"
    elif cpu:
        held = f"in RAM, {gib(need)} with {RUNTIME_HEADROOM:.0%} headroom"
    else:
        held = f"{' + '.join(words)} in RAM" + (f" = {gib(need)}" if len(words) > 1 else "")
    # rule: sizing-headroom
    # Seed 000: the hybrid keeps its CPU experts in RAM (~130 GiB for UD-Q2_K_XL); --load-mode none allocates them.
    # rule: prompt-cache-ram
    # Seed 000 step 5 (CACHE_RAM): llama-server's prompt cache lives in the same RAM as the CPU experts.
    # rule: ctx-checkpoint-ram
    # Each slot keeps up to --ctx-checkpoints copies of its recurrent state on the host, outside --cache-ram.
    if need > ram_total:
        fewer = (
            ", fewer slots (serve.parallel) or checkpoints (--ctx-checkpoints N in serve.extra_args)"
            if checkpoints is not None and checkpoints.total
            else ""
        )
        return [
            f"{where} {held}, but the host has {gib(ram_total)} of RAM: use more GPUs, a smaller quant, "
            f"a smaller serve.cache_ram{fewer}, or more RAM"
        ], []
    if ram_available is not None and need > ram_available and not ours_running:
        return [], [
            f"{where} {held}, but only {gib(ram_available)} of the {gib(ram_total)} is available now: other "
            "processes hold the rest (the load may be killed for memory)"
        ]
    return [], []


def context_refusals(profile: Profile, observed: Observed, decision: ModeDecision | None = None) -> list[str]:
    """Each request's context against what the GGUF headers say: the trained context caps a slot, and the KV
    cache of the whole -c must fit the GPUs with the dense weights and buffers, whatever --fit moves to the CPU."""
    layout, trained = observed.layout, trained_context(observed)
    total, parallel = context_total(profile, observed), profile.serve.parallel
    slot = total // parallel
    if profile.serve.ctx_size is not None and trained and slot > trained:
        # rule: ctx-size-limit
        # The model's own header caps each slot (seed 001: 1,048,576 for Kimi-K3); llama.cpp would only warn.
        return [
            f"serve.ctx_size {total:,} over serve.parallel {parallel} slots is {slot:,} tokens a request, above "
            f"this model's trained context of {trained:,} (its GGUF header); llama.cpp would only warn: write "
            f"at most {trained * parallel:,}"
        ]
    if (
        layout is None
        or not layout.kv_bytes_per_token
        or profile.build.variant != "cuda"
        or profile.gpus == "none"
        or profile.serve.n_cpu_moe is not None
        or profile.workers
    ):
        return []  # no attention shape yet, the KV cache is in RAM (counted there), or the split is the profile's
    decision = decision or derive_mode(profile, observed)
    if not decision.derived:
        return []
    kv = memory_per_context(profile, observed)
    state = parallel * layout.state_bytes_per_slot
    always_on_gpus = decision.gpu_need_bytes - sum(layout.layer_experts)  # dense, output, KV, compute buffers
    if always_on_gpus <= decision.usable_bytes:
        return []
    room = decision.usable_bytes - (always_on_gpus - kv)
    fits = max(0, room - state) // layout.kv_bytes_per_token // parallel
    told = (
        f"serve.ctx_size {total:,} over {parallel} slots"
        if profile.serve.ctx_size is not None
        else f"the default context ({catalog.REQUEST_CONTEXT:,} a request, seed 001, x {parallel} slots)"
    )
    # rule: kv-cache-fits
    # The KV cache stays on the GPUs with the dense weights (--fit moves only experts to the CPU, and kimik3's
    # explicit -c forbids --fit from shrinking the context): if they do not fit, no split loads.
    states = f" and {parallel} slots' recurrent state" if state else ""
    return [
        f"{told} needs a KV cache{states} of {gib(kv)} ({layout.kv_bytes_per_token:,} bytes a token, from the "
        f"GGUF headers); with the dense weights and compute buffers the GPUs must hold {gib(always_on_gpus)} even with "
        f"every expert on the CPU, more than the {gib(decision.usable_bytes)} usable on {decision.gpus} GPU(s): "
        f"{fits:,} tokens a request fit; write serve.ctx_size <= {fits * parallel:,} or lower serve.parallel"
    ]


def draft_device_refusal(profile: Profile, host: HostFacts) -> FieldRefusal | None:
    """With `gpus: all` the split is the host's GPUs, so only their count says which is the last: a named
    spec_draft.device must be that one (with a `gpus:` list the profile rules judge it)."""
    draft = profile.serve.spec_draft
    if draft is None or draft.device == "auto" or profile.gpus != "all" or profile.build.variant != "cuda":
        return None
    if not host.gpus:
        return None  # no GPU facts: the GPU refusals say so
    last = f"CUDA{len(host.gpus) - 1}"
    # rule: spec-draft-device
    # Seed 000: the draft must sit on the GPU holding output.weight, the last of the layer split
    # (--spec-draft-device CUDA7 on 8 GPUs); anywhere else llama.cpp aborts in graph reservation after the load.
    if draft.device == last:
        return None
    return FieldRefusal(
        ("serve", "spec_draft", "device"),
        f"serve.spec_draft.device must be {last} (the GPU holding output.weight, the last of the "
        f"split): it is {draft.device}, and gpus: all splits the model over this host's "
        f"{len(host.gpus)} GPUs; elsewhere llama.cpp aborts in graph reservation (write {last} or auto)",
    )


def draft_room_refusals(profile: Profile, observed: Observed, decision: ModeDecision | None = None) -> list[str]:
    """The draft's device, then its GPU: it must keep ~9 GB (+ snapshots) free after --fit besides the
    quant's own all-VRAM margin, and be big enough for it at all."""
    host, draft = observed.host, profile.serve.spec_draft
    if draft is None or profile.build.variant != "cuda":
        return []
    misplaced = draft_device_refusal(profile, host)
    if misplaced is not None:
        return [misplaced]
    if host.gpu_probe != "ok":
        return []
    gpus, absent = requested_gpus(profile, host)
    if absent or not gpus:
        return []  # the GPU refusals name them
    device = draft_device(profile, len(gpus))
    index = int(device.removeprefix("CUDA")) if device else len(gpus)
    if index >= len(gpus):
        return []  # outside the split: the profile rules (a gpus: list) or draft_device_refusal (gpus: all) refuse it
    gpu = gpus[index]
    name = f"{device} (GPU {gpu.index}, {gpu.name}, {gpu.memory_total // MIB} MiB)"
    # rule: draft-gpu-room
    # Seed 000: the DSpark draft needs ~9 GB free on its GPU plus room for the snapshots.
    if gpu.memory_total - CUDA_CONTEXT_BYTES < DRAFT_ROOM_MIB * MIB:
        return [f"the draft's GPU {name} is smaller than the ~{DRAFT_ROOM_MIB} MiB the DSpark draft needs (seed 000)"]
    if profile.serve.n_cpu_moe is not None:
        return []  # a manual split has no margin to check; the forecast shows what each GPU holds
    mode = (decision or derive_mode(profile, observed)).mode
    margin = fit_margins(profile, len(gpus), mode)[index]
    # The margin is shared: the quant's own all-VRAM floor (the CUDA scratch pool's room on every GPU, seed 000
    # step 5) stays needed on the draft's GPU, and the draft comes on top of it.
    floor = catalog.fit_margin(profile.model.quant, mode).minimum or 0
    need = floor + DRAFT_ROOM_MIB
    if margin < need:
        parts = (
            f"{floor} MiB ({profile.model.quant}'s all-VRAM margin: the CUDA scratch pool's room) + "
            f"{DRAFT_ROOM_MIB} MiB (the DSpark draft, ~9 GB)"
            if floor
            else f"~{DRAFT_ROOM_MIB} MiB (~9 GB)"
        )
        return [
            f"{_margin_field(profile, index)} leaves {margin} MiB free on the draft's GPU {name}; it needs "
            f"{parts} there plus room for the draft's snapshots (seed 000): write one margin per GPU, >= "
            f"{need} for {device}"
        ]
    if margin * MIB >= gpu.memory_total - CUDA_CONTEXT_BYTES:
        return [
            f"{_margin_field(profile, index)} = {margin} MiB is more than the draft's GPU {name} has: --fit would "
            "put no layer there, but the draft must sit with output.weight"
        ]
    return []


def _margin_field(profile: Profile, index: int) -> str:
    """The profile field holding the GPU's --fit-target margin."""
    return f"serve.fit_target[{index}]" if isinstance(profile.serve.fit_target, list) else "serve.fit_target"
