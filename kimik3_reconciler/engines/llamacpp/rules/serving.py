"""Rules about how the server is sized: --fit-target margins, batch/ubatch, context per slot, the prompt
cache and the load mode (seed 000 step 5)."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.engines.llamacpp import sizing
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import Finding, error, warning

HYBRID_UBATCH = sizing.UBATCH["hybrid"]
ALL_VRAM_UBATCH = sizing.UBATCH["all-vram"]


def _draft_gpu_index(p: Profile, gpu_count: int) -> int | None:
    """The position of the draft's GPU among `gpu_count` (auto = the last one), or None without a draft."""
    draft = p.serve.spec_draft
    if draft is None:
        return None
    return gpu_count - 1 if draft.device == "auto" else int(draft.device.removeprefix("CUDA"))


def fit_target(p: Profile) -> Iterator[Finding]:
    serve, where = p.serve, ("serve", "fit_target")
    margins = serve.fit_target if isinstance(serve.fit_target, list) else None
    if margins is not None and p.gpus == "none":
        # rule: fit-target-list
        # A per-GPU margin with no GPU: nothing to index it by (the CPU build has no --fit-target).
        yield error(where, "a per-GPU list makes no sense with gpus: none")
    elif margins is not None and isinstance(p.gpus, list) and len(margins) != len(p.gpus):
        # rule: fit-target-list
        # llama.cpp indexes --fit-target like the device list; a short list silently leaves the rest at 1024 MiB.
        yield error(where, f"has {len(margins)} entries but gpus lists {len(p.gpus)}: write one per GPU, in order")
    if sizing.manual_split(serve):
        if serve.fit_target is not None:
            # rule: fit-target-manual-split
            # Seed 000: N_CPU_MOE switches to -ngl 999 --n-cpu-moe N; --fit (and its margin) is off.
            yield warning(where, "is ignored: n_cpu_moe is set, so the split is manual (no --fit)")
        return
    if p.serve.spec_draft is not None and margins is None:
        # rule: spec-draft-fit-list
        # Seed 000: the draft needs ~9 GB free on its GPU plus room for snapshots: use a per-device list.
        yield warning(where, "with spec_draft, give the draft's GPU more room (~9 GB + snapshots): write one per GPU")
    if p.gpus != "none":
        yield from fit_margin_findings(p, p.quant_mode)


def fit_margin_findings(p: Profile, mode: catalog.QuantMode) -> Iterator[Finding]:
    """serve.fit_target against the quant's measured margin in `mode` (the catalog's mode here; a planner
    that derived the mode from the host's GPUs may call it with that one). Omitted = the quant's default."""
    serve, where = p.serve, ("serve", "fit_target")
    if mode != "all-vram" or serve.fit_target is None or sizing.manual_split(serve):
        return
    margin = catalog.fit_margin(p.model.quant, mode)
    margins = serve.fit_target if isinstance(serve.fit_target, list) else None
    per_gpu = margins if margins is not None else [serve.fit_target]
    draft_index = _draft_gpu_index(p, len(per_gpu)) if margins is not None else None
    unmeasured = "" if margin.measured else f" (not measured for {p.model.quant}: {margin.source})"
    for i, mib in enumerate(per_gpu):
        at = (*where, i) if margins is not None else where
        if margin.minimum is not None and mib < margin.minimum:
            # rule: allvram-fit-target
            # Seed 000 step 5: too small a margin OOMs the CUDA scratch pool on the first request after a full
            # (~17-minute) load; the floor is per quant (REAP770 measured fine at 4096, step 2).
            yield error(
                at,
                f"{mib} MiB is too small for {p.model.quant} all-VRAM: needs >= {margin.minimum} "
                f"(the CUDA scratch pool OOMs on the first request after the load){unmeasured}. Write "
                f"{margin.default}{' here' if margins is not None else ''} (or leave serve.fit_target out: "
                f"its default follows the quant); {margin.source}{_measured_elsewhere(p.model.quant, mib)}",
            )
        elif margin.spills_at is not None and mib >= margin.spills_at and i != draft_index:
            # rule: fit-target-spill
            # Seed 000 step 2: on REAP770 a 6144 margin silently spills 2-3 expert layers to the CPU, -40 %.
            yield warning(
                at,
                f"{mib} MiB on {p.model.quant} spills 2-3 expert layers to the CPU (-40 % measured "
                f"at {margin.spills_at}); {margin.default} is the measured setting",
            )


def _measured_elsewhere(quant: str, mib: int) -> str:
    """Where a too-small margin comes from when another quant was measured at it (REAP770's 4096, seed 000
    step 2, which kimik3 once shipped for UD-IQ2_XXS too: docs/operations.md "Upgrading kimik3")."""
    others = [
        q
        for q in catalog.CATALOG.values()
        if q.name != quant and q.all_vram_fit is not None and q.all_vram_fit.default == mib
    ]
    return "".join(
        f"; {mib} is {q.name}'s measured margin ({q.all_vram_fit.source}), not {quant}'s"
        for q in others
        if q.all_vram_fit is not None
    )


def ubatch(p: Profile) -> Iterator[Finding]:
    ubatch, where = p.serve.ubatch, ("serve", "ubatch")
    if ubatch is None:
        return
    if p.quant_mode == "hybrid" and ubatch != HYBRID_UBATCH:
        # rule: hybrid-ubatch
        # Seed 000: hybrid prefill copies every CPU expert to GPU0 per micro-batch; 4096 halves TTFT.
        yield warning(where, f"{ubatch} on a hybrid quant: 4096 copies the CPU experts once per prompt and halves TTFT")
    elif p.quant_mode == "all-vram" and ubatch > ALL_VRAM_UBATCH:
        # rule: allvram-ubatch
        # Seed 000: the fix for a CUDA OOM on the first request after an all-VRAM load is -ub 2048.
        yield warning(where, f"{ubatch} on an all-VRAM quant risks a CUDA OOM on the first request; use 2048")


def batch(p: Profile) -> Iterator[Finding]:
    batch, ubatch = sizing.effective_batch(p), sizing.effective_ubatch(p)
    if batch < ubatch:
        # rule: batch-below-ubatch
        # llama.cpp lowers ubatch to batch without a word, undoing seed 000 step 5's BATCH/UBATCH setting.
        told = "" if p.serve.ubatch is not None else f" (the default for {p.quant_mode} {p.model.quant})"
        yield error(
            ("serve", "batch"),
            f"{batch} is below serve.ubatch {ubatch}{told}: llama.cpp would lower "
            f"ubatch to {batch} silently; set batch >= ubatch (seed 000: BATCH = UBATCH)",
        )


# Tokens a slot needs for the chat template, kimik3's verify prompts and their replies on random weights; real
# weights think first and get more (verify asks up to 1024, then 4096), which any sane profile has.
MIN_SLOT_CONTEXT = 512
INT32_MAX = 2**31 - 1  # llama.cpp parses -c into an int32


def ctx_size(p: Profile) -> Iterator[Finding]:
    total, per_slot = p.ctx_size_for(), p.slot_context()
    if p.serve.ctx_size is None and total > INT32_MAX:
        # rule: ctx-size-default
        # The default is 131,072 per slot: enough slots make the total overflow llama.cpp's int -c.
        yield error(
            ("serve", "parallel"),
            f"{p.serve.parallel} slots x {catalog.REQUEST_CONTEXT:,} tokens (the "
            f"default context per request, seed 001) is {total:,}, more than llama.cpp's -c holds "
            f"({INT32_MAX:,}): write serve.ctx_size (the total over all slots) or lower parallel",
        )
        return
    if per_slot > catalog.CONTEXT_LENGTH:
        # rule: ctx-size-limit
        # Seed 001: K3 supports 1,048,576 tokens, per request; llama.cpp only warns when a slot's share of -c
        # is above the trained context length.
        yield error(
            ("serve", "ctx_size"),
            f"{p.serve.ctx_size} over serve.parallel {p.serve.parallel} slots is "
            f"{per_slot:,} tokens a request, above Kimi-K3's trained context of {catalog.CONTEXT_LENGTH:,} "
            "tokens (seed 001: the model specification); llama.cpp would only warn. Seed 001 suggests "
            f"starting with {catalog.REQUEST_CONTEXT} a request (the default: ctx_size = "
            f"{catalog.REQUEST_CONTEXT} x parallel)",
        )
    if per_slot < MIN_SLOT_CONTEXT:
        # rule: slot-context-floor
        # llama-server gives each of `parallel` slots ctx_size/parallel tokens (kimik3 sets --parallel, so the
        # KV cache is not unified): below this a chat template plus kimik3's verify reply do not fit, and at a
        # few tokens the server aborts at warm-up, both only after the whole load.
        yield error(
            ("serve", "ctx_size"),
            f"{total} over serve.parallel {p.serve.parallel} slots is "
            f"{per_slot} tokens a slot, below {MIN_SLOT_CONTEXT}: too small for a chat request and its reply "
            "(each slot gets ctx_size/parallel); raise ctx_size or lower parallel",
        )


def cache_ram(p: Profile) -> Iterator[Finding]:
    if p.serve.cache_ram == 0:
        # rule: cache-ram-zero
        # Seed 000: CACHE_RAM=0 only when benchmarking (it turns the host-RAM prompt cache off).
        yield warning(("serve", "cache_ram"), "0 turns the prompt cache off: only for benchmarking")


LOAD_MODES = ("none", "dio")
_MAPPED_MODES = ("auto", "mmap", "mlock", "mmap+mlock")


def load_mode(p: Profile) -> Iterator[Finding]:
    mode = p.serve.load_mode
    if mode in _MAPPED_MODES:
        # rule: load-mode
        # Seed 000: --load-mode none is required, not optional: a mapped model measured as a 20+-minute
        # single-request stall (pages faulted in by the first request, not at load).
        yield error(
            ("serve", "load_mode"),
            f"{mode!r} maps the model: seed 000 measured a 20+-minute "
            "single-request stall without --load-mode none; use 'none' (default) or 'dio'",
        )
    elif mode not in LOAD_MODES:
        # rule: load-mode
        # llama.cpp's other modes are the mapped ones above; anything else it would refuse at launch.
        yield error(("serve", "load_mode"), f"must be 'none' or 'dio', not {mode!r}")
