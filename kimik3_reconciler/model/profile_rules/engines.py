"""What a profile may write for its engine: the sections another engine reads (`image` for llamacpp, `vllm`,
`sglang`), and the fields only another engine reads (the registry's `fields`: llama.cpp's `build`, `model.quant`,
`serve.ubatch`, ... for vllm/sglang, worded by their engine's `profile_fields` module), are refused, naming the engine
and the line; so are the fields the profile's engine requires (its `profile_fields`' `missing`). Checked on the YAML
as written (before the schema fills defaults: a default `build:` is not the user's); model/profile_source.py runs it
beside the schema. The JSON Schema says the same (profile_schema._engine_schema)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Any

from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE, ENGINES, engine_sections
from kimik3_reconciler.model.profile_rules.finding import Finding, error


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
            builders = " and ".join(name for name, entry in ENGINES.items() if entry.image == "build")
            hint = f" ({builders} builds its image from build:)" if section == "image" else ""
            yield error((section,), f"is read by engine {readers} only; this profile's engine is {engine}{hint}")
    if ENGINES[engine].profile_fields:  # what this engine's own profile must write
        yield from import_module(ENGINES[engine].profile_fields).missing(data)
    if ENGINES[engine].image == "build":  # its fields are this engine's own
        return
    for owner, entry in ENGINES.items():
        for path in entry.fields if owner != engine else ():
            if _written(data, path):
                # rule: engine-fields
                # Another engine's knobs mean nothing to this one: accepted and ignored, they would mislead.
                yield error(path, import_module(entry.profile_fields).foreign(path, engine))
    if "image" not in data:
        # rule: engine-fields
        # vLLM and SGLang images are pulled, never built: which one (by digest) is the profile's to say.
        yield error(
            ("image",),
            f"is required for engine {engine}: image.ref, the serving image pinned by digest "
            "(repo:tag@sha256:<64 hex>)",
        )
