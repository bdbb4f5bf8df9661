"""llama.cpp's own profile fields as the cross-engine rule words them (model/profile_rules/engines.py asks through the
registry's `profile_fields`): what an `engine: llamacpp` profile must write (model.quant), and what a vLLM or SGLang
profile that writes one of llama.cpp's fields (the registry's `fields`) is told to write instead."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kimik3_reconciler.model.profile_rules.finding import FieldPath, Finding, error

# What to write instead, where the engine has its own knob for the same thing.
_INSTEAD: dict[FieldPath, str] = {
    ("build",): "the image is pulled by digest: image.ref",
    ("model", "quant"): "the repo's safetensors checkpoint is served whole, not a GGUF quant",
    ("model", "local_path"): "a local GGUF; the checkpoint is model.repo at model.revision, fetched and verified",
    ("serve", "ctx_size"): "vllm.max_model_len",
    ("serve", "parallel"): "vllm.max_num_seqs",
    ("serve", "batch"): "vllm.max_num_batched_tokens",
    ("serve", "ubatch"): "vllm.max_num_batched_tokens",
    ("serve", "fit_target"): "vllm.gpu_memory_utilization",
    ("serve", "n_cpu_moe"): "the weights live in VRAM: vllm.tensor_parallel_size",
    ("rpc",): "vLLM's multi-node is Ray, which kimik3 does not deploy",
}


def missing(data: Mapping[str, Any]) -> Iterator[Finding]:
    """What an `engine: llamacpp` profile, as written, leaves out that it must write."""
    if isinstance(data.get("model"), Mapping) and data["model"].get("quant") is None:
        # rule: engine-fields
        # llama.cpp serves one GGUF quant folder of the repo: which one is the user's choice (seed 000's table).
        yield error(
            ("model", "quant"), "is required for engine llamacpp: the GGUF quant folder to serve (e.g. UD-Q2_K_XL)"
        )


def foreign(path: FieldPath, engine: str) -> str:
    """The message for one of llama.cpp's fields written in a profile of `engine` (which refuses it)."""
    instead = _INSTEAD.get(path)
    if instead is not None and engine != "vllm" and instead.startswith("vllm."):
        instead = None
    return f"is llama.cpp's (engine llamacpp); this profile's engine is {engine}" + (
        f": {instead}"
        if instead and not instead.startswith("vllm.")
        else f": use {instead} instead"
        if instead
        else ": remove it"
    )
