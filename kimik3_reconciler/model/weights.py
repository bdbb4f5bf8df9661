"""Whether the served weights are real or random: what `kimik3 verify` may judge in the answers (pure).

kimik3's own tiny GGUFs (the smoke model and the offline demo, engines/llamacpp/smoke_model.py) are random
weights: they answer nonsense, so a check of *what* the model says (did it call the tool, name the
colour, use the tool result) cannot pass or fail on them. They say so themselves: their first shard
carries the GGUF metadata key `kimik3.weights = "random"`. Every other GGUF (Unsloth's quants, a
hand-made REAP slice) is judged as a real model: a missing or unreadable marker never excuses a check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

WEIGHTS_KEY = "kimik3.weights"
RANDOM_WEIGHTS = "random"


@dataclass(frozen=True)
class Weights:
    """`random` decides what verify may assert; `source` says how that was decided (shown in the report)."""

    random: bool
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"random": self.random, "source": self.source}


def weights_of(metadata: dict[str, Any], shard: str) -> Weights:
    """From the first shard's metadata (GGUF's keys, or a safetensors header's `__metadata__`): random only when
    the file says so."""
    kind = "safetensors metadata" if shard.endswith(".safetensors") else f"{_format(shard)} key"
    marker = metadata.get(WEIGHTS_KEY)
    if marker == RANDOM_WEIGHTS:
        return Weights(True, f"{shard}: {kind} {WEIGHTS_KEY} = {RANDOM_WEIGHTS!r} (a kimik3 tiny model)")
    if marker is not None:
        return Weights(False, f"{shard}: {kind} {WEIGHTS_KEY} = {marker!r}: judged as a real model")
    return Weights(False, f"{shard}: no {WEIGHTS_KEY} key: judged as a real model")


def unreadable(shard: str, why: str) -> Weights:
    """The header could not be read: the answers are still judged (a real model must never pass unchecked)."""
    named = f"{_format(shard)} header" if _format(shard) else "header"
    return Weights(False, f"{shard}: {named} not readable ({why}): judged as a real model")


def _format(shard: str) -> str:
    """The shard's format as a message names it, from its suffix: safetensors, GGUF (a format's initials are
    upper case); "" for the checkpoint folder (".")."""
    suffix = PurePosixPath(shard).suffix.lstrip(".")
    return suffix if suffix == "safetensors" else suffix.upper()
