"""What a profile may write for its engine: the sections and fields only llama.cpp reads (`build`, `model.quant`,
`serve.ubatch`, ...) are refused for vllm/sglang, and `image`/`vllm`/`sglang` for llamacpp, naming the engine and the
line. Checked on the YAML as written (before the schema fills defaults: a default `build:` is not the user's);
model/profile_source.py runs it beside the schema. The JSON Schema says the same (profile_schema._engine_schema)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE, ENGINES, LLAMACPP_ONLY, engine_sections
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


def _written(data: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    cursor: Any = data
    for key in path:
        if not isinstance(cursor, Mapping) or key not in cursor:
            return False
        cursor = cursor[key]
    return True


def engine_fields(data: Any) -> Iterator[Finding]:
    """Findings on the profile's data as written (the YAML's mapping): fields another engine reads."""
    if not isinstance(data, Mapping):
        return
    engine = data.get("engine", DEFAULT_ENGINE)
    if not isinstance(engine, str) or engine not in ENGINES:
        return  # the schema names the unknown engine
    for section, engines in engine_sections().items():
        if engine not in engines and _written(data, (section,)):
            # rule: engine-fields
            # A section another engine reads would be silently ignored: the user believes it is applied.
            readers = " and ".join(engines)
            hint = " (llamacpp builds its image from build:)" if section == "image" else ""
            yield error((section,), f"is read by engine {readers} only; this profile's engine is {engine}{hint}")
    if ENGINES[engine].image == "build":  # llama.cpp: its fields are this engine's own
        if isinstance(data.get("model"), Mapping) and data["model"].get("quant") is None:
            # rule: engine-fields
            # llama.cpp serves one GGUF quant folder of the repo: which one is the user's choice (seed 000's table).
            yield error(
                ("model", "quant"), "is required for engine llamacpp: the GGUF quant folder to serve (e.g. UD-Q2_K_XL)"
            )
        return
    for path in LLAMACPP_ONLY:
        if _written(data, path):
            # rule: engine-fields
            # llama.cpp's knobs mean nothing to vLLM/SGLang: accepted and ignored, they would mislead.
            instead = _INSTEAD.get(path)
            if instead is not None and engine != "vllm" and instead.startswith("vllm."):
                instead = None
            yield error(
                path,
                f"is llama.cpp's (engine llamacpp); this profile's engine is {engine}"
                + (
                    f": {instead}"
                    if instead and not instead.startswith("vllm.")
                    else f": use {instead} instead"
                    if instead
                    else ": remove it"
                ),
            )
    if "image" not in data:
        # rule: engine-fields
        # vLLM and SGLang images are pulled, never built: which one (by digest) is the profile's to say.
        yield error(
            ("image",),
            f"is required for engine {engine}: image.ref, the serving image pinned by digest "
            "(repo:tag@sha256:<64 hex>)",
        )
