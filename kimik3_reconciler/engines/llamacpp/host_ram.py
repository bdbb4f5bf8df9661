"""What llama-server keeps in host RAM beside the weights: the prompt cache and the slots' context checkpoints.

- The prompt cache (`--cache-ram` MiB, serve.cache_ram, else 8192 in b11434): conversations saved from slots,
  each with its own checkpoints, counted inside that limit (server_prompt_cache_state::size).
- The context checkpoints of the live slots, outside that limit: for a model whose memory cannot be cut back to
  a shorter prompt (recurrent or hybrid, or SWA), llama-server copies each slot's non-rollbackable state into a
  checkpoint, on the host, at the end of a prompt and at user turns (server-context.cpp create_checkpoint), up to
  `--ctx-checkpoints` a slot (32 by default; the oldest is erased past it). So a busy host holds, at worst,
  serve.parallel x checkpoints x one sequence's recurrent state. On Kimi-K3 that state is its KDA layers'
  (recurrent_state.py): ~148 MiB a copy with the assumed shape, 37 GiB for 8 slots of 32.
Pure; the sizing gate (memory_gate.py) and the placement forecast's lines read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimik3_reconciler.engines.llamacpp.recurrent_state import KIMI_K3_ASSUMED, KIMI_K3_ASSUMED_SOURCE
from kimik3_reconciler.engines.llamacpp.routes import GGUF_REPO
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile

MIB = 1 << 20
# llama-server's spellings of the count (common/arg.cpp) and its environment variable (the command line wins).
CTX_CHECKPOINTS_FLAGS = ("--ctx-checkpoints", "-ctxcp", "--swa-checkpoints")
CTX_CHECKPOINTS_ENV = "LLAMA_ARG_CTX_CHECKPOINTS"


def prompt_cache_bytes(profile: Profile) -> int:
    """The host RAM llama-server's prompt cache may fill: serve.cache_ram, else its default (8192 MiB)."""
    mib = profile.serve.cache_ram if profile.serve.cache_ram is not None else catalog.CACHE_RAM_DEFAULT_MIB
    return mib * MIB


def prompt_cache_words(cache: int) -> str:
    return (
        f"the prompt cache {gib(cache)} (serve.cache_ram; llama-server's default {catalog.CACHE_RAM_DEFAULT_MIB} MiB)"
    )


def _count(value: str) -> int | None:
    try:
        return max(0, int(value))
    except ValueError:
        return None  # llama-server refuses it at start; the default is the honest guess meanwhile


def ctx_checkpoints(profile: Profile) -> tuple[int, str]:
    """(checkpoints a slot keeps at most, where the number comes from): the last `--ctx-checkpoints N` (or
    `-ctxcp N`, `--flag=N`) of serve.extra_args, else serve.env's LLAMA_ARG_CTX_CHECKPOINTS, else the default."""
    args, found = profile.serve.extra_args, None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in CTX_CHECKPOINTS_FLAGS and (eq or i + 1 < len(args)):
            count = _count(value if eq else args[i + 1])
            found = (count, f"{name} in serve.extra_args") if count is not None else found
    if found is not None:
        return found
    env = profile.serve.env.get(CTX_CHECKPOINTS_ENV)
    count = _count(env) if env is not None else None
    if count is not None:
        return count, f"serve.env {CTX_CHECKPOINTS_ENV}"
    return catalog.CTX_CHECKPOINTS_DEFAULT, "llama-server's default --ctx-checkpoints"


@dataclass(frozen=True)
class CheckpointMemory:
    """The live slots' context checkpoints at their most: slots x checkpoints a slot x one sequence's state."""

    slots: int
    per_slot: int
    per_slot_source: str
    state_bytes: int  # one checkpoint: a sequence's recurrent state
    state_source: str

    @property
    def total(self) -> int:
        return self.slots * self.per_slot * self.state_bytes

    def words(self) -> str:
        if not self.state_bytes:
            return f"the context checkpoints 0 B ({self.state_source})"
        return (
            f"the slots' context checkpoints {gib(self.total)} (serve.parallel {self.slots} x {self.per_slot} "
            f"({self.per_slot_source}) x {gib(self.state_bytes)} of recurrent state, {self.state_source})"
        )


def checkpoint_memory(profile: Profile, observed: Observed) -> CheckpointMemory:
    """The checkpoints' host RAM for this profile: the state from the GGUF headers; before they are read, Kimi-K3's
    assumed one for unsloth's Kimi-K3 repo, none for another model (its shape is unknown: the demo's tiny model)."""
    count, source = ctx_checkpoints(profile)
    layout = observed.layout
    if layout is not None:
        state = layout.state_bytes_per_slot
        state_source = "from the GGUF headers" if state else "the GGUF headers list no recurrent layers"
    elif profile.model.repo == GGUF_REPO and profile.model.local_path is None:
        state, state_source = KIMI_K3_ASSUMED.state_bytes, KIMI_K3_ASSUMED_SOURCE
    else:
        state, state_source = 0, "not known until the GGUF headers are read"
    return CheckpointMemory(profile.serve.parallel, count, source, state, state_source)


def ram_lines(profile: Profile, observed: Observed) -> tuple[str, ...]:
    """The plan's lines for the host RAM beside the weights (the sizing gate counts both)."""
    return (
        f"host RAM: {prompt_cache_words(prompt_cache_bytes(profile))}",
        f"host RAM: {checkpoint_memory(profile, observed).words()}",
    )
