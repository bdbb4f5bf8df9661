"""SGLang's rules in the rulebook (model/rulebook.py gathers them through the registry's `rulebook`)."""

from __future__ import annotations

from kimik3_reconciler.model.rulebook_entry import Rule

_SGLANG_SEED = "seed 001 (the SGLang cookbook's verified 8x B300 TP8/DCP8 profile)"
_ENFORCED = ("kimik3_reconciler.engines.sglang.rules",)

RULEBOOK: tuple[Rule, ...] = (
    Rule(
        "sglang-memory-ratio",
        "refuse",
        "engine: sglang needs sglang.mamba_full_memory_ratio, a number; a missing "
        "section or value, or seed 001's placeholder text, is refused naming the field",
        "the ratio depends on the workload's average input + output length (the cookbook's calculator): no default "
        "is right, and a placeholder copied from the guide fails at launch, after a multi-terabyte download",
        _ENFORCED + ("kimik3_reconciler.model.profile_schema",),
        (
            "cases/profile/sglang_section_missing.yaml",
            "cases/profile/sglang_ratio_placeholder.yaml",
            "cases/profile/sglang_ratio_missing.yaml",
        ),
        seed=_SGLANG_SEED + ': "--mamba-full-memory-ratio <value-from-official-calculator>" ... '
        '"arbeidsbelastningsavhengig" (workload-dependent)',
    ),
    Rule(
        "sglang-owned-flags",
        "refuse",
        "serve.extra_args and serve.env never give an SGLang option kimik3 renders "
        "(--model-path, --port, --tp-size, --mamba-full-memory-ratio, --config, ...), and serve.api_key_file is "
        "refused for engine sglang",
        "argparse takes the last copy of a flag: the running server would not be the profile's; SGLang takes its API "
        "key only as --api-key on the command line, where docker inspect and ps show it",
        _ENFORCED,
        ("cases/profile/sglang_owned_flags.yaml", "cases/profile/sglang_api_key_file.yaml"),
        seed=_SGLANG_SEED + "; the secrets rule (never in argv)",
    ),
    Rule(
        "sglang-topology",
        "refuse",
        "sglang.tp_size is at most the GPUs the profile lists and sglang.dcp_size "
        "divides it; engine sglang needs GPUs (gpus: none refused)",
        "one rank per GPU; SGLang asserts tp % dcp == 0 at start; its CPU path is a source build kimik3 does not make",
        _ENFORCED,
        ("cases/profile/sglang_topology.yaml", "cases/profile/sglang_no_gpus.yaml"),
        seed=_SGLANG_SEED,
    ),
    Rule(
        "sglang-memory-ratio-workload",
        "warn",
        "sglang.mamba_full_memory_ratio without sglang.workload (the average "
        "request it was computed for) is warned, saying what the ratio splits and SGLang's own fallback",
        "the ratio is the workload's; profiles/sglang-tp8.yaml ships SGLang 0.5.23's fallback 0.9, which passed "
        "without a word (issue 38)",
        _ENFORCED,
        ("cases/profile/sglang_ratio_without_workload_warns.yaml", "cases/profile/sglang_ratio_with_workload_ok.yaml"),
        seed=_SGLANG_SEED + ': "--mamba-full-memory-ratio er arbeidsbelastningsavhengig: beregn den ut fra '
        'gjennomsnittlig lengde på input pluss output"',
    ),
)
