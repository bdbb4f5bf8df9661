"""Tensor parallelism against the checkpoint and the GPUs, for the engines that split the checkpoint over ranks
(vLLM, SGLang): a size that does not divide the attention heads (config.json at the pinned revision) is refused
before any pull or download; a size that leaves GPUs the container is given idle is warned. Pure."""

from __future__ import annotations

from kimik3_reconciler.engines.base import HostNeeds
from kimik3_reconciler.errors import FieldRefusal
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile

# Flags in serve.extra_args that put more ranks beside the tensor-parallel ones (vLLM 0.32's arg_utils.py, SGLang
# 0.5.23's server_args.py): with them the engine uses tp x pp x dp GPUs, which kimik3 does not compute.
_MORE_RANKS = frozenset(
    (
        "--pipeline-parallel-size",
        "-pp",
        "--pp-size",
        "--data-parallel-size",
        "-dp",
        "--dp-size",
        "--data-parallel-size-local",
        "-dpl",
    )
)


def tensor_parallel_findings(profile: Profile, observed: Observed, needs: HostNeeds) -> tuple[list[str], list[str]]:
    """(refusals, warnings); `needs.gpus` is the engine's tensor-parallel size, `needs.gpus_field` its field."""
    size, field = needs.gpus, needs.gpus_field
    refusals: list[str] = []
    config = observed.checkpoint_config
    if config is not None and config.attention_heads % size:
        heads = config.attention_heads
        fits = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0 and d <= max(size, 8))
        # rule: tensor-parallel-heads
        # Each rank takes an equal share of the heads: vLLM refuses at start ("Total number of attention heads (H)
        # must be divisible by tensor parallel size (N)"), after the image pull and the checkpoint's download.
        refusals.append(
            FieldRefusal(
                tuple(field.split(".")),
                f"{field} {size} does not divide the checkpoint's "
                f"{heads} attention heads ({config.heads_key} in config.json at "
                f"{profile.model.revision[:12]}): every rank takes an equal share of them; "
                f"use one of {fits}",
            )
        )
    warnings = []
    given = _given(profile, observed)
    # Pipeline or data parallelism in extra_args uses GPUs beyond `size`: "the rest stay idle" would be false.
    more_ranks = any(arg.split("=", 1)[0] in _MORE_RANKS for arg in profile.serve.extra_args)
    if given is not None and given > size * needs.pipeline // needs.hosts and not more_ranks:
        # rule: tensor-parallel-idle-gpus
        # The container is given every listed GPU (and holds it from other jobs); the engine uses `size` of them.
        warnings.append(
            f"{field} {size} uses {size} of the {given} GPUs the profile gives the container "
            f"(gpus: {profile.gpus if isinstance(profile.gpus, str) else list(profile.gpus)}): the other "
            f"{given - size} stay idle and held from other jobs; list {size} GPU(s) in gpus, or raise "
            f"{field}"
        )
    return refusals, warnings


def _given(profile: Profile, observed: Observed) -> int | None:
    """How many GPUs the container gets: the list's length, or the host's count for `all` (None: not observed)."""
    if isinstance(profile.gpus, list):
        return len(profile.gpus)
    if profile.gpus == "all" and observed.host.gpu_probe == "ok":
        return len(observed.host.gpus)
    return None
