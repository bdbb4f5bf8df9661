"""The seed-000 rules kimik3 enforces, as data: what each does, why, the modules that enforce it, and
the case files that test it. `kimik3 explain [RULE]` prints them; tests/unit/test_rulebook.py checks
that every case exists and that each enforcing module marks its guard with `# rule: <id>`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Rule:
    id: str
    kind: Literal["refuse", "warn", "force"]
    statement: str
    reason: str
    enforced_by: tuple[str, ...]  # the modules whose guard applies it (dotted paths); () only for an open gap
    cases: tuple[str, ...]  # test files/case files (relative to tests/) that exercise it


_PROFILE = ("kimik3_reconciler.model.profile_rules",)
_LAUNCH = ("kimik3_reconciler.planning.launch",)
_UNITS = ("kimik3_reconciler.planning.unit_step",)

RULES: tuple[Rule, ...] = (
    Rule("hybrid-ubatch", "warn", "hybrid quants use ubatch 4096 (the default)",
         "prefill is bound by copying every CPU expert to GPU0 once per micro-batch: 4096 halves TTFT",
         _PROFILE, ("cases/profile/hybrid_ubatch_warns.yaml",)),
    Rule("allvram-ubatch", "warn", "all-VRAM quants use ubatch 2048 (the default)",
         "the CUDA scratch pool OOMs on the first request after a full load otherwise",
         _PROFILE, ("cases/profile/allvram_ubatch_warns.yaml",)),
    Rule("allvram-fit-target", "refuse", "all-VRAM quants need fit_target >= 4096 MiB",
         "a smaller margin OOMs on the first request after a ~17-minute load",
         _PROFILE, ("cases/profile/allvram_fit_target_small.yaml", "cases/profile/allvram_fit_target_list_small.yaml")),
    Rule("fit-target-spill", "warn", "fit_target >= 6144 MiB on an all-VRAM quant (the draft's GPU excepted)",
         "measured to spill 2-3 expert layers to the CPU silently: -40 %",
         _PROFILE, ("cases/profile/allvram_fit_target_6144_warns.yaml",)),
    Rule("fixed-flags", "force", "--numa distribute, --cache-type-k/v f16, --threads/--threads-batch = physical "
         "cores, --load-mode none, --metrics; extra_args cannot override them",
         "Kimi-K3/hardware requirements, not tuning: leaving --numa or --load-mode out measured as a 20+-minute "
         "single-request stall", _LAUNCH + _PROFILE,
         ("unit/test_rendered_specs.py", "cases/profile/extra_args_owned_flag.yaml")),
    Rule("gate-fixed-flags", "force", "the quant gate's llama-perplexity runs with the server's owned flags: "
         "--numa distribute, f16 K/V, --threads/--threads-batch = physical cores, --load-mode none, the profile's "
         "--fit-target margins (the candidate: its manual split too)",
         "seed 000 step 5, \"Runtime requirements that are NOT tunable\": skipping --numa or --load-mode measured as "
         "a 20+-minute single-request stall; the gate loads the same real quant, so it stalls too without them",
         ("kimik3_reconciler.planning.quant_gate",), ("unit/test_quant_gate.py", "integration/test_quant_gate_docker.py")),
    Rule("gpu-plumbing-probe", "refuse", "before anything is downloaded, built or launched, a real container runs "
         "nvidia-smi with the profile's GPUs, requested through CDI when the host has a CDI spec of nvidia.com/gpu, "
         "the nvidia runtime otherwise; recorded once per (driver, toolkit, request); gpus: none never probes",
         "seed 000 step 1, \"Verify host\": GPU containers work via CDI: `docker run --rm --device "
         "nvidia.com/gpu=all --entrypoint nvidia-smi nvidia/cuda:13.0.0-base-ubuntu24.04`; a spec file or a "
         "registered runtime only says a toolkit was installed",
         ("kimik3_reconciler.planning.gpu_probe",),
         ("cases/plan/76-gpu-probe-cdi-host.yaml", "cases/plan/77-gpu-probe-recorded.yaml",
          "cases/plan/78-gpu-probe-runtime-host.yaml", "unit/test_gpu_probe.py", "integration/test_gpu_probe_docker.py")),
    Rule("base-image-digest", "force", "base images given by tag are resolved to the digest present locally at build "
         "time and recorded on the image; a tag that now points to another digest rebuilds; a profile may pin "
         "build.base_images by digest (repo:tag@sha256:…), and then the digest is in the image fingerprint",
         "seed 000 step 4 (\"Why build from source in Docker\"): you want a pinned commit, not a moving latest; "
         "build once per BUILD_SOURCE, keep the image, rebuild only when bumping the pin",
         ("kimik3_reconciler.planning.image_step",),
         ("cases/plan/58-base-image-tag-moved.yaml", "cases/plan/79-base-image-pinned-by-digest.yaml",
          "unit/test_base_digests.py")),
    Rule("kv-types-equal", "force", "K and V cache types are equal (f16/f16)",
         "every MLA model refuses different K and V cache types at context creation (llama-cpp.md §1.3)",
         _LAUNCH, ("unit/test_rendered_specs.py",)),
    Rule("split-mode", "refuse", "never -sm row or -sm tensor for kimi-k3",
         "tensor split is not implemented for kimi-k3; CUDA has no row split buffers (llama-cpp.md §1.3)",
         _PROFILE, ("cases/profile/split_mode_tensor.yaml",)),
    Rule("numa-balancing", "refuse", "the host needs kernel.numa_balancing = 0",
         "measured as a 20+-minute single-request stall; the host gate refuses before any step runs",
         ("kimik3_reconciler.planning.host_gate",), ("unit/test_host_gate.py", "unit/test_engine.py")),
    Rule("mmproj-fork-only", "refuse", "model.mmproj only with build.source: fork",
         "vision (MoonViT-3d) lives only in the fork; mainline errors or silently ignores --mmproj",
         _PROFILE + _LAUNCH, ("cases/profile/mmproj_mainline.yaml", "cases/plan/14-mainline-drops-mmproj.yaml")),
    Rule("tq2-refused", "refuse", "UD-TQ2_0 is refused",
         "it loads and talks on these GPUs yet produces corrupted logits", _PROFILE,
         ("cases/profile/quant_tq2_0.yaml",)),
    Rule("unvetted-iq-tq", "refuse", "an IQ/TQ quant outside the vetted catalog needs gate.quant",
         "a broken sm_120 kernel for a new type scores KLD >> 1 while it still talks", _PROFILE,
         ("cases/profile/quant_iq_unvetted.yaml", "cases/profile/quant_iq_unvetted_with_gate.yaml")),
    Rule("reap770-code", "warn", "UD-Q2_K_XL-REAP770 is warned for code use",
         "near-reference KLD (0.047) but HumanEval 86.6 % / MBPP 85.5 % vs 95.7 / 97.0 for UD-IQ2_XXS",
         _PROFILE, ("cases/profile/reap770_code_use_warns.yaml",)),
    Rule("spec-draft-device", "refuse", "the draft sits on the GPU holding output.weight (last GPU of the split)",
         "anywhere else llama.cpp aborts in graph reservation", _PROFILE + _LAUNCH,
         ("cases/profile/spec_draft_not_last_gpu.yaml", "unit/test_conflicts.py")),
    Rule("spec-draft-rollback", "refuse", "spec_draft needs the recurrent-state rollback patch in build.patches, "
         "recognised by content (a patch changing src/llama-memory-recurrent.cpp/.h that adds a rollback), never "
         "by file name",
         "seed 000 \"Key facts\", speculative decoding: the draft pays only if the image carries "
         "kimi-k3-rs-rollback.patch (bounded recurrent-state rollback for KIMI_K3); without it the host-side state "
         "checkpoint per draft step costs more than the drafts save. The patch is not public: no sha256 to record",
         ("kimik3_reconciler.planning.patch_roles",),
         ("cases/plan/59-spec-draft-patch-named-but-not-rollback.yaml", "cases/plan/75-spec-draft-rollback-by-content.yaml",
          "unit/test_patch_roles.py")),
    Rule("spec-draft-concurrency", "warn", "speculative decoding with parallel >= 4",
         "verify batches multiply MoE expert reads: +23-72 % at c1, a loss at c4", _PROFILE,
         ("cases/profile/spec_draft_parallel_warns.yaml",)),
    Rule("cache-ram-zero", "warn", "cache_ram: 0 only when benchmarking",
         "it turns the host-RAM prompt cache off", _PROFILE, ("cases/profile/cache_ram_zero_warns.yaml",)),
    Rule("shared-gpus", "force", "a profile sharing GPUs (or the port) with a running one stops it first",
         "the standing and interactive deployments share the GPUs (systemd Conflicts=)",
         ("kimik3_reconciler.planning.conflict_step",), ("unit/test_conflicts.py", "unit/test_engine.py")),
    Rule("env-file-bare-values", "force", "unit env files hold bare values, quoted where needed, never a comment",
         "systemd's EnvironmentFile folds an inline `# comment` into the value", _UNITS,
         ("unit/test_rendered_units.py", "integration/test_systemd_live.py")),
    Rule("units-conflict-ordered", "force", "units sharing GPUs (or the port) carry Conflicts= and After= each other",
         "starting one must stop the other first, or both hold the GPUs at once", _UNITS,
         ("cases/plan/25-systemd-unit-absent.yaml", "unit/test_unit_engine.py", "integration/test_systemd_live.py")),
    Rule("no-secrets", "refuse", "a profile never holds a secret; the API key is a read-only mounted file",
         "keys in argv/env show up in `docker inspect` and logs", _PROFILE + _LAUNCH,
         ("cases/plan/19-api-key-file.yaml",)),
)

BY_ID = {rule.id: rule for rule in RULES}
