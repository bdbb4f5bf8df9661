"""The quant's layout for the placement forecast: the headers of every shard (the engine's reader: llama.cpp's
GGUF), read before any download (a Range request per shard) or from the cache, summarized. Observation only reads the
state record; the model step writes it (a plan never writes state)."""

from __future__ import annotations

from kimik3_reconciler.engines.base import HeaderShort, HeaderUnreadable, ServingEngine
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
    profile: Profile, hub: HubPort, state: StatePort, model: ModelFact, engine: ServingEngine
) -> tuple[ModelLayout | None, bool]:
    """(layout, read from its record). None when it cannot be known (no listing, hub down, a file that is not the
    engine's format, an engine whose weights have no headers to read): the plan then says so."""
    if model.listing_error or not model.files:
        return None, False
    recorded = typed(ModelLayout, state.read(model_layout_key(model)))
    if recorded is not None:  # a record of another shape (torn, edited, another version): the headers are read again
        return recorded, True
    reader = engine.weight_headers  # its parser only where the headers are read (a no-op plan reads the record above)
    if reader is None:
        return None, False
    headers = []
    try:
        for shard in reader.layout_files(model):
            size = min(FIRST_READ, shard.size)
            while True:
                try:
                    headers.append(reader.read(file_head(profile, hub, model, shard, size)))
                    break
                except HeaderShort as more:  # large vocabularies make long headers
                    if size >= shard.size:
                        raise HeaderUnreadable(f"{shard.path}: header longer than the file") from more
                    size = min(more.at_least, shard.size)
    except (DownloadFailed, TransientError, HeaderUnreadable, OSError):
        return None, False
    return reader.layout(headers), False
