"""One quant's files in a fixture hub, as the download tests and benches use them: shards of random bytes (nothing
compresses or dedups them), and the download a first apply runs for them (every file of the quant missing)."""

from __future__ import annotations

import os
from pathlib import Path

from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub
from kimik3_reconciler.model.specs import ModelDownload

QUANT = "Q"


def random_shards(folder: Path, count: int, size: int) -> dict[str, Path]:
    """`count` shards of `size` random bytes under `folder`, by their path in the repo (Q/K3-Q-00001-of-0000N.gguf),
    written 1 MiB at a time."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for i in range(count):
        path = folder / f"K3-Q-{i + 1:05d}-of-{count:05d}.gguf"
        with open(path, "wb") as out:
            for offset in range(0, size, 1 << 20):
                out.write(os.urandom(min(1 << 20, size - offset)))
        files[f"{QUANT}/{path.name}"] = path
    return files


def whole_quant(hub_url: str, repo: str, revision: str, cache: Path, manifest_key: str = "-") -> ModelDownload:
    """The download of every file of the quant from the hub at `hub_url` into `cache`, none there yet."""
    files = tuple(HuggingFaceHub().list_files(repo, revision, [QUANT], hub_url))
    return ModelDownload(
        repo=repo,
        revision=revision,
        quant=QUANT,
        endpoint=hub_url,
        cache_dir=str(cache),
        files=files,
        missing=tuple(f.path for f in files),
        manifest_key=manifest_key,
    )
