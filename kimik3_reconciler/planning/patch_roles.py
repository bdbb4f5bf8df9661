"""What the patches in build.patches do, judged by their content (pure): the speculative draft's
recurrent-state rollback patch is recognised by the llama.cpp sources it changes, never by its name.

Seed 000 "Speculative decoding": the DSpark draft pays only when the image carries
kimi-k3-rs-rollback.patch, the bounded recurrent-state rollback for KIMI_K3; without it the host-side
state checkpoint per draft step costs more than the drafts save. That patch is not public, so no
sha256 of it can be recorded here: a file named like it with other content must not pass, and the
real one renamed must not be refused. Its signature is what it must change: llama.cpp's recurrent
state memory (src/llama-memory-recurrent.* — or the hybrid memory that wraps it), adding a rollback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kimik3_reconciler.model.facts import PatchedFile, PatchFact
from kimik3_reconciler.model.profile import Profile

# The sources that hold a recurrent model's per-sequence state in llama.cpp (KIMI_K3's linear-attention
# layers keep theirs there); older trees named it llama-kv-cache-recurrent.
RECURRENT_STATE_SOURCE = re.compile(r"(^|/)src/llama-(memory-recurrent|memory-hybrid|kv-cache-recurrent)\.(cpp|h)$")
ROLLBACK = re.compile(r"roll[ _-]?back", re.IGNORECASE)


@dataclass(frozen=True)
class Recognised:
    """A patch recognised as the rollback patch, and what in its content showed it."""

    patch: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.patch} (recognised by content: {self.evidence})"


def _rollback_hunks(files: tuple[PatchedFile, ...]) -> tuple[PatchedFile, ...]:
    return tuple(f for f in files if RECURRENT_STATE_SOURCE.search(f.path) and any(ROLLBACK.search(a) for a in f.added))


def rollback_patch(patches: tuple[PatchFact, ...]) -> Recognised | None:
    """The first patch that changes llama.cpp's recurrent-state memory and adds a rollback to it."""
    for patch in patches:
        hunks = _rollback_hunks(patch.files)
        if hunks:
            changed = ", ".join(f"{f.path} +{len(f.added)}/-{f.removed}" for f in hunks)
            return Recognised(patch.name, f"adds a rollback to {changed}")
    return None


def rollback_requirement(profile: Profile, patches: tuple[PatchFact, ...]) -> tuple[Recognised | None, str | None]:
    """(the recognised patch, a refusal): a refusal when serve.spec_draft is set and no patch is the rollback."""
    if profile.serve.spec_draft is None:
        return None, None
    found = rollback_patch(patches)
    if found is not None:
        return found, None
    # rule: spec-draft-rollback
    # Seed 000: without the rollback patch the per-draft-step state checkpoint costs more than the drafts save.
    looked = "; ".join(f"{p.name} changes {', '.join(f.path for f in p.files) or 'no file'}" for p in patches)
    return None, ("serve.spec_draft needs the recurrent-state rollback patch (seed 000: kimi-k3-rs-rollback.patch) "
                  "in build.patches: a patch that changes llama.cpp's recurrent-state memory "
                  "(src/llama-memory-recurrent.cpp/.h) adding a rollback; "
                  + (f"none does ({looked})" if patches else "build.patches is empty"))
