"""The registry of serving engines: the name a profile gives (`engine:`) -> what kimik3 must know of the engine
before importing it (`EngineEntry`): the package that implements `engines/base.py`'s `ServingEngine` (its
module-level `ENGINE`), the module of its profile rules, how its image is obtained, its own profile sections.
Names only, no import: the profile schema takes its choices and sections from here (model/ is below the engines),
the rules run in the order the entry's module gives, and `engines.engine_for` imports the package when a plan first
needs it. Adding an engine adds one entry here and one folder under engines/ (docs/engines.md); every engine list
(the schema's choices and sections, the rule order, the routes, the import contract) is derived from this one."""

from __future__ import annotations

from typing import Literal, NamedTuple

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


class EngineEntry(NamedTuple):
    """One engine, as the registry names it. `package`: implements ServingEngine as its module-level ENGINE.
    `rules`: the module whose RULES (every rule of model/profile_rules/ its profile meets, in the order they run)
    check its profile. `image`: `build` reads llama.cpp's fields (build:, model.quant, serve.ubatch, ...:
    LLAMACPP_ONLY), `pull` refuses them and requires `image:` (by digest). `sections`: the top-level profile
    sections only this engine reads (their schema classes are model/profile_schema.py's); `required`: those a
    profile must write (no default recipe), the others default to their fields' defaults."""

    package: str
    rules: str
    image: Literal["build", "pull"]
    sections: tuple[str, ...] = ()
    required: tuple[str, ...] = ()


_ENGINES = "kimik3_reconciler.engines"
_RULES = "kimik3_reconciler.model.profile_rules"
ENGINES: dict[str, EngineEntry] = {
    "llamacpp": EngineEntry(f"{_ENGINES}.llamacpp", rules=f"{_ENGINES}.llamacpp.rules.order", image="build"),
    "vllm": EngineEntry(f"{_ENGINES}.vllm", rules=f"{_RULES}.vllm", image="pull", sections=("vllm",)),
    "sglang": EngineEntry(
        f"{_ENGINES}.sglang", rules=f"{_RULES}.sglang", image="pull", sections=("sglang",), required=("sglang",)
    ),
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
    ("serve", "slot_save"),
    ("serve", "spec_draft"),
    ("serve", "load_mode"),
)


def engine_sections() -> dict[str, tuple[str, ...]]:
    """Top-level section -> the engines that read it: `image` for every engine that pulls its image, then each
    engine's own sections (read when asked: a registered engine counts from then on)."""
    sections: dict[str, tuple[str, ...]] = {"image": tuple(n for n, e in ENGINES.items() if e.image == "pull")}
    for name, entry in ENGINES.items():
        for section in entry.sections:
            sections[section] = (*sections.get(section, ()), name)
    return sections
