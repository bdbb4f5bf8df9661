"""Cross-field rules of a profile (shared/PROFILE.md; seed 000 says why): pure checks of a validated Profile."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.builtin_patches import BUILTIN_PATCHES, builtin_patch, builtin_patches_for
from kimik3_reconciler.model.hub_endpoint import TOKEN_POLICY, token_may_go_to
from kimik3_reconciler.model.profile import Profile

FieldPath = tuple[str | int, ...]  # a field's place in the profile: ("serve", "fit_target", 0)

HYBRID_UBATCH = catalog.UBATCH["hybrid"]
ALL_VRAM_UBATCH = catalog.UBATCH["all-vram"]
DRAFT_ROOM_MIB = 9216  # seed 000: the DSpark draft needs ~9 GB free on its GPU, plus snapshots

_SECRET_ENV = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "LLAMA_API_KEY"})
_SECRET_SUFFIXES = ("_TOKEN", "_KEY", "_SECRET", "_PASSWORD")
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{30,}")
_NEVER_SECRETS = "a profile never contains a secret"
_NO_SECRETS = f"{_NEVER_SECRETS}: use serve.api_key_file / the environment"
_FIXED = "is fixed by kimik3 (seed 000: a Kimi-K3/hardware requirement, not a knob)"

# llama-server options kimik3 renders itself: (flags, their environment variables (reference/llama-cpp.md §1.1;
# llama-server reads LLAMA_ARG_* as options), what to write instead (None: fixed, not a knob at all)). Both the flag
# and its variable are refused: the variable is a second way to the same option, and for an option kimik3 renders
# only sometimes (--mmproj, --cache-ram, a draft) or not at all (-hf: another model) it is the one that counts.
_OWNED: tuple[tuple[tuple[str, ...], tuple[str, ...], str | None], ...] = (
    (("-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-dr", "--docker-repo"),
     ("LLAMA_ARG_MODEL", "LLAMA_ARG_MODEL_URL", "LLAMA_ARG_HF_REPO", "LLAMA_ARG_HF_FILE", "LLAMA_ARG_DOCKER_REPO"),
     "use model.repo / model.quant (the verified, pinned download)"),
    (("--host",), ("LLAMA_ARG_HOST",), "use serve.host"),
    (("--port",), ("LLAMA_ARG_PORT",), "use serve.port"),
    (("--api-key", "--api-key-file"), ("LLAMA_ARG_API_KEY_FILE",), f"use serve.api_key_file ({_NEVER_SECRETS})"),
    (("-hft", "--hf-token"), (), f"tokens come from the environment ({_NEVER_SECRETS})"),
    (("-a", "--alias"), ("LLAMA_ARG_ALIAS",), "the served model id is the profile's name"),
    # The container's GPUs are `gpus`; llama.cpp indexes --fit-target and the draft device over these devices.
    (("-dev", "--device"), ("LLAMA_ARG_DEVICE",), "use gpus (the container sees exactly those GPUs)"),
    (("--numa",), ("LLAMA_ARG_NUMA",), None),
    (("-ctk", "--cache-type-k", "-ctv", "--cache-type-v"), ("LLAMA_ARG_CACHE_TYPE_K", "LLAMA_ARG_CACHE_TYPE_V"), None),
    (("-t", "--threads", "-tb", "--threads-batch"), ("LLAMA_ARG_THREADS",), None),
    (("-lm", "--load-mode", "--mmap", "--no-mmap", "--mlock"), ("LLAMA_ARG_LOAD_MODE",),
     "use serve.load_mode (none or dio)"),
    (("-fit", "--fit", "-fitt", "--fit-target"), ("LLAMA_ARG_FIT", "LLAMA_ARG_FIT_TARGET"),
     "use serve.fit_target (or serve.n_cpu_moe for a manual split)"),
    (("-ngl", "--gpu-layers", "--n-gpu-layers", "-ncmoe", "--n-cpu-moe", "-cmoe", "--cpu-moe"),
     ("LLAMA_ARG_N_GPU_LAYERS", "LLAMA_ARG_N_CPU_MOE", "LLAMA_ARG_CPU_MOE"), "use serve.n_cpu_moe"),
    (("-b", "--batch-size"), ("LLAMA_ARG_BATCH",), "use serve.batch"),
    (("-ub", "--ubatch-size"), ("LLAMA_ARG_UBATCH",), "use serve.ubatch"),
    (("-c", "--ctx-size"), ("LLAMA_ARG_CTX_SIZE",), "use serve.ctx_size"),
    (("-np", "--parallel"), ("LLAMA_ARG_N_PARALLEL",), "use serve.parallel"),
    (("-cram", "--cache-ram"), ("LLAMA_ARG_CACHE_RAM",), "use serve.cache_ram"),
    (("--metrics",), ("LLAMA_ARG_ENDPOINT_METRICS",), "it is always on"),
    (("-mm", "--mmproj"), ("LLAMA_ARG_MMPROJ",), "use model.mmproj"),
    (("-md", "--model-draft", "--spec-draft-model", "-devd", "--device-draft", "--spec-draft-device",
      "-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf"),
     ("LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_SPEC_DRAFT_HF_REPO"), "use serve.spec_draft"),
)
OWNED_FLAGS: dict[str, str | None] = {flag: instead for flags, _, instead in _OWNED for flag in flags}
# llama-server options kimik3 does not render but that break what a deployment is (b11434 common/arg.cpp): the
# server prints and exits, or serves something kimik3's health wait, verify and exporter cannot reach or check
# (apply would wait out the health timeout, fail verify and revert). (flags, their variables, why).
_NOT_SERVING: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("-h", "--help", "--usage", "--version", "-cl", "--cache-list", "--completion-bash", "--list-devices"), (),
     "makes llama-server print and exit: it would never serve (the launch fails its health wait)"),
    (("--api-prefix",), ("LLAMA_ARG_API_PREFIX",),
     "moves every endpoint under a prefix: kimik3's health wait, verify and exporter call /health, /v1 and /metrics"),
    (("--embedding", "--embeddings", "--rerank", "--reranking"), ("LLAMA_ARG_EMBEDDINGS", "LLAMA_ARG_RERANKING"),
     "restricts the server to embeddings/reranking: a Kimi-K3 deployment serves chat (verify would fail)"),
    (("--ssl-key-file", "--ssl-cert-file"), ("LLAMA_ARG_SSL_KEY_FILE", "LLAMA_ARG_SSL_CERT_FILE"),
     "serves https: kimik3's health wait, verify and exporter speak http to it; terminate TLS in front of it"),
)
NOT_SERVING_FLAGS: dict[str, str] = {flag: why for flags, _, why in _NOT_SERVING for flag in flags}
NOT_SERVING_ENV: dict[str, str] = {env: why for _, envs, why in _NOT_SERVING for env in envs}
OWNED_ENV: dict[str, str | None] = {env: instead for _, envs, instead in _OWNED for env in envs}
# The container's GPUs are the profile's `gpus` (Docker's device request): these would select or renumber them
# behind it (the nvidia runtime reads NVIDIA_VISIBLE_DEVICES; CUDA renumbers what CUDA_VISIBLE_DEVICES lists).
GPU_SELECTION_ENV = frozenset({"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one field: an error refuses the profile, a warning is printed."""

    path: FieldPath
    message: str
    severity: Literal["error", "warning"] = "error"


def _error(path: FieldPath, message: str) -> Finding:
    return Finding(path, message, "error")


def _warning(path: FieldPath, message: str) -> Finding:
    return Finding(path, message, "warning")


def _vision(p: Profile) -> Iterator[Finding]:
    if p.model.mmproj is not None and p.build.source == "mainline":
        # rule: mmproj-fork-only
        # Seed 000: vision lives only in the fork; mainline errors on --mmproj or silently ignores it.
        yield _error(("model", "mmproj"), "mainline has no vision (MoonViT-3d is only in the fork): "
                     "drop mmproj or use build.source: fork")


def _quant(p: Profile) -> Iterator[Finding]:
    quant, info = p.model.quant, p.quant_info
    spelled = [name for name in catalog.CATALOG if name.lower() == quant.lower() and name != quant]
    if spelled:
        # rule: quant-name-case
        # The Hub's folder names are case-sensitive: 'ud-q2_k_xl' is not found there (exit 6 after the hub round trip).
        yield _error(("model", "quant"), f"{quant} is not a folder of the repo (names are case-sensitive): did you mean "
                     f"'{spelled[0]}'?")
        return
    if info is not None and info.refused:
        # rule: tq2-refused
        # Seed 000: UD-TQ2_0 produces corrupted logits on these GPUs.
        yield _error(("model", "quant"), f"{quant} is refused: {info.refused}")
        return
    if info is not None and info.vetted:
        return
    if catalog.is_iq_or_tq(quant) and p.gate.quant is None:
        # rule: unvetted-iq-tq
        # Seed 000: any new IQ/TQ quant must pass the gate before it is served (a broken sm_120 kernel scores KLD >> 1).
        yield _error(("model", "quant"), f"{quant} is an IQ/TQ quant not vetted on this hardware: "
                     "it must pass the quant gate first (configure gate.quant)")
    elif p.gate.quant is None:
        # rule: unvetted-quant
        # Seed 000: other quants are mechanically supported but unvetted.
        yield _warning(("model", "quant"), f"{quant} is not vetted on this hardware; consider gate.quant")


def _draft_gpu_index(p: Profile, gpu_count: int) -> int | None:
    """The position of the draft's GPU among `gpu_count` (auto = the last one), or None without a draft."""
    draft = p.serve.spec_draft
    if draft is None:
        return None
    return gpu_count - 1 if draft.device == "auto" else int(draft.device.removeprefix("CUDA"))


def _fit_target(p: Profile) -> Iterator[Finding]:
    serve, where = p.serve, ("serve", "fit_target")
    margins = serve.fit_target if isinstance(serve.fit_target, list) else None
    if margins is not None and p.gpus == "none":
        # rule: fit-target-list
        # A per-GPU margin with no GPU: nothing to index it by (the CPU build has no --fit-target).
        yield _error(where, "a per-GPU list makes no sense with gpus: none")
    elif margins is not None and isinstance(p.gpus, list) and len(margins) != len(p.gpus):
        # rule: fit-target-list
        # llama.cpp indexes --fit-target like the device list; a short list silently leaves the rest at 1024 MiB.
        yield _error(where, f"has {len(margins)} entries but gpus lists {len(p.gpus)}: write one per GPU, in order")
    if serve.manual_split:
        if serve.fit_target is not None:
            # rule: fit-target-manual-split
            # Seed 000: N_CPU_MOE switches to -ngl 999 --n-cpu-moe N; --fit (and its margin) is off.
            yield _warning(where, "is ignored: n_cpu_moe is set, so the split is manual (no --fit)")
        return
    if p.serve.spec_draft is not None and margins is None:
        # rule: spec-draft-fit-list
        # Seed 000: the draft needs ~9 GB free on its GPU plus room for snapshots: use a per-device list.
        yield _warning(where, "with spec_draft, give the draft's GPU more room (~9 GB + snapshots): write one per GPU")
    if p.gpus != "none":
        yield from fit_margin_findings(p, p.quant_mode)


def fit_margin_findings(p: Profile, mode: catalog.QuantMode) -> Iterator[Finding]:
    """serve.fit_target against the quant's measured margin in `mode` (the catalog's mode here; a planner
    that derived the mode from the host's GPUs may call it with that one). Omitted = the quant's default."""
    serve, where = p.serve, ("serve", "fit_target")
    if mode != "all-vram" or serve.fit_target is None or serve.manual_split:
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
            yield _error(at, f"{mib} MiB is too small for {p.model.quant} all-VRAM: needs >= {margin.minimum} "
                         f"(the CUDA scratch pool OOMs on the first request after the load){unmeasured}. Write "
                         f"{margin.default}{' here' if margins is not None else ''} (or leave serve.fit_target out: "
                         f"its default follows the quant); {margin.source}{_measured_elsewhere(p.model.quant, mib)}")
        elif margin.spills_at is not None and mib >= margin.spills_at and i != draft_index:
            # rule: fit-target-spill
            # Seed 000 step 2: on REAP770 a 6144 margin silently spills 2-3 expert layers to the CPU, -40 %.
            yield _warning(at, f"{mib} MiB on {p.model.quant} spills 2-3 expert layers to the CPU (-40 % measured "
                           f"at {margin.spills_at}); {margin.default} is the measured setting")


def _measured_elsewhere(quant: str, mib: int) -> str:
    """Where a too-small margin comes from when another quant was measured at it (REAP770's 4096, seed 000
    step 2, which kimik3 once shipped for UD-IQ2_XXS too: docs/operations.md "Upgrading kimik3")."""
    others = [q for q in catalog.CATALOG.values()
              if q.name != quant and q.all_vram_fit is not None and q.all_vram_fit.default == mib]
    return "".join(f"; {mib} is {q.name}'s measured margin ({q.all_vram_fit.source}), not {quant}'s"
                   for q in others if q.all_vram_fit is not None)


def _ubatch(p: Profile) -> Iterator[Finding]:
    ubatch, where = p.serve.ubatch, ("serve", "ubatch")
    if ubatch is None:
        return
    if p.quant_mode == "hybrid" and ubatch != HYBRID_UBATCH:
        # rule: hybrid-ubatch
        # Seed 000: hybrid prefill copies every CPU expert to GPU0 per micro-batch; 4096 halves TTFT.
        yield _warning(where, f"{ubatch} on a hybrid quant: 4096 copies the CPU experts once per prompt and halves TTFT")
    elif p.quant_mode == "all-vram" and ubatch > ALL_VRAM_UBATCH:
        # rule: allvram-ubatch
        # Seed 000: the fix for a CUDA OOM on the first request after an all-VRAM load is -ub 2048.
        yield _warning(where, f"{ubatch} on an all-VRAM quant risks a CUDA OOM on the first request; use 2048")


def _batch(p: Profile) -> Iterator[Finding]:
    batch, ubatch = p.effective_batch, p.effective_ubatch
    if batch < ubatch:
        # rule: batch-below-ubatch
        # llama.cpp lowers ubatch to batch without a word, undoing seed 000 step 5's BATCH/UBATCH setting.
        told = "" if p.serve.ubatch is not None else f" (the default for {p.quant_mode} {p.model.quant})"
        yield _error(("serve", "batch"), f"{batch} is below serve.ubatch {ubatch}{told}: llama.cpp would lower "
                     f"ubatch to {batch} silently; set batch >= ubatch (seed 000: BATCH = UBATCH)")


# Tokens a slot needs for the chat template, kimik3's verify prompts and their replies on random weights; real
# weights think first and get more (verify asks up to 1024, then 4096), which any sane profile has.
MIN_SLOT_CONTEXT = 512


def _ctx_size(p: Profile) -> Iterator[Finding]:
    if p.serve.ctx_size > catalog.CONTEXT_LENGTH:
        # rule: ctx-size-limit
        # Seed 001: K3 supports 1,048,576 tokens; llama.cpp only warns above the trained context length.
        yield _error(("serve", "ctx_size"), f"{p.serve.ctx_size} is above Kimi-K3's trained context of "
                     f"{catalog.CONTEXT_LENGTH:,} tokens (seed 001: the model specification); llama.cpp would "
                     "only warn. Seed 001 suggests starting with 131072")
    per_slot = p.serve.ctx_size // p.serve.parallel
    if per_slot < MIN_SLOT_CONTEXT:
        # rule: slot-context-floor
        # llama-server gives each of `parallel` slots ctx_size/parallel tokens (kimik3 sets --parallel, so the
        # KV cache is not unified): below this a chat template plus kimik3's verify reply do not fit, and at a
        # few tokens the server aborts at warm-up, both only after the whole load.
        yield _error(("serve", "ctx_size"), f"{p.serve.ctx_size} over serve.parallel {p.serve.parallel} slots is "
                     f"{per_slot} tokens a slot, below {MIN_SLOT_CONTEXT}: too small for a chat request and its reply "
                     "(each slot gets ctx_size/parallel); raise ctx_size or lower parallel")


def _spec_draft(p: Profile) -> Iterator[Finding]:
    draft = p.serve.spec_draft
    if draft is None:
        return
    if draft.type == "draft-mtp":
        # rule: no-mtp-head
        # Seed 000 "Key facts": no MTP head in the checkpoint, so there is nothing for draft-mtp to draft with.
        yield _error(("serve", "spec_draft", "type"), "draft-mtp needs an MTP head and the Kimi-K3 checkpoint has "
                     "none (seed 000): use draft-dspark (the RadixArk DSpark draft) or draft-simple")
    if not p.build.patches:
        # rule: spec-draft-rollback
        # Seed 000: the draft pays only with the rollback patch in the image; with no patch at all there is
        # nothing to judge, so `validate` refuses it. Which patch is the rollback is judged by content when the
        # plan reads the files (planning/patch_roles.py).
        yield _error(("build", "patches"), "is empty, but serve.spec_draft needs the recurrent-state rollback patch "
                     "(seed 000: kimi-k3-rs-rollback.patch; without it each draft step's state checkpoint costs more "
                     "than the drafts save): list it here")
    if p.serve.parallel >= 4:
        # rule: spec-draft-concurrency
        # Seed 000: a loss at c4 (verify batches multiply MoE expert reads).
        yield _warning(("serve", "parallel"), f"speculative decoding loses at >= 4 concurrent requests "
                       f"(parallel is {p.serve.parallel}; the interactive profile uses 2)")
    if draft.device == "auto":
        return
    if p.gpus == "none":
        # rule: spec-draft-device
        # Seed 000: the draft sits on the GPU holding output.weight; with no GPU there is no such device.
        yield _error(("serve", "spec_draft", "device"), "a CUDA draft device needs GPUs: use auto with gpus: none")
    elif isinstance(p.gpus, list) and int(draft.device.removeprefix("CUDA")) != len(p.gpus) - 1:
        # rule: spec-draft-device
        # Seed 000: the draft must sit on the GPU holding output.weight; anywhere else aborts in graph reservation.
        yield _error(("serve", "spec_draft", "device"), f"must be CUDA{len(p.gpus) - 1} (or auto): the last of the "
                     f"{len(p.gpus)} GPUs holds the target's output.weight; elsewhere llama.cpp aborts")


def _spec_types_written(p: Profile) -> Iterator[tuple[FieldPath, set[str]]]:
    """--spec-type values written past serve.spec_draft: in extra_args (the way to pick a draft-less method
    such as ngram-mod) or as LLAMA_ARG_SPEC_TYPE in serve.env."""
    args = p.serve.extra_args
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag.replace("_", "-") == "--spec-type":
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            yield ("serve", "extra_args", i), {t.strip() for t in value.split(",")}
    if "LLAMA_ARG_SPEC_TYPE" in p.serve.env:
        value = p.serve.env["LLAMA_ARG_SPEC_TYPE"]
        yield ("serve", "env", "LLAMA_ARG_SPEC_TYPE"), {t.strip() for t in value.split(",")}


def _spec_type_args(p: Profile) -> Iterator[Finding]:
    for at, types in _spec_types_written(p):
        if "draft-mtp" in types:
            # rule: no-mtp-head
            # Seed 000 "Key facts": no MTP head in the checkpoint.
            yield _error(at, "--spec-type draft-mtp: the Kimi-K3 checkpoint has no MTP head (seed 000); use "
                         "serve.spec_draft with the DSpark draft")
        if "ngram-mod" in types:
            # rule: ngram-mod-neutral
            # Seed 000 "Key facts": ngram-mod is ~ neutral on this model; the draft (DSpark) is what pays.
            yield _warning(at, "--spec-type ngram-mod measured ~ neutral on Kimi-K3 (seed 000); the DSpark draft "
                           "(serve.spec_draft) is what pays, at low concurrency")


def _endpoint(p: Profile) -> Iterator[Finding]:
    endpoint = p.model.endpoint
    if endpoint is not None and not token_may_go_to(endpoint):
        # rule: hub-token-https
        # A token over plain http to another host travels in clear text: the hub adapters withhold it.
        yield _warning(("model", "endpoint"), f"plain http to a non-loopback host: {TOKEN_POLICY}, so this hub "
                       "gets no token (a private or gated repo will be refused); use https")


def _variant(p: Profile) -> Iterator[Finding]:
    if p.build.variant == "cpu" and p.gpus != "none":
        # rule: variant-gpus
        # design.md: the CPU variant is built without CUDA, so it cannot use a GPU.
        yield _error(("build", "variant"), "cpu images have no CUDA kernels: set gpus: none")
    elif p.build.variant == "cuda" and p.gpus == "none":
        # rule: variant-gpus
        # design.md: gpus: none exists for the CPU variant only.
        yield _error(("gpus",), "none needs build.variant: cpu")


def _builtin_patches(p: Profile) -> Iterator[Finding]:
    for i, name in enumerate(p.build.builtin_patches or ()):
        patch = builtin_patch(name)
        if patch is None:
            # rule: builtin-patch-names
            # A name kimik3 does not carry would build the image without what the profile asks for.
            known = ", ".join(b.name for b in BUILTIN_PATCHES)
            yield _error(("build", "builtin_patches", i), f"{name!r} is not one of kimik3's patches ({known})")
        elif p.build.variant not in patch.variants:
            # rule: builtin-patch-names
            # The patch changes code the other variant does not compile (the CPU image has no CUDA backend).
            yield _error(("build", "builtin_patches", i), f"{name!r} applies to {'/'.join(patch.variants)} builds "
                         f"only, not build.variant {p.build.variant}")
    chosen = p.build.builtin_patches
    if chosen:  # [] turns every patch off on purpose: nothing to warn about
        # rule: builtin-patches-whole-set
        # The list is the whole set, so naming one patch alone silently drops the other default ones for the
        # variant (a CUDA profile asking for parallel-host-read would lose parallel-pin's 2x faster hybrid load).
        left_out = [b.name for b in builtin_patches_for(p.build.variant, None) if b.name not in chosen]
        if left_out:
            them = "it" if len(left_out) == 1 else "them"
            yield _warning(("build", "builtin_patches"), f"leaves out {', '.join(left_out)}, built by default for "
                           f"build.variant {p.build.variant}: the list is the whole set; add {them} to keep {them}")


def _secrets(p: Profile) -> Iterator[Finding]:
    # rule: no-secrets
    # PROFILE.md: profiles live in a GitOps repo; tokens and API keys come from files or the environment.
    for key, value in p.serve.env.items():
        upper = key.upper()
        if upper in _SECRET_ENV or upper.endswith(_SECRET_SUFFIXES):
            # rule: no-secrets
            # A variable named like a secret holds one: env values show in `docker inspect`.
            yield _error(("serve", "env", key), f"{key} names a secret; {_NO_SECRETS}")
        elif _HF_TOKEN.search(value):
            # rule: no-secrets
            # A token under an innocent name is still a token.
            yield _error(("serve", "env", key), f"the value looks like a Hugging Face token; {_NO_SECRETS}")
        elif upper in OWNED_ENV:
            # rule: owned-env
            # reference/llama-cpp.md §1.0: llama-server reads it as the option kimik3 renders; where kimik3 renders
            # that option only sometimes (or never: -hf), the variable is the one that counts.
            instead = OWNED_ENV[upper]
            yield _error(("serve", "env", key), f"{key} sets a llama-server option kimik3 renders itself: "
                         + (instead if instead is not None else _FIXED.removeprefix("is ")))
        elif key in NOT_SERVING_ENV:
            # rule: serving-contract-flags
            # llama-server reads the variable as the option (reference/llama-cpp.md §1.0).
            yield _error(("serve", "env", key), f"{key} {NOT_SERVING_ENV[key]}")
        elif upper in GPU_SELECTION_ENV:
            # rule: owned-env
            # The container's GPUs are `gpus` (Docker's device request); this would select or renumber them behind it.
            yield _error(("serve", "env", key), f"{key} selects GPUs behind the profile: use gpus (the container gets "
                         "exactly those)")
        elif upper.startswith("LLAMA_ARG_"):
            # rule: llama-arg-env
            # llama-cpp.md §1.0: env sets llama-server options behind the CLI (list options even append).
            yield _warning(("serve", "env", key), "sets a llama-server option behind kimik3's argv; prefer the profile field")
    for i, arg in enumerate(p.serve.extra_args):
        if _HF_TOKEN.search(arg):
            # rule: no-secrets
            # argv shows in `docker inspect` and `ps`.
            yield _error(("serve", "extra_args", i), f"looks like a Hugging Face token; {_NO_SECRETS}")
    for where, url in _urls(p):
        if urlsplit(url).password is not None:
            # rule: no-secrets
            # A password in a URL is a secret in the profile, and errors and plans print the URL they could not reach.
            yield _error(where, f"the URL holds a password (user:password@); {_NEVER_SECRETS}: a hub mirror takes "
                         "HF_TOKEN from the environment, a Docker host its ssh keys or tls_dir")
    key_file = p.serve.api_key_file
    if key_file is not None and _looks_like_a_key(key_file):
        # rule: no-secrets
        # serve.api_key_file is the path of a file holding the key; a key written here is in the GitOps repo (and
        # plan's "not found" would print it).
        yield _error(("serve", "api_key_file"), f"looks like an API key, not a path; {_NEVER_SECRETS}: write the "
                     "key into a file (chmod 600) and give its path here")


def _urls(p: Profile) -> Iterator[tuple[FieldPath, str]]:
    """The URLs a profile holds, where they are."""
    if p.model.endpoint is not None:
        yield ("model", "endpoint"), p.model.endpoint
    if p.build.archive is not None and "://" in p.build.archive:
        yield ("build", "archive"), p.build.archive
    for i, worker in enumerate(p.workers):
        yield ("rpc", "workers", i, "docker"), worker.docker


_KEY_PREFIX = re.compile(r"(sk|pk|rk|api|key)[-_][A-Za-z0-9_-]{16,}")


def _looks_like_a_key(value: str) -> bool:
    """A token-shaped string rather than a file path: an hf_ token, an sk-... key, or 24+ characters of letters
    and digits with no path separator or file suffix."""
    if _HF_TOKEN.search(value) or _KEY_PREFIX.fullmatch(value):
        return True
    return ("/" not in value and "." not in value and len(value) >= 24 and any(c.isdigit() for c in value)
            and any(c.isalpha() for c in value))


def _local_paths(p: Profile) -> Iterator[tuple[FieldPath, str]]:
    """The host paths a profile names, where they are (URLs and hub files excepted)."""
    if p.model.cache_dir is not None:
        yield ("model", "cache_dir"), p.model.cache_dir
    if p.build.archive is not None and "://" not in p.build.archive:
        yield ("build", "archive"), p.build.archive
    for i, patch in enumerate(p.build.patches):
        yield ("build", "patches", i), patch
    if p.serve.api_key_file is not None:
        yield ("serve", "api_key_file"), p.serve.api_key_file
    if p.serve.spec_draft is not None and p.serve.spec_draft.revision is None:
        yield ("serve", "spec_draft", "model"), p.serve.spec_draft.model
    for i, worker in enumerate(p.workers):
        for name in ("tls_dir", "cache_dir"):
            if (value := getattr(worker, name)) is not None:
                yield ("rpc", "workers", i, name), value


_SHELL_EXPANSION = re.compile(r"^~|\$(\{?[A-Za-z_][A-Za-z0-9_]*\}?)")


def _paths_literal(p: Profile) -> Iterator[Finding]:
    for where, path in _local_paths(p):
        if (found := _SHELL_EXPANSION.search(path)) is not None:
            # rule: paths-literal
            # No shell reads a profile: `~/hub` became a folder named '~' beside the profile (a cache_dir created
            # there, the model downloaded into it), `$HOME/key` a path with a '$' in it that does not exist.
            yield _error(where, f"{found.group(0)!r} is not expanded: no shell reads a profile; write an absolute "
                         "path or one relative to the profile's folder")


def _joined_short_flag(flag: str) -> str | None:
    """The owned short flag `flag` glues a number to ('-ub512' -> '-ub'), or None."""
    if flag.startswith("--") or flag in OWNED_FLAGS:
        return None
    match = re.fullmatch(r"(-[a-z]+?)(-?[0-9][0-9.,]*)", flag)
    return match.group(1) if match and match.group(1) in OWNED_FLAGS else None


def _extra_args(p: Profile) -> Iterator[Finding]:
    for i, arg in enumerate(p.serve.extra_args):
        if not arg.strip():
            # rule: extra-args-argv
            # An empty item is an empty argv word: llama-server stops at it ("invalid argument"), the launch fails.
            yield _error(("serve", "extra_args", i), "is empty (or blank): each item is one argv word passed as is; "
                         "drop it")
            continue
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and flag.split() != [flag]:
            # rule: extra-args-argv
            # Each item is one argv word, never split by a shell: '--ubatch-size 512' is one unknown flag to
            # llama-server (the launch fails), and a flag hidden behind a space would pass the owned-flag check.
            words = flag.split()
            yield _error(("serve", "extra_args", i), f"{arg!r} is one argv item with a space in its flag: each item is "
                         "passed as is, never through a shell; write one item per word"
                         + (f", e.g. {words!r}" if words else ""))
            flag = words[0] if words else flag
        if flag.startswith("--"):
            flag = flag.replace("_", "-")  # llama-cpp.md §1.0: llama-server reads --foo_bar as --foo-bar
        joined = _joined_short_flag(flag)
        if joined is not None:
            # rule: extra-args-argv
            # llama-server takes a flag's value as the next argv item: '-ub512' is an unknown flag (the launch fails),
            # and it names an owned flag the check below would not see.
            yield _error(("serve", "extra_args", i), f"{arg!r} joins a value to {joined}: llama-server reads the value "
                         f"as its own item ({joined} {flag[len(joined):]}), and {joined} is set by kimik3: "
                         f"{OWNED_FLAGS[joined] or _FIXED.removeprefix('is ')}")
            continue
        if flag in NOT_SERVING_FLAGS:
            # rule: serving-contract-flags
            # Passed through, it would launch a server that never answers kimik3's checks: refuse it up front.
            yield _error(("serve", "extra_args", i), f"{flag} {NOT_SERVING_FLAGS[flag]}")
            continue
        if flag not in OWNED_FLAGS:
            continue
        instead = OWNED_FLAGS[flag]
        # rule: fixed-flags
        # Seed 000: kimik3 renders these itself; a second copy would fight it (last one wins).
        message = f"{flag} {_FIXED}" if instead is None else f"{flag} is set by kimik3: {instead}"
        yield _error(("serve", "extra_args", i), message)


def _split_mode(p: Profile) -> Iterator[Finding]:
    args = p.serve.extra_args
    for i, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if flag not in ("-sm", "--split-mode", "--split_mode"):
            continue
        value = value or (args[i + 1] if i + 1 < len(args) else "")
        if value in ("row", "tensor"):
            # rule: split-mode
            # reference/llama-cpp.md §1.3: kimi-k3 has no tensor split; CUDA dropped row split buffers.
            yield _error(("serve", "extra_args", i), f"-sm {value} fails to load kimi-k3 (tensor: not implemented for "
                         "the architecture; row: CUDA has no split buffers): keep the default layer split")


def _reap(p: Profile) -> Iterator[Finding]:
    if "REAP" in p.model.quant:
        # rule: reap770-code
        # Seed 000: REAP770's expert cut keeps KLD near the reference but costs code generation.
        yield _warning(("model", "quant"), f"{p.model.quant}: HumanEval 86.6 % / MBPP 85.5 % (vs 95.7 / 97.0 for "
                       "UD-IQ2_XXS): the expert cut damages code generation; not the default for coding use")


def _cache_ram(p: Profile) -> Iterator[Finding]:
    if p.serve.cache_ram == 0:
        # rule: cache-ram-zero
        # Seed 000: CACHE_RAM=0 only when benchmarking (it turns the host-RAM prompt cache off).
        yield _warning(("serve", "cache_ram"), "0 turns the prompt cache off: only for benchmarking")


def _binds(p: Profile) -> Iterator[tuple[FieldPath, str]]:
    """Every address a listener of this host binds, where the profile says it (rpc workers bind on their hosts and
    have their own rule, rpc-bind-private)."""
    yield ("serve", "host"), p.serve.host
    if p.metrics is not None:
        yield ("metrics", "bind"), p.metrics.bind


def _host(p: Profile) -> Iterator[Finding]:
    for where, host in _binds(p):
        if host not in ("loopback", "tailscale") and ipaddress.ip_address(host).is_unspecified:
            # rule: bind-all-interfaces
            # Seed 000: bind the tailnet address or loopback; never every interface unless written on purpose. The
            # exporter's port tells any network which quant, GPUs and load this host has.
            yield _warning(where, f"{host} binds every interface of the host, not just loopback/the tailnet")


def _archive(p: Profile) -> Iterator[Finding]:
    archive = p.build.archive
    if archive and archive.startswith(("http://", "https://")) and p.build.archive_sha256 is None:
        # rule: archive-pinned
        # Seed 000: a pinned build, not a moving one; a URL's content can change under the same name.
        yield _warning(("build", "archive"), "a downloaded archive without build.archive_sha256 is not pinned")


LOAD_MODES = ("none", "dio")
_MAPPED_MODES = ("auto", "mmap", "mlock", "mmap+mlock")


def _load_mode(p: Profile) -> Iterator[Finding]:
    mode = p.serve.load_mode
    if mode in _MAPPED_MODES:
        # rule: load-mode
        # Seed 000: --load-mode none is required, not optional: a mapped model measured as a 20+-minute
        # single-request stall (pages faulted in by the first request, not at load).
        yield _error(("serve", "load_mode"), f"{mode!r} maps the model: seed 000 measured a 20+-minute "
                     "single-request stall without --load-mode none; use 'none' (default) or 'dio'")
    elif mode not in LOAD_MODES:
        # rule: load-mode
        # llama.cpp's other modes are the mapped ones above; anything else it would refuse at launch.
        yield _error(("serve", "load_mode"), f"must be 'none' or 'dio', not {mode!r}")


def _systemd(p: Profile) -> Iterator[Finding]:
    if p.systemd is not None and p.unit_name in p.systemd.conflicts:
        # rule: unit-conflicts-self
        # Conflicts= with itself: starting the unit would stop it.
        yield _error(("systemd", "conflicts"), f"lists the profile's own unit {p.unit_name!r}")


# tools/rpc/README.md of the pinned llama.cpp, quoted in every refusal of an RPC address.
RPC_WARNING = ("upstream: \"the RPC backend is fragile and insecure. Never run the RPC server on an open network or "
               "in a sensitive environment!\" (no authentication, no encryption)")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")  # Tailscale's tailnet addresses: private to the tailnet


def _private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, RFC 1918 / ULA / link-local, or a tailnet address: reachable only on a network the operator runs."""
    return address.is_loopback or address.is_private or address in _CGNAT if address.version == 4 else (
        address.is_loopback or address.is_private or address.is_link_local)


def _rpc_args(p: Profile) -> Iterator[Finding]:
    for i, arg in enumerate(p.serve.extra_args):
        if arg.split("=", 1)[0] == "--rpc":
            # rule: rpc-extra-args
            # An --rpc endpoint nobody checked or converged: kimik3 could not keep it off open networks.
            yield _error(("serve", "extra_args", i), f"--rpc is set by kimik3 from the rpc section, which checks "
                         f"every worker's address and converges its rpc-server; {RPC_WARNING}")


def _rpc(p: Profile) -> Iterator[Finding]:
    seen: dict[tuple[str, int], str] = {}
    names: set[str] = set()
    for i, worker in enumerate(p.workers):
        where = ("rpc", "workers", i)
        address = ipaddress.ip_address(worker.bind)
        if address.is_unspecified:
            # rule: rpc-bind-private
            # Issue 18 / upstream tools/rpc: rpc-server has no authentication; every interface means every network.
            yield _error((*where, "bind"), f"{worker.bind} binds every interface of the worker: name one loopback or "
                         f"private address; {RPC_WARNING}")
        elif not _private(address):
            # rule: rpc-bind-private
            # A public address puts an unauthenticated tensor server on the internet.
            yield _error((*where, "bind"), f"{worker.bind} is a public address: bind a loopback or private one "
                         f"(10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7); {RPC_WARNING}")
        if address.version == 6:
            # rule: rpc-worker-shape
            # rpc-server (b11434 transport.cpp) opens an AF_INET socket and parses the host with inet_addr.
            yield _error((*where, "bind"), f"{worker.bind}: rpc-server listens on IPv4 only: bind an IPv4 address")
        key = (worker.bind, worker.port)
        if key in seen:
            # rule: rpc-worker-shape
            # Two workers on one endpoint would be one rpc-server counted twice by --rpc and the gate.
            yield _error((*where, "port"), f"{worker.bind}:{worker.port} is also the endpoint of worker {seen[key]}")
        seen[key] = worker.name
        if worker.name in names:
            # rule: rpc-worker-shape
            # The name is the worker's container name on its host and its key in plans.
            yield _error((*where, "name"), f"worker {worker.name!r} is listed twice")
        names.add(worker.name)
        if worker.docker.startswith("tcp://") and worker.tls_dir is None:
            # rule: rpc-docker-tls
            # A plain tcp:// Docker socket is root on that host for anyone who can reach it.
            yield _error((*where, "tls_dir"), "a tcp:// Docker needs TLS: give tls_dir (ca.pem, cert.pem, key.pem), "
                         "or use ssh://user@host")
        if worker.tls_dir is not None and not worker.docker.startswith("tcp://"):
            # rule: rpc-docker-tls
            # ssh brings its own keys: a TLS folder there is a leftover, said so rather than ignored silently.
            yield _warning((*where, "tls_dir"), "is only used with a tcp:// Docker URL")
        if worker.devices and worker.gpus == "none" and any(d.startswith("CUDA") for d in worker.devices):
            # rule: rpc-worker-shape
            # rpc-server would find no CUDA device in a container without GPUs and exit ("No devices found").
            yield _error((*where, "devices"), "names a CUDA device but the worker's gpus is none")


def _metrics(p: Profile) -> Iterator[Finding]:
    metrics = p.metrics
    if metrics is None:
        return
    # rule: metrics-ports-distinct
    # One host port, one listener: the exporter, the proxy (serve.port) and llama-server behind it each need theirs.
    if metrics.port == p.serve.port:
        yield _error(("metrics", "port"), f"is serve.port ({p.serve.port}): the exporter needs a port of its own")
    if metrics.server_port is not None and not metrics.proxy:
        # rule: metrics-ports-distinct
        # Without the proxy llama-server keeps serve.port: a server_port would be a port nothing binds.
        yield _error(("metrics", "server_port"), "only with proxy: true (llama-server keeps serve.port otherwise)")
    elif metrics.server_port in (p.serve.port, metrics.port):
        # rule: metrics-ports-distinct
        # llama-server behind the proxy needs a port neither the proxy nor the exporter holds.
        yield _error(("metrics", "server_port"), f"{metrics.server_port} is already serve.port or metrics.port")


RULES: tuple[Callable[[Profile], Iterator[Finding]], ...] = (
    _vision, _quant, _endpoint, _fit_target, _ubatch, _batch, _ctx_size, _spec_draft, _spec_type_args, _variant,
    _secrets, _extra_args, _host, _archive, _systemd, _split_mode, _reap, _cache_ram, _metrics,
    _load_mode, _rpc, _rpc_args, _builtin_patches, _paths_literal,
)


def check_rules(profile: Profile) -> tuple[Finding, ...]:
    """Every cross-field finding of a validated profile, errors and warnings, in rule order."""
    return tuple(finding for rule in RULES for finding in rule(profile))
