"""The quant's layout for the placement forecast: GGUF headers of every shard, read before any
download (a Range request per shard) or from the cache, summarized. Observation only reads the
state record; the model step writes it (a plan never writes state)."""

from __future__ import annotations

from kimik3_reconciler.errors import DownloadFailed, TransientError
from kimik3_reconciler.model.facts import ModelFact, ModelLayout, RemoteFile
from kimik3_reconciler.model.model_files import model_layout_key
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.record_shape import typed
from kimik3_reconciler.ports import HubPort, StatePort

FIRST_READ = 1 << 20


def file_head(profile: Profile, hub: HubPort, model: ModelFact, file: RemoteFile, nbytes: int) -> bytes:
    """The first `nbytes` of one of the model's files: the local file, the cache, else a ranged read from the hub."""
    if model.local_path is not None:  # a local model: its own file
        with open(model.host_path(file.path), "rb") as f:
            return f.read(nbytes)
    cached = hub.cached_file(model.repo, model.revision, file.path, model.cache_dir)
    if cached is None and file.path in model.in_blobs:  # unlinked, but its bytes are here: no hub request
        cached = hub.cached_blob(model.repo, file, model.cache_dir)
    if cached is not None:
        with open(cached, "rb") as f:
            return f.read(nbytes)
    return hub.read_head(model.repo, model.revision, file.path, profile.model.endpoint, nbytes)


def collect_layout(
    profile: Profile, hub: HubPort, state: StatePort, model: ModelFact
) -> tuple[ModelLayout | None, bool]:
    """(layout, read from its record). None when it cannot be known (no listing, hub down, not a GGUF):
    the plan then says so."""
    if model.listing_error or not model.files:
        return None, False
    recorded = typed(ModelLayout, state.read(model_layout_key(model)))
    if recorded is not None:  # a record of another shape (torn, edited, another version): the headers are read again
        return recorded, True
    # The GGUF parser only where the headers are read (a no-op plan reads the record above).
    from kimik3_reconciler.engines.llamacpp.gguf_header import NeedMoreBytes, NotGguf, parse_gguf_header, summarize

    shards = [f for f in model.files if f.path.startswith(model.quant + "/") and f.path.endswith(".gguf")]
    headers = []
    try:
        for shard in shards:
            size = min(FIRST_READ, shard.size)
            while True:
                try:
                    headers.append(parse_gguf_header(file_head(profile, hub, model, shard, size)))
                    break
                except NeedMoreBytes as more:  # large vocabularies make long headers
                    if size >= shard.size:
                        raise NotGguf(f"{shard.path}: header longer than the file") from more
                    size = min(more.at_least, shard.size)
    except (DownloadFailed, TransientError, NotGguf, OSError):
        return None, False
    return summarize(headers), False
