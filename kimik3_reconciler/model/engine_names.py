"""The registry of serving engines: the name a profile gives (`engine:`) -> the package that implements
`engines/base.py`'s `ServingEngine` (its module-level `ENGINE`). Names only, no import: the profile schema
takes its choices from here (model/ is below the engines), and `engines.engine_for` imports the package when
a plan first needs it. Adding an engine adds one entry here and one folder under engines/ (docs/design.md)."""

from __future__ import annotations

# Names people give that kimik3 deliberately does not deploy, with why and what to write instead (the schema refuses
# them with this text; `kimik3 routes` shows it).
NOT_ENGINES: dict[str, str] = {
    # Seed 001: Ollama is "a convenience layer for the same GGUF path, not a fourth independent self-hosting method",
    # and it "does not change K3's memory needs"; it exposes no --n-cpu-moe/--override-tensor, the expert split seed
    # 000's hybrid needs. No Ollama binary is reachable from kimik3's test machines: nothing about it is tested.
    "ollama": "is not a kimik3 engine: Ollama is a wrapper over the same GGUF path (seed 001) and gives no "
    "--n-cpu-moe/--override-tensor control, which the hybrid expert split needs (seed 000); serve the "
    "same quant with engine: llamacpp (model.repo unsloth/Kimi-K3-GGUF, model.quant as in "
    "hf.co/unsloth/Kimi-K3-GGUF:<quant>)",
}

DEFAULT_ENGINE = "llamacpp"

ENGINES: dict[str, str] = {
    "llamacpp": "kimik3_reconciler.engines.llamacpp",
    "vllm": "kimik3_reconciler.engines.vllm",
    "sglang": "kimik3_reconciler.engines.sglang",
}

# The sections and fields only one kind of engine reads (model/profile_rules/engines.py refuses them, written, for
# the others; the JSON Schema says the same: profile_schema._engine_schema; a vllm container's `kimik3.inputs`
# label leaves llama.cpp's serve fields out: model/launch_input.py).
LLAMACPP_ONLY: tuple[tuple[str, ...], ...] = (
    ("build",),
    ("rpc",),
    ("model", "quant"),
    ("model", "mmproj"),
    ("model", "tokenizer"),
    ("model", "local_path"),
    ("gate", "quant"),
    ("gate", "smoke"),
    ("serve", "batch"),
    ("serve", "ubatch"),
    ("serve", "fit_target"),
    ("serve", "n_cpu_moe"),
    ("serve", "ctx_size"),
    ("serve", "parallel"),
    ("serve", "cache_ram"),
    ("serve", "spec_draft"),
    ("serve", "load_mode"),
)
ENGINE_SECTIONS: dict[str, tuple[str, ...]] = {"image": ("vllm", "sglang"), "vllm": ("vllm",), "sglang": ("sglang",)}
