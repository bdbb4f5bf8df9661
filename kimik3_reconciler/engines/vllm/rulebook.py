"""vLLM's rules in the rulebook (model/rulebook.py gathers them through the registry's `rulebook`)."""

from __future__ import annotations

from kimik3_reconciler.model.rulebook_entry import Rule

_ENFORCED = ("kimik3_reconciler.engines.vllm.rules",)

RULEBOOK: tuple[Rule, ...] = (
    Rule(
        "vllm-owned-flags",
        "refuse",
        "serve.extra_args and serve.env never give a vLLM option kimik3 renders "
        "(--model, --port, --tensor-parallel-size, VLLM_USE_V2_MODEL_RUNNER, ...): the profile's field does",
        "argparse takes the last copy of a flag: the running server would not be the profile's, and the plan would "
        "not see it",
        _ENFORCED,
        ("cases/profile/vllm_owned_flags.yaml", "cases/profile/vllm_api_key_file.yaml"),
        seed="seed 001 (the vLLM TP8 recipe's flags are the vllm section's fields)",
    ),
    Rule(
        "vllm-tensor-parallel",
        "refuse",
        "vllm.tensor_parallel_size is at most the GPUs the profile lists; with "
        "gpus: none a GPU attention backend is warned about",
        "vLLM puts one tensor-parallel rank on each GPU: more ranks than GPUs never start",
        _ENFORCED,
        ("cases/profile/vllm_tensor_parallel_gpus.yaml", "cases/profile/vllm_cpu_backend_warns.yaml"),
        seed="seed 001 (TP8 on 8 GPUs)",
    ),
)
