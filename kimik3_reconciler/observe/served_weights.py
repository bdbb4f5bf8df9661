"""The served weights, real or random, read from the local cache: the header of the first shard of a quant in the
engine's own format (its reader: llama.cpp's GGUF), or a safetensors checkpoint's first shard's JSON header (its `__metadata__`, where kimik3's tiny checkpoint says
`kimik3.weights: random`)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from kimik3_reconciler.engines.base import HeaderShort, HeaderUnreadable, WeightHeaders
from kimik3_reconciler.model.facts import ModelFact
from kimik3_reconciler.model.weights import Weights, unreadable, weights_of
from kimik3_reconciler.ports import HubPort

FIRST_READ = 1 << 20
MAX_HEADER = 256 << 20  # K3's ~164k-token vocabulary makes a header of a few MB; nothing real is larger


def served_weights(hub: HubPort, model: ModelFact, shard: str, reader: WeightHeaders | None) -> Weights:
    """Weights of `shard` (the file the server opens; `reader`: the engine's header reader) as the cache (or the local
    folder) holds it: the container mounts that file. A checkpoint folder (".": vLLM opens the snapshot) is judged by
    its first safetensors shard."""
    if shard == "." or reader is None:
        return _checkpoint_weights(hub, model)
    cached = (
        Path(model.host_path(shard))
        if model.local_path is not None
        else hub.cached_file(model.repo, model.revision, shard, model.cache_dir)
    )
    if cached is None:
        return unreadable(shard, "not in the cache")
    size = FIRST_READ
    try:
        with open(cached, "rb") as handle:
            while True:
                handle.seek(0)
                data = handle.read(size)
                try:
                    return weights_of(reader.metadata(reader.read(data)), shard)
                except HeaderShort as more:  # large vocabularies make long headers
                    if len(data) < size or more.at_least > MAX_HEADER:
                        return unreadable(shard, "the header is longer than the file")
                    size = more.at_least
    except (HeaderUnreadable, OSError) as exc:
        return unreadable(shard, str(exc))


def _checkpoint_weights(hub: HubPort, model: ModelFact) -> Weights:
    shards = sorted(f.path for f in model.files if f.path.endswith(".safetensors"))
    if not shards:
        return unreadable(".", "no safetensors shard in the checkpoint")
    shard = shards[0]
    cached = hub.cached_file(model.repo, model.revision, shard, model.cache_dir)
    if cached is None:
        return unreadable(shard, "not in the cache")
    try:
        with open(cached, "rb") as handle:
            # safetensors: an 8-byte little-endian header length, then the JSON header
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > MAX_HEADER:
                return unreadable(shard, f"a safetensors header of {length} bytes")
            header = json.loads(handle.read(length))
    except (OSError, struct.error, ValueError) as exc:
        return unreadable(shard, f"not a safetensors file ({exc})")
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    return weights_of(metadata if isinstance(metadata, dict) else {}, shard)
