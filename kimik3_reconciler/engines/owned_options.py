"""The options an engine's launch renders itself, given again in the profile's serve.extra_args or serve.env: where
each stands and what to write instead. Shared by the vLLM and SGLang rules (engines/<name>/rules.py), which turn each
into their own rule's refusal."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.model.profile import ServeSpec
from kimik3_reconciler.model.profile_rules.finding import FieldPath

# What a checkpoint engine's options that kimik3 renders from the same profile fields say instead: the checkpoint's
# flags (each engine names its own), where it listens, and the Hub's offline switch (the container gets no token).
CHECKPOINT = "use model.repo / model.revision (kimik3 downloads and verifies the checkpoint and mounts it)"
ADDRESS: tuple[tuple[tuple[str, ...], str], ...] = ((("--host",), "use serve.host"), (("--port",), "use serve.port"))
OFFLINE_ENV = {"HF_HUB_OFFLINE": "kimik3 sets it: the container reads the mounted checkpoint, never the Hub"}


def by_flag(table: tuple[tuple[tuple[str, ...], str], ...]) -> dict[str, str]:
    """A table of (flags, what to write instead) as flag -> what to write instead."""
    return {flag: instead for flags, instead in table for flag in flags}


def owned_options(
    serve: ServeSpec, engine: str, flags: dict[str, str], env: dict[str, str]
) -> Iterator[tuple[FieldPath, str]]:
    """(the field's path, the message) for each flag of `flags` in serve.extra_args (as `--flag` or `--flag=value`)
    and each variable of `env` (upper-case names) in serve.env; both map an option to what to write instead."""
    for i, arg in enumerate(serve.extra_args):
        flag = arg.split("=", 1)[0]
        if flag in flags:
            yield ("serve", "extra_args", i), f"{flag} is rendered by kimik3 for engine {engine}: {flags[flag]}"
    for key in serve.env:
        if key.upper() in env:
            yield ("serve", "env", key), f"{key} is set by kimik3 for engine {engine}: {env[key.upper()]}"
