"""Where llama.cpp's speculative draft model runs (serve.spec_draft): the device its --spec-draft-device names."""

from __future__ import annotations

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.profile import Profile, gpus_of


def draft_device(profile: Profile, host_gpus: int | None = None) -> str | None:
    """The draft's device: the GPU holding the target's output.weight, i.e. the last of the layer
    split (seed 000: anywhere else aborts in graph reservation). Containers see their GPUs as
    CUDA0..CUDA(n-1) in `gpus` order; with `gpus: all` the host's GPU count (NVML) says n."""
    draft = profile.serve.spec_draft
    if draft is None or gpus_of(profile) == "none":
        return None
    if draft.device != "auto":
        return draft.device
    # rule: spec-draft-device
    if isinstance(profile.gpus, list):
        return f"CUDA{len(profile.gpus) - 1}"
    if host_gpus:
        return f"CUDA{host_gpus - 1}"
    raise PlanError(
        "serve.spec_draft.device: auto needs the GPU count; with gpus: all list the GPUs or name the "
        "device (CUDA<n>, the last GPU of the split)"
    )
