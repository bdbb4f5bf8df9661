"""One builder of `Observed` values for planner tests: what the collectors would report for a profile
on a plain 8-core host with its model complete in the cache. Every part can be replaced:

    observed(profile)                                     # the profile's quant, two 1 GiB shards, complete
    observed(profile, host=H200, layout=LAYOUT)           # any other Observed field, by keyword
    observed(profile, model=model_fact(profile, missing=(...)), container=...)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimik3_reconciler.model.facts import HostFacts, LocalInputs, ModelFact, Observed, PatchFact, RemoteFile
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.observe.local_inputs import builtin_patch_facts

GIB = 1 << 30
REPO = "unsloth/Kimi-K3-GGUF"
REVISION = "0123456789abcdef0123456789abcdef01234567"
QUANT = "UD-Q2_K_XL"
CACHE_DIR = "/var/lib/kimik3/hub"
HOST = HostFacts(physical_cores=8)


def shard_files(quant: str = QUANT, count: int = 2, size: int = GIB, stem: str = "Kimi-K3") -> tuple[RemoteFile, ...]:
    """`count` shards of `size` bytes named as llama-gguf-split names them; shard i's sha256 is "i" * 64."""
    return tuple(
        RemoteFile(path=f"{quant}/{stem}-{quant}-{i:05d}-of-{count:05d}.gguf", size=size, sha256=str(i) * 64)
        for i in range(1, count + 1)
    )


def model_fact(
    profile: Profile | None = None, *, shards: int = 2, size: int = GIB, stem: str = "Kimi-K3", **changes: Any
) -> ModelFact:
    """The profile's repo@revision and quant (without a profile: unsloth/Kimi-K3-GGUF UD-Q2_K_XL at
    REVISION), `shard_files(quant, shards, size, stem)`, all in the cache; `changes` replace any field."""
    quant = changes.get("quant") or (profile.model.quant if profile else QUANT)
    fields: dict[str, Any] = {
        "repo": profile.model.repo if profile else REPO,
        "revision": profile.model.revision if profile else REVISION,
        "quant": quant,
        "cache_dir": CACHE_DIR,
        "files": shard_files(quant, shards, size, stem),
    }
    return ModelFact(**{**fields, **changes})


def local_inputs(profile: Profile | None = None, **changes: Any) -> LocalInputs:
    """The packaged Dockerfile (a fake sha256) and, with a profile, the local files it names as a test
    host resolves them: kimik3's own patches (real files), patches under /profiles/, the archive, the API key file and the draft model as
    written; `changes` replace any field."""
    fields: dict[str, Any] = {"dockerfile_path": "/pkg/Dockerfile.llamacpp", "dockerfile_sha256": "d" * 64}
    if profile is not None:
        fields.update(
            patches=tuple(
                PatchFact(name=Path(p).name, path=f"/profiles/{p}", sha256="e" * 64) for p in profile.build.patches
            ),
            builtin_patches=builtin_patch_facts(profile),  # the real files: their bytes are in the fingerprint
            archive_location="/archives/src.tar.gz" if profile.build.archive else None,
            archive_sha256="a" * 64 if profile.build.archive else None,
            api_key_file=profile.serve.api_key_file,
            draft_model=profile.serve.spec_draft.model if profile.serve.spec_draft else None,
        )
    return LocalInputs(**{**fields, **changes})


def observed(
    profile: Profile | None = None,
    *,
    host: HostFacts = HOST,
    inputs: LocalInputs | None = None,
    model: ModelFact | None = None,
    **updates: Any,
) -> Observed:
    """Observed state for `profile`: `host` (8 physical cores, nothing else known), `local_inputs(profile)`,
    `model_fact(profile)` and no image, container or unit; `updates` set any other Observed field
    (tokenizer, layout, images, container, systemd, ...)."""
    return Observed(
        host=host,
        inputs=inputs if inputs is not None else local_inputs(profile),
        model=model if model is not None else model_fact(profile),
        **updates,
    )
