"""The served quant's weights, real or random, read from its first shard's GGUF header in the local cache."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.model.facts import ModelFact
from kimik3_reconciler.model.gguf_header import NeedMoreBytes, NotGguf, parse_gguf_header
from kimik3_reconciler.model.weights import Weights, unreadable, weights_of
from kimik3_reconciler.ports import HubPort

FIRST_READ = 1 << 20
MAX_HEADER = 256 << 20  # K3's ~164k-token vocabulary makes a header of a few MB; nothing real is larger


def served_weights(hub: HubPort, model: ModelFact, shard: str) -> Weights:
    """Weights of `shard` (the file llama-server opens) as the cache (or the local folder) holds it: the container
    mounts that file."""
    cached = (Path(model.host_path(shard)) if model.local_path is not None
              else hub.cached_file(model.repo, model.revision, shard, model.cache_dir))
    if cached is None:
        return unreadable(shard, "not in the cache")
    size = FIRST_READ
    try:
        with open(cached, "rb") as handle:
            while True:
                handle.seek(0)
                data = handle.read(size)
                try:
                    return weights_of(parse_gguf_header(data).metadata, shard)
                except NeedMoreBytes as more:  # large vocabularies make long headers
                    if len(data) < size or more.at_least > MAX_HEADER:
                        return unreadable(shard, "the header is longer than the file")
                    size = more.at_least
    except (NotGguf, OSError) as exc:
        return unreadable(shard, str(exc))
