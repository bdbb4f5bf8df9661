"""The registry of serving engines: the name a profile gives (`engine:`) -> the package that implements
`engines/base.py`'s `ServingEngine` (its module-level `ENGINE`). Names only, no import: the profile schema
takes its choices from here (model/ is below the engines), and `engines.engine_for` imports the package when
a plan first needs it. Adding an engine adds one entry here and one folder under engines/ (docs/design.md)."""

from __future__ import annotations

DEFAULT_ENGINE = "llamacpp"

ENGINES: dict[str, str] = {
    "llamacpp": "kimik3_reconciler.engines.llamacpp",
    "vllm": "kimik3_reconciler.engines.vllm",
}

# The sections and fields only one kind of engine reads (model/profile_rules/engines.py refuses them, written, for
# the others; the JSON Schema says the same: profile_schema._engine_schema; a vllm container's `kimik3.inputs`
# label leaves llama.cpp's serve fields out: model/launch_input.py).
LLAMACPP_ONLY: tuple[tuple[str, ...], ...] = (
    ("build",), ("rpc",), ("model", "quant"), ("model", "mmproj"), ("model", "tokenizer"), ("gate", "quant"),
    ("gate", "smoke"), ("serve", "batch"), ("serve", "ubatch"), ("serve", "fit_target"), ("serve", "n_cpu_moe"),
    ("serve", "ctx_size"), ("serve", "parallel"), ("serve", "cache_ram"), ("serve", "spec_draft"),
    ("serve", "load_mode"))
ENGINE_SECTIONS: dict[str, tuple[str, ...]] = {"image": ("vllm", "sglang"), "vllm": ("vllm",), "sglang": ("sglang",)}
