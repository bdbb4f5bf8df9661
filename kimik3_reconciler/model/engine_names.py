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
# What `kimik3 routes` lists as the route each of those names means (never offered: NOT_ENGINES says why).
NOT_ENGINE_ROUTES: dict[str, str] = {"ollama": "hf.co/unsloth/Kimi-K3-GGUF:<quant>"}

DEFAULT_ENGINE = "llamacpp"


class EngineEntry(NamedTuple):
    """One engine, as the registry names it. `package`: implements ServingEngine as its module-level ENGINE.
    `rules`: the module whose RULES (every rule of model/profile_rules/ its profile meets, in the order they run)
    check its profile. `image`: `build` reads llama.cpp's fields (build:, model.quant, serve.ubatch, ...:
    LLAMACPP_ONLY), `pull` refuses them and requires `image:` (by digest). `sections`: the top-level profile
    sections only this engine reads (their schema classes are model/profile_schema.py's); `required`: those a
    profile must write (no default recipe), the others default to their fields' defaults. `rulebook`: the module
    whose RULEBOOK holds its rules' entries in the rulebook (model/rulebook.py; `kimik3 explain`), none when empty.
    `fields`: the profile's fields only this engine reads (the others refuse them, written: `own_fields`), worded
    by its `profile_fields` module (`foreign(path, engine)`; `missing(data)`: what its own profile must write).
    `server_env`: the module whose `env_finding(key)` judges a serve.env variable its server reads as an option (the
    secrets rule asks every engine's); `secret_env`: the variables its server takes a secret from (starred in
    kimik3's own crash output, refused in serve.env). `pins`: for an engine that builds its image, the module whose
    `pin_for(source)` gives each `build.source`'s pinned commit (model/pins.py SourcePin; BuildSpec.pin loads it)."""

    package: str
    rules: str
    image: Literal["build", "pull"]
    sections: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    rulebook: str = ""
    fields: tuple[tuple[str, ...], ...] = ()
    profile_fields: str = ""
    server_env: str = ""
    secret_env: tuple[str, ...] = ()
    pins: str = ""


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

_ENGINES = "kimik3_reconciler.engines"
_LLAMACPP = f"{_ENGINES}.llamacpp"
ENGINES: dict[str, EngineEntry] = {
    "llamacpp": EngineEntry(
        _LLAMACPP,
        rules=f"{_LLAMACPP}.rules.order",
        image="build",
        rulebook=f"{_LLAMACPP}.rulebook",
        fields=LLAMACPP_ONLY,
        profile_fields=f"{_LLAMACPP}.rules.fields",
        server_env=f"{_LLAMACPP}.rules.server_args",
        secret_env=("LLAMA_API_KEY",),
        pins=f"{_LLAMACPP}.pins",
    ),
    "vllm": EngineEntry(
        f"{_ENGINES}.vllm",
        rules=f"{_ENGINES}.vllm.rules",
        image="pull",
        sections=("vllm",),
    ),
    "sglang": EngineEntry(
        f"{_ENGINES}.sglang",
        rules=f"{_ENGINES}.sglang.rules",
        image="pull",
        sections=("sglang",),
        required=("sglang",),
    ),
}


def engine_sections() -> dict[str, tuple[str, ...]]:
    """Top-level section -> the engines that read it: `image` for every engine that pulls its image, then each
    engine's own sections (read when asked: a registered engine counts from then on)."""
    sections: dict[str, tuple[str, ...]] = {"image": tuple(n for n, e in ENGINES.items() if e.image == "pull")}
    for name, entry in ENGINES.items():
        for section in entry.sections:
            sections[section] = (*sections.get(section, ()), name)
    return sections


def own_fields(but: str = "") -> tuple[tuple[str, ...], ...]:
    """The fields only one engine reads (each entry's `fields`, in registry order), leaving out engine `but`'s own:
    what a profile of engine `but` must not write."""
    return tuple(path for name, entry in ENGINES.items() if name != but for path in entry.fields)


def builder() -> EngineEntry:
    """The engine whose image kimik3 builds (the profile's `build:` section is its)."""
    return next(entry for entry in ENGINES.values() if entry.image == "build")
