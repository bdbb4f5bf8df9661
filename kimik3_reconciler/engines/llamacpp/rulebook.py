"""llama.cpp's rules in the rulebook (model/rulebook.py gathers them through the registry's `rulebook`): seed
000's recipe (batch sizes, fit, context, the quant catalog, drafts, the build, RPC workers, a local GGUF) and
llama-server's own behaviour that kimik3 guards against. `kimik3 explain` prints them."""

from __future__ import annotations

from kimik3_reconciler.model.rulebook_entry import OWN, Rule, profile_rules

_DEFAULTS = ("kimik3_reconciler.model.profile",)
_SIZING = ("kimik3_reconciler.engines.llamacpp.sizing",)  # the default batch sizes
_KEY_SPEC = "seed 000 Key facts (Speculative decoding ...)"
_LAUNCH = ("kimik3_reconciler.planning.launch",)
_LLAMACPP = ("kimik3_reconciler.engines.llamacpp.launch",)  # the engine renders the server's argv
_LOCAL = ("kimik3_reconciler.observe.local_model",)
_REAP_FIT = "seed 000 step 2 (REAP770: --fit-target 4096; a 6144 margin silently spills 2-3 expert layers, -40 %)"
_REAP_LOCAL = 'seed 000 step 2 (UD-Q2_K_XL-REAP770: one 697 GiB file, made locally; REFERENCE.md "REAP expert slicing")'
_RPC_SEED = (
    "not in the seeds: issue 18 (Beyond one host) and the pinned llama.cpp's tools/rpc/README.md: \"Never run the RPC server "
    'on an open network or in a sensitive environment!"'
)
_STEP5_BATCH = "seed 000 step 5 (BATCH/UBATCH: 4096 for hybrid, 2048 for all-VRAM)"
_STEP5_FIT = "seed 000 step 5 (all-VRAM needs --fit-target 6144, else the CUDA scratch pool OOMs on the first request)"

_OWN_RULES = (
    "serving",
    "quants",
    "build",
    "workers",
    "server_args",
    "drafts",
    "fields",
)  # engines/llamacpp/rules/: llama.cpp's profile only


def _rules(*concerns: str) -> tuple[str, ...]:
    """The rule modules (one per concern) whose guards apply a rule: llama.cpp's own, or model/profile_rules/."""
    return tuple(
        f"kimik3_reconciler.engines.llamacpp.rules.{concern}" if concern in _OWN_RULES else profile_rules(concern)[0]
        for concern in concerns
    )


RULEBOOK: tuple[Rule, ...] = (
    Rule(
        "hybrid-ubatch",
        "warn",
        "hybrid quants use ubatch 4096 (the default)",
        "prefill is bound by copying every CPU expert to GPU0 once per micro-batch: 4096 halves TTFT",
        _rules("serving"),
        ("cases/profile/hybrid_ubatch_warns.yaml",),
        seed=f"{_STEP5_BATCH}; Key facts (Zero CPU experts is the lever: prefill bound by the expert copy)",
    ),
    Rule(
        "allvram-ubatch",
        "warn",
        "all-VRAM quants use ubatch 2048 (the default)",
        "the CUDA scratch pool OOMs on the first request after a full load otherwise",
        _rules("serving"),
        ("cases/profile/allvram_ubatch_warns.yaml",),
        seed=f"{_STEP5_BATCH}; When startup crashes (CUDA OOM on the first request: use -ub 2048)",
    ),
    Rule(
        "batch-below-ubatch",
        "refuse",
        "serve.batch >= serve.ubatch (effective values; batch defaults to the "
        "mode's UBATCH: 2048 all-VRAM, 4096 hybrid, never below ubatch)",
        "llama.cpp lowers ubatch to batch silently, undoing the ubatch rule",
        _rules("serving") + _SIZING,
        (
            "cases/profile/batch_below_ubatch.yaml",
            "cases/profile/batch_below_default_ubatch.yaml",
            "cases/profile/allvram_ubatch_only_batch_follows.yaml",
            "cases/plan/40-allvram-defaults-follow-quant.yaml",
        ),
        seed=_STEP5_BATCH,
    ),
    Rule(
        "allvram-fit-target",
        "refuse",
        "all-VRAM fit_target >= the quant's measured margin (catalog.fit_margin: "
        "6144 for UD-IQ2_XXS and for unmeasured quants, 4096 for UD-Q2_K_XL-REAP770)",
        "a smaller margin OOMs the CUDA scratch pool on the first request after a ~17-minute load",
        _rules("serving"),
        (
            "cases/profile/allvram_fit_target_small.yaml",
            "cases/profile/allvram_fit_target_list_small.yaml",
            "cases/profile/allvram_iq2xxs_fit_target_4096.yaml",
            "cases/profile/allvram_unmeasured_fit_target_4096.yaml",
            "cases/profile/reap770_fit_target_4096_ok.yaml",
        ),
        seed=f"{_STEP5_FIT}; {_REAP_FIT}; When startup crashes (raise --fit-target)",
    ),
    Rule(
        "fit-target-spill",
        "warn",
        "fit_target at or above a quant's measured spill margin (REAP770: 6144), the draft's GPU excepted",
        "measured to spill 2-3 expert layers to the CPU silently: -40 %",
        _rules("serving"),
        ("cases/profile/allvram_fit_target_6144_warns.yaml", "cases/profile/allvram_fit_target_6144_iq2xxs_ok.yaml"),
        seed=_REAP_FIT,
    ),
    Rule(
        "fit-target-list",
        "refuse",
        "a per-GPU fit_target list has one entry per listed GPU, in order, and needs GPUs (not gpus: none)",
        "llama.cpp indexes --fit-target like the device list: a short list silently leaves the other GPUs at its "
        "1024 MiB default (the CUDA scratch pool's OOM); with gpus: all the host gate counts the host's GPUs",
        _rules("serving") + ("kimik3_reconciler.engines.llamacpp.host_findings",),
        (
            "cases/profile/fit_target_list_length.yaml",
            "cases/profile/fit_target_list_gpus_none.yaml",
            "unit/planning/test_host_gate.py",
        ),
        seed=f"{_KEY_SPEC}: use a per-device --fit-target list; {_STEP5_FIT}",
    ),
    Rule(
        "fit-target-manual-split",
        "warn",
        "fit_target with n_cpu_moe is warned as ignored",
        "n_cpu_moe is a manual split (-ngl 999 --n-cpu-moe N): --fit, and so its margin, is off",
        _rules("serving"),
        ("cases/profile/fit_target_ignored_with_n_cpu_moe_warns.yaml",),
        seed="seed 000 step 5 (N_CPU_MOE=<N> switches to -ngl 999 --n-cpu-moe N instead of --fit)",
    ),
    Rule(
        "fit-target-default",
        "force",
        "an omitted fit_target follows the quant: its measured all-VRAM margin "
        "(UD-IQ2_XXS 6144, REAP770 4096, unmeasured all-VRAM quants 6144), 4096 hybrid",
        "the default must be the value the seed measured for that quant, not one number for all",
        _DEFAULTS,
        ("cases/plan/40-allvram-defaults-follow-quant.yaml", "cases/plan/41-reap770-default-fit-target.yaml"),
        seed=f"{_STEP5_FIT}; {_REAP_FIT}",
    ),
    Rule(
        "ctx-size-limit",
        "refuse",
        "each request's context, serve.ctx_size / serve.parallel, <= the trained context "
        "(1,048,576 for Kimi-K3; the GGUF header's context_length once read)",
        "llama-server gives each slot ctx_size/parallel tokens and only warns on a slot above the GGUF's "
        "context_length (reference/llama-cpp.md §1.1 -np, §1.3)",
        _rules("serving") + ("kimik3_reconciler.engines.llamacpp.memory_gate",),
        (
            "cases/profile/ctx_size_above_trained.yaml",
            "cases/profile/ctx_size_at_trained_ok.yaml",
            "cases/profile/ctx_size_per_slot_at_trained_ok.yaml",
            "unit/planning/test_context_per_slot.py",
        ),
        seed="seed 001 (K3 supports 1,048,576 tokens: the model specification; start with 131072); seed 000 title "
        "(1M context)",
    ),
    Rule(
        "ctx-size-default",
        "force",
        "an omitted serve.ctx_size is 131,072 tokens per request x serve.parallel "
        "(each slot capped at the trained context), and the plan says what each request gets",
        "seed 001's --max-model-len 131072 is per request; llama-server splits -c over the slots, so the old default "
        "(131072 in all) gave each of 8 requests 16,384 tokens",
        _DEFAULTS + _rules("serving"),
        (
            "unit/planning/test_context_per_slot.py",
            "cases/profile/ctx_size_default_overflows_int32.yaml",
            "cases/plan/121-seed-host-context-per-request.yaml",
        ),
        seed="seed 001 (start with 131072: vLLM's --max-model-len, a limit per request)",
    ),
    Rule(
        "kv-cache-fits",
        "refuse",
        "the KV cache of the whole -c (from the GGUF's attention shape) fits the GPUs with "
        "the dense weights and compute buffers, whatever --fit moves to the CPU; the refusal says the context that fits",
        "--fit moves only experts, and kimik3's explicit -c forbids --fit from shrinking the context: a KV cache "
        "that does not fit fails the load after the whole read",
        ("kimik3_reconciler.engines.llamacpp.memory_gate",),
        ("unit/planning/test_context_per_slot.py",),
        seed=f"{OWN}llama.cpp's --fit (reference/llama-cpp.md §1.2.1) and the MLA K-only cache (§4.5)",
    ),
    Rule(
        "slot-context-floor",
        "refuse",
        "serve.ctx_size / serve.parallel >= 512 tokens a slot",
        "kimik3 sets --parallel, so llama-server splits ctx_size evenly over the slots; a smaller slot cannot hold "
        "a chat request and its reply (kimik3's verify fails after the whole load) and at a few tokens the "
        "server aborts at warm-up (seen with ctx_size 1, parallel 2: exit 139)",
        _rules("serving"),
        ("cases/profile/ctx_size_per_slot_too_small.yaml", "cases/profile/ctx_size_per_slot_floor_ok.yaml"),
        seed=f"{OWN}llama-server's per-slot context (n_ctx_seq = n_ctx / n_parallel without --kv-unified)",
    ),
    Rule(
        "fixed-flags",
        "force",
        "--numa distribute, --cache-type-k/v f16, --threads/--threads-batch = physical "
        "cores, --load-mode (serve.load_mode: none or dio), --metrics; extra_args cannot override them, and "
        "`kimik3 tune` never launches a candidate with other threads or a mapped load mode",
        "Kimi-K3/hardware requirements, not tuning: leaving --numa or --load-mode out measured as a 20+-minute "
        "single-request stall",
        _LLAMACPP + _rules("server_args") + ("kimik3_reconciler.planning.tune_space",),
        (
            "unit/planning/test_rendered_specs.py",
            "cases/profile/extra_args_owned_flag.yaml",
            "cases/profile/extra_args_model_source.yaml",
            "unit/tuning/test_tune.py",
        ),
        seed="seed 000 step 5 (always sets --numa distribute, f16 KV, threads; --load-mode none required)",
    ),
    Rule(
        "gate-fixed-flags",
        "force",
        "the quant gate's llama-perplexity runs with the server's owned flags: "
        "--numa distribute, f16 K/V, --threads/--threads-batch = physical cores, --load-mode none, the profile's "
        "--fit-target margins (the candidate: its manual split too)",
        "the gate loads the same real quant as the server: skipping --numa or --load-mode measured as a "
        "20+-minute single-request stall, so the gate stalls too without them",
        ("kimik3_reconciler.planning.quant_gate",),
        ("unit/planning/test_quant_gate.py", "integration/test_quant_gate_docker.py"),
        seed="seed 000 step 5 (Runtime requirements that are NOT tunable: --numa distribute, f16 KV, threads = "
        "physical cores, --load-mode none; skipping either measured as a 20+-minute stall)",
    ),
    Rule(
        "base-image-digest",
        "force",
        "base images given by tag are resolved to the digest present locally at build "
        "time and recorded on the image; a tag that now points to another digest rebuilds; a profile may pin "
        "build.base_images by digest (repo:tag@sha256:…), and then the digest is in the image fingerprint",
        "a tag is no pin: the same profile would build on whatever the tag points to today",
        ("kimik3_reconciler.planning.image_step",),
        (
            "cases/plan/58-base-image-tag-moved.yaml",
            "cases/plan/79-base-image-pinned-by-digest.yaml",
            "unit/steps/test_base_digests.py",
        ),
        seed="seed 000 Why build from source in Docker (you want a pinned commit, not a moving latest; build once, "
        "keep the image, rebuild only when bumping the pin)",
    ),
    Rule(
        "load-mode",
        "refuse",
        "serve.load_mode is none (default) or dio; auto, mmap, mlock and mmap+mlock are "
        "refused, in the profile and in extra_args; the server and the quant gate get the profile's mode",
        "a mapped model is faulted in by the first request: measured as a 20+-minute single-request stall; "
        "dio reads the same bytes with direct I/O (around the page cache)",
        _rules("serving") + _LLAMACPP,
        (
            "cases/profile/load_mode_mmap.yaml",
            "cases/profile/load_mode_dio_ok.yaml",
            "cases/profile/extra_args_load_mode.yaml",
            "unit/planning/test_rendered_specs.py",
        ),
        seed="seed 000 step 5 (numa_balancing=0 and --load-mode none, both required, not optional — skipping "
        "either measured as a 20+-minute single-request stall)",
    ),
    Rule(
        "kv-types-equal",
        "force",
        "K and V cache types are equal (f16/f16)",
        "every MLA model refuses different K and V cache types at context creation (llama-cpp.md §1.3)",
        _LLAMACPP,
        ("unit/planning/test_rendered_specs.py",),
        seed="seed 000 step 5 (--cache-type-k f16 --cache-type-v f16); reference/llama-cpp.md §1.3",
    ),
    Rule(
        "split-mode",
        "refuse",
        "never -sm row or -sm tensor for kimi-k3",
        "tensor split is not implemented for kimi-k3; CUDA has no row split buffers (llama-cpp.md §1.3)",
        _rules("server_args"),
        ("cases/profile/split_mode_tensor.yaml",),
        seed="seed 000 Key facts (This is not TP: --split-mode layer); reference/llama-cpp.md §1.3",
    ),
    Rule(
        "port-free",
        "refuse",
        "serve.port (and with `metrics:` metrics.port and, behind the proxy, llama-server's "
        "inner port) held by a process that is not kimik3's container or exporter is refused before anything runs",
        "llama-server (or the exporter) would exit 'couldn't bind' after the launch (on a real quant, a ~17-minute "
        "load later)",
        ("kimik3_reconciler.planning.host_gate",),
        (
            "cases/plan/60-port-held-by-foreign-process.yaml",
            "cases/plan/61-port-held-by-own-container.yaml",
            "cases/plan/69-metrics-ports-held-by-foreign-process.yaml",
        ),
        seed="not in the seeds: kimik3's own rule: seed 000 serves on a configurable port; a held one fails late",
    ),
    Rule(
        "pinned-to-serve",
        "refuse",
        "plan, apply and the commands that run a profile refuse a hub revision that "
        "names a branch or tag, and an image tag without its digest; validate only warns (a fleet file's profile: "
        "refused), and `kimik3 pin FILE` writes the commit (digest) served for it now into the profile, the name kept "
        "as a comment",
        "a branch or tag moves: what plan showed and apply serves, or two hosts, could differ; resolved once, in the "
        "file, like a lock file, never silently at each run",
        (
            "kimik3_reconciler.model.profile_rules.pinned",
            "kimik3_reconciler.cli.inputs",
            "kimik3_reconciler.fleet.source",
        ),
        (
            "cases/profile/revision_branch_warns.yaml",
            "cases/profile/vllm_image_tag_only.yaml",
            "unit/model/test_pins.py",
            "integration/test_pin_hub_registry.py",
            "unit/fleet/test_fleet_file.py",
        ),
        seed="not in the seeds: kimik3's own rule: the llama.cpp recipe pins a commit, not a moving latest; the engines "
        "guide pulls by tag",
    ),
    Rule(
        "build-args-safe",
        "refuse",
        "cmake arguments made from profile fields carry no shell or cmake metacharacters",
        "a profile field must never become shell text in the build",
        ("kimik3_reconciler.engines.llamacpp.build_flags",),
        ("unit/planning/test_build_args.py",),
        seed="not in the seeds: kimik3's own rule: never build a shell string from profile fields",
    ),
    Rule(
        "mmproj-fork-only",
        "refuse",
        "model.mmproj only with build.source: fork",
        "vision (MoonViT-3d) lives only in the fork; mainline errors or silently ignores --mmproj",
        _rules("build") + _LAUNCH,
        ("cases/profile/mmproj_mainline.yaml", "cases/plan/14-mainline-drops-mmproj.yaml"),
        seed="seed 000 step 4; Key facts (Vision lives only in the fork)",
    ),
    Rule(
        "tq2-refused",
        "refuse",
        "UD-TQ2_0 is refused",
        "it loads and talks on these GPUs yet produces corrupted logits",
        _rules("quants"),
        ("cases/profile/quant_tq2_0.yaml",),
        seed="seed 000 step 2 (UD-TQ2_0 produces corrupted logits)",
    ),
    Rule(
        "unvetted-iq-tq",
        "refuse",
        "an IQ/TQ quant outside the vetted catalog needs gate.quant; a quant whose gate "
        "failed on this image is never served",
        "a broken sm_120 kernel for a new type scores KLD >> 1 while it still talks",
        _rules("quants") + ("kimik3_reconciler.planning.quant_gate",),
        (
            "cases/profile/quant_iq_unvetted.yaml",
            "cases/profile/quant_iq_unvetted_with_gate.yaml",
            "unit/planning/test_quant_gate.py",
        ),
        seed="seed 000 step 2 (any new IQ/TQ quant must pass the gate); When startup crashes (KLD >> 1)",
    ),
    Rule(
        "unvetted-quant",
        "warn",
        "a quant outside the vetted catalog (not IQ/TQ) without gate.quant is warned",
        "mechanically supported but never verified on this hardware: the gate is how it becomes vetted",
        _rules("quants"),
        ("cases/profile/quant_unvetted_warns.yaml",),
        seed="seed 000 step 2 (other Unsloth quants are mechanically supported (QUANT=<dir-name>) but unvetted)",
    ),
    Rule(
        "reap770-code",
        "warn",
        "UD-Q2_K_XL-REAP770 is warned for code use",
        "near-reference KLD (0.047) but HumanEval 86.6 % / MBPP 85.5 % vs 95.7 / 97.0 for UD-IQ2_XXS",
        _rules("quants"),
        ("cases/profile/reap770_code_use_warns.yaml",),
        seed="seed 000 step 2 (REAP770: not the right default for coding use)",
    ),
    Rule(
        "task-check",
        "check",
        "kimik3 does not yet run the seed's task check (GSM8K/HumanEval/MBPP against the "
        "served endpoint) and has no profile field that gates on an external evaluation: run it by hand "
        "(docs/operations.md 'What verify and the quant gate do not check')",
        "the seed vetted quants on tasks because KLD misleads both ways: it overstates UD-IQ2_XXS's damage (KLD 0.37, "
        "tasks 97.5/95.7/97.0 %) and misses REAP770's code regression (KLD 0.047, HumanEval 86.6 %); kimik3's tests "
        "serve random weights, where a task gate's judgment could not be exercised, so it is not yet built",
        (),
        (),
        seed="seed 000 step 2 (the task check: 200 GSM8K, 164 HumanEval, 200 MBPP; KLD overstates its damage; "
        "the expert cut damages code generation despite the far better KLD)",
    ),
    Rule(
        "spec-draft-device",
        "refuse",
        "the draft sits on the GPU holding output.weight (last GPU of the split): "
        "with a gpus: list the profile rules count it, with gpus: all the host gate counts the host's GPUs",
        "anywhere else llama.cpp aborts in graph reservation",
        _rules("drafts")
        + ("kimik3_reconciler.engines.llamacpp.drafts", "kimik3_reconciler.engines.llamacpp.memory_gate"),
        (
            "cases/profile/spec_draft_not_last_gpu.yaml",
            "cases/plan/44-draft-not-last-gpu-with-gpus-all.yaml",
            "cases/profile/spec_draft_cuda_device_gpus_none.yaml",
            "unit/planning/test_conflicts.py",
            "unit/planning/test_memory_gate.py",
        ),
        seed=f"{_KEY_SPEC}: --spec-draft-device CUDA7 on an 8-GPU layer split",
    ),
    Rule(
        "spec-draft-fit-list",
        "warn",
        "spec_draft with a scalar fit_target (one margin for every GPU) is warned",
        "the draft's GPU needs ~9 GB more than the others: only a per-GPU list gives it that without taking it "
        "from every GPU",
        _rules("serving"),
        ("cases/profile/spec_draft_scalar_fit_target_warns.yaml",),
        seed=f"{_KEY_SPEC}: ~9 GB free on the draft's GPU plus the snapshots; use a per-device --fit-target list",
    ),
    Rule(
        "spec-draft-rollback",
        "refuse",
        "spec_draft needs the recurrent-state rollback patch in build.patches: "
        "an empty list is refused by the profile rules; the patch is recognised by content at plan time (a patch "
        "changing src/llama-memory-recurrent.cpp/.h whose added code, not comments, names a rollback), never by "
        "file name",
        "without it the host-side state checkpoint per draft step costs more than the drafts save; the patch is "
        "not public, so there is no sha256 to record",
        _rules("drafts") + ("kimik3_reconciler.engines.llamacpp.patch_roles",),
        (
            "cases/profile/spec_draft_no_patches.yaml",
            "cases/plan/59-spec-draft-patch-named-but-not-rollback.yaml",
            "cases/plan/75-spec-draft-rollback-by-content.yaml",
            "cases/plan/46-spec-draft-rollback-only-in-comments.yaml",
            "unit/planning/test_patch_roles.py",
        ),
        seed=f"{_KEY_SPEC}: kimi-k3-rs-rollback.patch, bounded recurrent-state rollback for KIMI_K3",
    ),
    Rule(
        "spec-draft-concurrency",
        "warn",
        "speculative decoding where 4 or more requests can decode together "
        "(parallel >= 4: the slots are what let them batch), and live in `status --watch` when the server drafts "
        "with 4 or more requests processing",
        "the seed measured concurrency, not slots: with 4 slots +23 %/+72 % at one request (c1), a loss at c4 "
        "(verify batches multiply MoE expert reads); parallel <= 3 caps every batch below the loss",
        _rules("drafts") + ("kimik3_reconciler.exporter.watch",),
        (
            "cases/profile/spec_draft_parallel_warns.yaml",
            "cases/profile/spec_draft_parallel_3_ok.yaml",
            "unit/exporter/test_watch_signals.py",
        ),
        seed=f"{_KEY_SPEC}: Measured on IQ2_XXS at 4 slots: +23 % / +72 % at c1; a loss at c4",
    ),
    Rule(
        "no-mtp-head",
        "refuse",
        "no draft-mtp speculation (spec_draft.type, --spec-type in extra_args or LLAMA_ARG_SPEC_TYPE)",
        "the checkpoint has no MTP head: there is nothing for draft-mtp to draft with",
        _rules("drafts"),
        (
            "cases/profile/spec_draft_mtp.yaml",
            "cases/profile/spec_type_mtp_extra_args.yaml",
            "cases/profile/spec_type_mtp_env.yaml",
        ),
        seed=f"{_KEY_SPEC}: No MTP head in the checkpoint",
    ),
    Rule(
        "ngram-mod-neutral",
        "warn",
        "--spec-type ngram-mod is said to be about neutral when chosen",
        "measured ~ neutral on Kimi-K3; the DSpark draft is what pays, at low concurrency",
        _rules("drafts"),
        ("cases/profile/spec_type_ngram_mod_warns.yaml",),
        seed=f"{_KEY_SPEC}: ngram-mod is ≈ neutral",
    ),
    Rule(
        "cache-ram-zero",
        "warn",
        "cache_ram: 0 only when benchmarking",
        "it turns the host-RAM prompt cache off",
        _rules("serving"),
        ("cases/profile/cache_ram_zero_warns.yaml",),
        seed="seed 000 step 5 (CACHE_RAM: 0 only when benchmarking)",
    ),
    Rule(
        "quant-mode-derived",
        "force",
        "hybrid or all-VRAM is derived from the quant's bytes against the profile's "
        "GPUs' total VRAM (less fit margins, KV, buffers); the batch/ubatch/fit_target defaults and the launch "
        "follow it, the plan says when it is not the catalog's, and a derived all-VRAM mode with a margin below the "
        "quant's all-VRAM floor is refused",
        "seed 000 Key facts: the split is reproducible per (quant, GPU count, GPU memory), re-tune if any changes; "
        "UD-IQ2_XXS is all-VRAM on 8x RTX PRO 6000 (765 GiB), not on four GPUs",
        ("kimik3_reconciler.engines.llamacpp.vram_fit",),
        (
            "cases/plan/50-iq2xxs-hybrid-on-four-gpus.yaml",
            "cases/plan/51-q2-all-vram-on-eight-h200.yaml",
            "unit/planning/test_vram_fit.py",
        ),
        seed="seed 000 Key facts (--n-cpu-moe is a knob: reproducible per (quant, GPU count, GPU memory), re-tune if "
        "any change); step 2 (IQ2_XXS fits VRAM on 8x RTX PRO 6000); step 5 (BATCH/UBATCH 4096 hybrid, 2048 "
        "all-VRAM)",
    ),
    Rule(
        "sizing-headroom",
        "refuse",
        "the quant + 10 % runtime headroom must fit VRAM + RAM, and what the GPUs "
        "cannot hold (the hybrid's CPU experts, + 10 %) must fit the RAM; MemAvailable short of it warns",
        "seed 000 Sizing gate: a quant that does not fit VRAM + RAM cannot run at any split, and the hybrid keeps "
        "~130 GiB of RAM busy; seed 001: plan the download size + 10-15 % runtime headroom",
        ("kimik3_reconciler.engines.llamacpp.memory_gate",),
        (
            "cases/plan/52-sizing-headroom.yaml",
            "cases/plan/107-cpu-host-huge-quant.yaml",
            "unit/planning/test_memory_gate.py",
            "unit/planning/test_host_gate.py",
        ),
        seed="seed 000 Key facts (Sizing gate is disk-and-memory); step 2 (130 GiB of RAM stay busy); seed 001 "
        "(download size + 10-15 % runtime headroom)",
    ),
    Rule(
        "hybrid-ram-measured",
        "refuse",
        "a hybrid's RAM is at least what the seed measured for its quant on GPUs "
        "with as much VRAM or more (UD-Q2_K_XL: ~130 GiB on 8x RTX PRO 6000), whatever kimik3 estimates",
        "kimik3's estimate before the GGUF headers are read (the quant less the usable VRAM) was ~73 GiB on the "
        "seed's host, so a 128 GiB host passed the sizing gate and would have been killed for memory in the load",
        ("kimik3_reconciler.engines.llamacpp.vram_fit", "kimik3_reconciler.engines.llamacpp.placement"),
        (
            "cases/plan/120-seed-host-q2-ram-measured.yaml",
            "unit/planning/test_memory_gate.py",
            "unit/planning/test_host_gate.py",
            "unit/planning/test_context_per_slot.py",
        ),
        seed="seed 000 step 2 (UD-Q2_K_XL: hybrid, ~130 GiB of experts on CPU; 130 GiB of RAM stay busy)",
    ),
    Rule(
        "prompt-cache-ram",
        "refuse",
        "the sizing gate counts llama-server's prompt cache in RAM: serve.cache_ram "
        "MiB, else llama-server's default 8192 MiB, on top of the CPU experts",
        "the host-RAM prompt cache (--cache-ram) fills the same RAM the hybrid's experts live in; counted nowhere, a "
        "host with just the experts' RAM runs out once the cache fills",
        ("kimik3_reconciler.engines.llamacpp.memory_gate",),
        (
            "cases/plan/120-seed-host-q2-ram-measured.yaml",
            "cases/plan/52-sizing-headroom.yaml",
            "unit/planning/test_memory_gate.py",
            "unit/planning/test_host_gate.py",
        ),
        seed="seed 000 step 5 (CACHE_RAM: 0 only when benchmarking); reference/llama-cpp.md §1.1 (--cache-ram "
        "8192 MiB by default in b11434)",
    ),
    Rule(
        "ctx-checkpoint-ram",
        "refuse",
        "the sizing gate counts the slots' context checkpoints in RAM: serve.parallel x --ctx-checkpoints (32 "
        "unless serve.extra_args or serve.env sets it) x one sequence's recurrent state (the KDA layers', from the "
        "GGUF headers, else Kimi-K3's assumed shape), on top of the CPU experts and the prompt cache",
        "llama-server copies each slot's recurrent state to the host at the end of a prompt and at user turns, up "
        "to --ctx-checkpoints a slot, outside --cache-ram: ~37 GiB for 8 slots of 32 on Kimi-K3; a host that fits "
        "only the weights and the prompt cache is killed for memory once the first conversations filled them",
        ("kimik3_reconciler.engines.llamacpp.memory_gate",),
        (
            "cases/plan/230-checkpoints-push-hybrid-over.yaml",
            "cases/plan/231-checkpoints-fewer-fit.yaml",
            "unit/planning/test_checkpoint_ram.py",
        ),
        seed="not in the seeds: reference/llama-cpp.md §1.1 (--ctx-checkpoints 32), §4.5 (KDA state, checkpoints)",
    ),
    Rule(
        "draft-gpu-room",
        "refuse",
        "the draft's GPU keeps the quant's all-VRAM floor + 9216 MiB free after --fit "
        "(its fit_target entry: 6144 + 9216 for UD-IQ2_XXS all-VRAM; 9216 on a hybrid) and has that much VRAM at all",
        "seed 000 Speculative decoding: ~9 GB free on the draft's GPU plus room for the snapshots; use a per-device "
        "--fit-target list",
        ("kimik3_reconciler.engines.llamacpp.memory_gate",),
        (
            "cases/plan/53-draft-gpu-without-room.yaml",
            "cases/plan/45-draft-room-on-top-of-allvram-floor.yaml",
            "unit/planning/test_memory_gate.py",
        ),
        seed=f"{_KEY_SPEC}: ~9 GB free on the draft's GPU plus room for the snapshots, a per-device --fit-target list",
    ),
    Rule(
        "cuda-arch-covers-gpus",
        "refuse",
        "every GPU of the profile has kernels among build.cuda_architectures "
        "(as llama.cpp builds them: a plain 12X is 12Xa); PTX-only coverage warns",
        "seed 000 builds sm_120 for RTX PRO 6000; an sm_120 image on an H200 (sm_90) passes the build and fails at "
        "load (reference/llama-cpp.md §3.2)",
        ("kimik3_reconciler.engines.llamacpp.host_findings",),
        ("cases/plan/56-sm120-image-on-h200.yaml", "unit/planning/test_host_compat.py"),
        seed="seed 000 step 4 (compiles CUDA sm_120 kernels for its GPUs); reference/llama-cpp.md §3.2 "
        "(CMAKE_CUDA_ARCHITECTURES, 12X -> 12Xa)",
    ),
    Rule(
        "avx512-experts",
        "warn",
        "a hybrid (or CPU build) with cpu_features: auto on a CPU without AVX-512; AMX "
        "is not judged, and an explicit list (`[]`: portable) is the profile's choice",
        'seed 000: the CPU experts run on AVX-512; AMX "turns out to be irrelevant to the experts" (never used for '
        "MoE)",
        ("kimik3_reconciler.engines.llamacpp.host_findings",),
        ("cases/plan/57-hybrid-without-avx512.yaml", "unit/planning/test_host_gate.py"),
        seed="seed 000 Hardware target (AVX-512, +AMX which turns out to be irrelevant to the experts); Key facts "
        "(not by AMX, never used for MoE)",
    ),
    Rule(
        "cpu-features-on-host",
        "refuse",
        "build.cpu_features may list an AVX-512 set only when this CPU has it",
        "the listed kernels are compiled into the whole CPU backend: an illegal instruction on this CPU",
        ("kimik3_reconciler.engines.llamacpp.host_findings",),
        ("unit/planning/test_host_gate.py",),
        seed="not in the seeds: the build compiles the listed ISA into the CPU backend (reference/llama-cpp.md §3.2)",
    ),
    Rule(
        "variant-gpus",
        "refuse",
        "build.variant cpu only with gpus: none, and gpus: none only with the cpu variant",
        "the CPU image has no CUDA kernels; a CUDA image with no GPU is the CPU build done the slow way",
        _rules("build"),
        ("cases/profile/variant_cpu_with_gpus.yaml", "cases/profile/variant_cuda_gpus_none.yaml"),
        seed=f"{OWN}design.md's two image variants (the seed serves CUDA + CPU kernels; the CPU build is the demo's)",
    ),
    Rule(
        "builtin-patch-names",
        "refuse",
        "build.builtin_patches names only kimik3's own patches (model/"
        "builtin_patches.py) for the profile's build.variant; unset = the default ones for the variant (an "
        "opt-in one, not measured on that variant's host, only when named), [] = none",
        "a name kimik3 does not carry, or one for the other variant, would build an image without the patch the "
        "profile asks for",
        _rules("build"),
        (
            "cases/profile/builtin_patches_unknown.yaml",
            "cases/profile/builtin_patches_cpu_variant.yaml",
            "cases/profile/builtin_patches_none_ok.yaml",
            "cases/profile/builtin_patches_opt_in_ok.yaml",
            "cases/profile/builtin_patches_cpu_host_read_ok.yaml",
        ),
        seed=f"{OWN}seed 000 step 4 builds from a pinned source with patches; kimik3 carries its own (issue 15)",
    ),
    Rule(
        "builtin-patches-whole-set",
        "warn",
        "a build.builtin_patches list that leaves out a default patch of the "
        "variant is warned: the list is the whole set, not an addition to the defaults",
        "naming one patch alone silently drops the other default ones (a CUDA profile writing [parallel-pin] "
        "would lose parallel-host-read's parallel warm copy, [parallel-host-read] parallel-pin's pinning)",
        _rules("build"),
        ("cases/profile/builtin_patches_opt_in_alone_warns.yaml", "cases/profile/builtin_patches_pin_alone_warns.yaml"),
        seed=f"{OWN}seed 000 step 4 builds from a pinned source with patches; kimik3 carries its own (issue 15)",
    ),
    Rule(
        "archive-pinned",
        "warn",
        "an http(s) build.archive without build.archive_sha256 is warned as unpinned",
        "a URL's content can change under the same name: the build would not be the pinned one",
        _rules("build"),
        ("cases/profile/build_archive_url_unpinned_warns.yaml",),
        seed="seed 000 Why build from source in Docker (you want a pinned commit, not a moving latest)",
    ),
    Rule(
        "owned-env",
        "refuse",
        "serve.env never sets what kimik3 renders: the LLAMA_ARG_* variable of an owned "
        "option (model source, host, port, batch/ubatch, fit, split, ctx, slots, cache, mmproj, draft, the fixed "
        "flags), nor the container's GPUs (NVIDIA_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES: use gpus)",
        "llama-server reads the variable as the option: where kimik3 renders it only sometimes (or never: -hf) "
        "the variable wins, list options (-ncmoe) append; the nvidia runtime hands a container the GPUs "
        "NVIDIA_VISIBLE_DEVICES names, past the profile's gpus",
        _rules("no_secrets", "server_args"),
        ("cases/profile/serve_env_owned_option.yaml", "cases/profile/serve_env_gpu_selection.yaml"),
        seed=f"{OWN}one place for each setting (reference/llama-cpp.md §1.0: env sets options behind the CLI); "
        "seed 000 step 1 (the GPU pool is shared: use only the GPUs the profile names)",
    ),
    Rule(
        "quant-name-case",
        "refuse",
        "model.quant spelled like a catalog quant in another case is refused, naming the catalog's spelling",
        "the Hub's folder names are case-sensitive: the plan would end at the hub (exit 6, "
        "path not found) instead of at validate",
        _rules("quants"),
        ("cases/profile/quant_name_case.yaml",),
        seed=f"{OWN}shared/PROFILE.md (quant: folder in the repo; catalog knows size, mode, vetting)",
    ),
    Rule(
        "extra-args-argv",
        "refuse",
        "each serve.extra_args item is one argv word: a flag item with a space in it, "
        "or an owned short flag with its value glued on ('-ub512'), is refused",
        "items are passed as is, never through a shell: '--ubatch-size 512' is one unknown flag to "
        "llama-server (the launch fails) and would hide an owned flag from the fixed-flags check",
        _rules("server_args"),
        ("cases/profile/extra_args_space_in_flag.yaml", "cases/profile/extra_args_joined_value.yaml"),
        seed=f"{OWN}shared/PROFILE.md (extra_args: passed as argv items, never through a shell)",
    ),
    Rule(
        "llama-arg-env",
        "warn",
        "LLAMA_ARG_* in serve.env is warned: it sets a llama-server option behind the argv",
        "llama-server reads LLAMA_ARG_* as options (list options even append): a second, hidden copy of a "
        "profile field",
        _rules("server_args"),
        ("cases/profile/serve_env_llama_arg_warns.yaml",),
        seed=f"{OWN}one place for each setting (reference/llama-cpp.md §1.0: env sets options behind the CLI)",
    ),
    Rule(
        "no-secrets",
        "refuse",
        "a profile never holds a secret; the API key is a read-only mounted file",
        "keys in argv/env show up in `docker inspect` and logs",
        _rules("no_secrets") + _LLAMACPP,
        (
            "cases/plan/19-api-key-file.yaml",
            "cases/profile/secret_in_url_or_key_file.yaml",
            "cases/profile/api_key_file_paths_ok.yaml",
            "unit/cli/test_hostile_inputs.py",
        ),
        seed="not in the seeds: shared/PROFILE.md (a profile never contains a secret)",
    ),
    Rule(
        "api-key-file-holds-a-key",
        "refuse",
        "serve.api_key_file holds at least one key as llama-server reads the "
        "file (a non-empty line not starting with '#'), each printable ASCII (no CR of a CRLF file, no spaces)",
        "llama-server given a key file without a key starts with no key and answers anyone who reaches the port; a "
        "key ending in CR is held byte for byte, so every client (verify, the exporter) is refused",
        ("kimik3_reconciler.planning.launch",),
        ("unit/orchestrator/test_api_key_file.py",),
        seed=f"{OWN}shared/PROFILE.md (api_key_file: read at launch); llama.cpp common/arg.cpp --api-key-file",
    ),
    Rule(
        "serving-contract-flags",
        "refuse",
        "serve.extra_args and serve.env never make llama-server print and exit "
        "(--help, --version, --list-devices, ...) nor serve what kimik3 cannot check (--api-prefix, --embedding, "
        "--rerank, --ssl-key-file/--ssl-cert-file, or their LLAMA_ARG_* variables)",
        "passed through, apply waited out the health timeout or failed verify, then reverted; refused at validate",
        _rules("server_args"),
        ("cases/profile/extra_args_not_serving.yaml",),
        seed=f"{OWN}llama.cpp b11434 common/arg.cpp; seed 000 step 6 (wait healthy) and verify",
    ),
    Rule(
        "handover-needs-proxy",
        "refuse",
        "metrics.handover only with metrics.proxy: true",
        "the front that holds requests across a replacement is the proxy; without it llama-server holds serve.port "
        "and closes it at every replacement",
        _rules("listeners"),
        ("cases/profile/handover_without_proxy.yaml",),
        seed="not in the seeds: issue 29 (drain, hold and hand over)",
    ),
    Rule(
        "proxy-server-on-loopback",
        "force",
        "with metrics.proxy llama-server listens on 127.0.0.1:server_port and the proxy on serve.host:serve.port",
        "a client reaching llama-server directly skips the latency series",
        _LAUNCH + ("kimik3_reconciler.planning.metrics_step",),
        ("cases/plan/82-metrics-proxy-turned-on.yaml",),
        seed="not in the seeds: issue 17 (a streaming proxy in front of llama-server)",
    ),
    # --- verify and the crash symptoms (issue 14) ---
    Rule(
        "verify-random-weights",
        "check",
        "what random weights say is reported 'not checkable (random weights)', "
        "never 'ok'; only a GGUF marked kimik3.weights = random (kimik3's smoke/demo models) counts as random",
        "a tiny model proves the plumbing, not Kimi-K3; a real model must never pass unjudged",
        ("kimik3_reconciler.verify",),
        ("unit/verify/test_verify.py", "integration/test_verify_docker.py"),
        seed="seed 000 step 4 (a smoke pass means 'the image works', not 'Kimi-K3 will load')",
    ),
    Rule(
        "cuda-oom-first-request",
        "check",
        "a server that dies of 'CUDA error: out of memory' (at launch, on "
        "verify's first request, or found exited) is reported with the fix: raise serve.fit_target, use ubatch 2048",
        "the CUDA scratch pool grows on the first real request: without VRAM margin it aborts after a full load",
        ("kimik3_reconciler.observe.server_log", "kimik3_reconciler.verify"),
        (
            "unit/observe/test_crash_symptoms.py",
            "unit/verify/test_verify.py",
            "cases/plan/70-crashed-cuda-oom.yaml",
            "cases/plan/71-exited-log-names-no-cause.yaml",
        ),
        seed="seed 000 When startup crashes (CUDA error: out of memory in alloc on the first request after an "
        "all-VRAM load -> raise --fit-target and use -ub 2048)",
    ),
    Rule(
        "kld-broken-kernel",
        "refuse",
        "a gated quant scoring mean KLD > 1 (or NaN/inf) fails as a broken kernel for that quant "
        "type on this GPU and is never served, whatever gate.quant.max_kld says",
        "the vetted quants score 0.047-0.37; past 1 no quantization explains it: another type or build is the fix",
        ("kimik3_reconciler.planning.quant_gate",),
        ("unit/observe/test_crash_symptoms.py",),
        seed="seed 000 When startup crashes (a new quant that loads and talks but scores KLD >> 1 in the gate -> "
        "broken sm_120 kernel for that type, don't serve it)",
    ),
    Rule(
        "engine-not-offered",
        "refuse",
        "engine: ollama is refused, saying why and what to write instead (engine: llamacpp with the same quant)",
        "Ollama serves the same GGUF path with no --n-cpu-moe/--override-tensor control, so it can only be a slower, "
        "less controllable llama.cpp here; no Ollama binary is reachable to test it either",
        ("kimik3_reconciler.model.profile_schema",),
        ("cases/profile/engine_ollama_refused.yaml",),
        seed='seed 001 ("Ollama is a convenience layer for the same GGUF path"; it does not change memory needs); '
        "seed 000 (the hybrid split is --n-cpu-moe/--override-tensor)",
    ),
    Rule(
        "rpc-bind-private",
        "refuse",
        "an RPC worker binds one loopback or private address (10/8, 172.16/12, "
        "192.168/16, 100.64/10, fc00::/7, link-local): never 0.0.0.0/:: nor a public address",
        "rpc-server has no authentication and no encryption: anyone who reaches its port can read and write the "
        "worker's memory",
        _rules("workers") + ("kimik3_reconciler.verify.workers",),
        ("cases/profile/rpc_bind_public.yaml", "cases/profile/rpc_bind_any.yaml", "cases/profile/rpc_ok.yaml"),
        seed=_RPC_SEED,
    ),
    Rule(
        "rpc-docker-tls",
        "refuse",
        "a worker's Docker is reached over ssh:// or over tcp:// with a TLS client "
        "certificate (tls_dir); never plain tcp",
        "a plain tcp Docker socket is root on that host for anyone who reaches it",
        _rules("workers"),
        (
            "cases/profile/rpc_docker_url.yaml",
            "cases/profile/rpc_docker_tls.yaml",
            "cases/profile/rpc_docker_url_port_range.yaml",
            "cases/profile/rpc_docker_url_ssh_alias_ok.yaml",
        ),
        seed=_RPC_SEED,
    ),
    Rule(
        "rpc-worker-shape",
        "refuse",
        "worker names and bind:port endpoints are unique, binds are IPv4 (rpc-server b11434); a CUDA device needs the "
        "worker's gpus",
        "one rpc-server counted twice, or one that finds no device, cannot serve layers",
        _rules("workers"),
        ("cases/profile/rpc_worker_duplicate.yaml",),
        seed=_RPC_SEED,
    ),
    Rule(
        "rpc-extra-args",
        "refuse",
        "--rpc never comes from serve.extra_args: the rpc section renders it",
        "an endpoint in extra_args is neither checked (its address) nor converged (its rpc-server)",
        _rules("workers"),
        ("cases/profile/rpc_extra_args.yaml",),
        seed=_RPC_SEED,
    ),
    Rule(
        "rpc-workers-first",
        "force",
        "every worker's rpc-server accepts connections before the main server "
        "starts, and a worker whose fingerprint changes replaces the main server",
        "llama-server connects to each --rpc endpoint while loading and fails without it",
        ("kimik3_reconciler.planning.worker_step",),
        ("cases/plan/85-rpc-fresh-two-hosts.yaml", "cases/plan/86-rpc-worker-inputs-changed.yaml"),
        seed="not in the seeds: issue 18 (workers healthy before the main server starts; replace the main server when a worker's "
        "fingerprint changes)",
    ),
    Rule(
        "rpc-worker-restart-replaces-server",
        "force",
        "a worker relaunched, or restarted after the main server started, replaces the main server",
        "the layers the server placed on a worker live in that rpc-server's memory: a new one holds none",
        ("kimik3_reconciler.planning.container_step",),
        ("cases/plan/87-rpc-worker-restarted.yaml", "cases/plan/88-rpc-worker-gone.yaml"),
        seed="not in the seeds: issue 18 (a worker that goes away is drift)",
    ),
    Rule(
        "rpc-removed-worker-removed",
        "force",
        "a worker an apply launched that the profile no longer names (dropped "
        "from rpc.workers, or the rpc section gone) has its rpc-server removed after the main server's swap, by apply "
        "and by destroy; when its Docker cannot be reached the plan refuses, naming the worker and the hand clean-up",
        "an rpc-server left running stays open on the network (tools/rpc/README.md: never expose it)",
        ("kimik3_reconciler.planning.worker_step",),
        ("cases/plan/98-rpc-worker-dropped.yaml", "cases/plan/99-rpc-section-removed.yaml"),
        seed="not in the seeds: issue 18 (an exposed RPC server is a security hole; a dropped worker is removed)",
    ),
    Rule(
        "engine-fields",
        "refuse",
        "a profile writes only what its engine reads: vllm/sglang refuse build, rpc, "
        "model.quant/mmproj/tokenizer/local_path, gate and llama.cpp's serve fields and require image.ref (by digest); llamacpp "
        "refuses image, vllm and sglang and requires model.quant",
        "a field the engine does not read would be accepted and silently ignored: the user believes it applied",
        _rules("engines", "fields"),
        (
            "cases/profile/vllm_llamacpp_fields.yaml",
            "cases/profile/vllm_image_missing.yaml",
            "cases/profile/llamacpp_vllm_sections.yaml",
            "cases/profile/llamacpp_quant_missing.yaml",
            "cases/profile/vllm_local_path.yaml",
        ),
        seed="seed 001 (one recipe per engine: vLLM's flags, SGLang's flags, llama.cpp's GGUF path); issue 25",
    ),
    Rule(
        "made-locally-needs-local-path",
        "refuse",
        "a quant the catalog lists as made locally (UD-Q2_K_XL-REAP770) names its file or folder in model.local_path",
        "it is no folder of the repo: a hub listing of it fails after the round trip (exit 6), and nothing can be "
        "downloaded for it",
        _rules("quants"),
        ("cases/profile/reap770_needs_local_path.yaml", "cases/plan/41-reap770-default-fit-target.yaml"),
        seed=f"{_REAP_LOCAL}; issue 27 item 3",
    ),
    Rule(
        "local-path-gguf",
        "refuse",
        "model.local_path exists and is a GGUF: one .gguf file starting with the GGUF "
        "magic, or a folder holding one such file or every shard of one split (-0000i-of-0000n.gguf); else exit 2 "
        "naming the field, before anything changes",
        "llama-server would fail minutes into a load, after the old server stopped, on a git-lfs pointer, a missing "
        "shard or a checkpoint of another format",
        _LOCAL,
        (
            "cases/plan/174-local-path-missing.yaml",
            "cases/plan/175-local-path-not-gguf.yaml",
            "cases/plan/176-local-path-folder-without-shards.yaml",
            "cases/plan/177-local-path-shard-missing.yaml",
            "cases/plan/178-local-path-not-a-gguf-name.yaml",
            "cases/plan/179-local-path-folder-two-models.yaml",
            "unit/steps/test_local_model.py",
        ),
        seed=f"{OWN}issue 27 item 3 (bad input: a clear error naming the field, host untouched)",
    ),
    Rule(
        "local-path-verified",
        "force",
        "a local model is served only as kimik3 verified it: the first apply "
        "records its sha256 manifest, later plans compare each file's stat fingerprint and re-hash one that moved; "
        "new content is drift (the container's fingerprint carries the content digest: the server is relaunched "
        "on it); the file is mounted read-only",
        "a file replaced under a running deployment would change the weights silently at the next restart; a touch "
        "must not cost a 17-minute reload",
        ("kimik3_reconciler.planning.model_step", "kimik3_reconciler.steps.model", "kimik3_reconciler.planning.launch"),
        (
            "cases/plan/170-local-model-first-apply.yaml",
            "cases/plan/171-local-model-verified-noop.yaml",
            "cases/plan/172-local-model-edited-relaunches.yaml",
            "cases/plan/173-local-model-touched-no-relaunch.yaml",
            "unit/steps/test_local_model.py",
            "integration/test_local_model_docker.py",
        ),
        seed=f"{_REAP_LOCAL}; issue 27 item 3 (verified by a sha256 manifest, mounted read-only like the cache)",
    ),
    Rule(
        "local-path-no-mmproj",
        "refuse",
        "model.mmproj is not combined with model.local_path",
        "the projector is a file of the repo: the local model would still need the hub",
        _rules("quants"),
        ("cases/profile/local_path_with_mmproj.yaml",),
        seed=f"{OWN}issue 27 item 3 (a local source, no hub)",
    ),
    Rule(
        "local-path-not-gated",
        "refuse",
        "a local model that needs the quant gate (an unvetted IQ/TQ quant) is "
        "refused: the gate runs on quants of the hub cache only so far",
        "an IQ/TQ quant must pass the gate before it is served (a broken kernel scores KLD >> 1)",
        ("kimik3_reconciler.planning.quant_gate",),
        ("unit/steps/test_local_model.py",),
        seed="seed 000 step 2 (any new IQ/TQ quant must pass the gate before it is served)",
    ),
    Rule(
        "local-path-kept",
        "force",
        "destroy (with --model too) never removes model.local_path",
        "the user made that file (REAP770's slicing takes hours); kimik3 removes only what it fetched",
        ("kimik3_reconciler.planning",),
        ("unit/steps/test_local_model.py",),
        seed=f"{_REAP_LOCAL}; issue 27 item 3",
    ),
)
