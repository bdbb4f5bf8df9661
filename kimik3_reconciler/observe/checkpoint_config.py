"""A safetensors checkpoint's config.json at the pinned revision, read before any download (from the cache when it
is there, else one ranged read from the hub), for the tensor-parallel check (planning/tensor_parallel.py)."""

from __future__ import annotations

from kimik3_reconciler.errors import DownloadFailed, TransientError
from kimik3_reconciler.model.checkpoint_config import parse_checkpoint_config
from kimik3_reconciler.model.facts import CheckpointConfig, ModelFact
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.observe.model_layout import file_head
from kimik3_reconciler.ports import HubPort

CONFIG = "config.json"
MAX_CONFIG = 4 << 20  # a config is a few KB; a listing that says more is not read


def collect_checkpoint_config(profile: Profile, hub: HubPort, model: ModelFact) -> CheckpointConfig | None:
    """None when it cannot be read (no listing, no config.json, the hub down): the plan then does not judge it."""
    file = next((f for f in model.files if f.path == CONFIG), None)
    if file is None or not 0 < file.size <= MAX_CONFIG:
        return None
    try:
        return parse_checkpoint_config(file_head(profile, hub, model, file, file.size))
    except (DownloadFailed, TransientError, OSError):
        return None
