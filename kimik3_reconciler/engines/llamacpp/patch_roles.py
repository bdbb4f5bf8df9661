"""What the patches in build.patches do, judged by their content (pure): the speculative draft's
recurrent-state rollback patch is recognised by the llama.cpp sources it changes, never by its name.

Seed 000 "Speculative decoding": the DSpark draft pays only when the image carries
kimi-k3-rs-rollback.patch, the bounded recurrent-state rollback for KIMI_K3; without it the host-side
state checkpoint per draft step costs more than the drafts save. That patch is not public, so no
sha256 of it can be recorded here: a file named like it with other content must not pass, and the
real one renamed must not be refused. Its signature is what it must change: llama.cpp's recurrent
state memory (src/llama-memory-recurrent.* — or the hybrid memory that wraps it), adding rollback code:
an added line whose code (comments and strings stripped) names an identifier with "rollback" in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kimik3_reconciler.model.facts import PatchedFile, PatchFact
from kimik3_reconciler.model.profile import Profile

# The sources that hold a recurrent model's per-sequence state in llama.cpp (KIMI_K3's linear-attention
# layers keep theirs there); older trees named it llama-kv-cache-recurrent.
RECURRENT_STATE_SOURCE = re.compile(r"(^|/)src/llama-(memory-recurrent|memory-hybrid|kv-cache-recurrent)\.(cpp|h)$")
# Code that names a rollback: an identifier (function, member, variable) with "rollback" in it. Comments and
# string literals do not count: "// TODO: rollback someday" changes nothing a draft step could use.
ROLLBACK_IDENTIFIER = re.compile(r"\b[A-Za-z_0-9]*roll_?back[A-Za-z_0-9]*\b", re.IGNORECASE)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|' + r"'(?:\\.|[^'\\])*'")
_BLOCK_COMMENT = re.compile(r"/\*.*?(\*/|$)")


@dataclass(frozen=True)
class Recognised:
    """A patch recognised as the rollback patch, and what in its content showed it."""

    patch: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.patch} (recognised by content: {self.evidence})"


def code_of(line: str) -> str:
    """An added C/C++ line without its string literals and comments (a line inside a block comment, which
    starts with `*`, is all comment)."""
    code = _STRING.sub('""', line)
    if code.lstrip().startswith("*"):
        return ""
    return _BLOCK_COMMENT.sub(" ", code).split("//", 1)[0]


def rollback_code(file: PatchedFile) -> tuple[str, ...]:
    """The rollback identifiers the file's added code (not its comments) names, in order, once each."""
    found = (m.group(0) for line in file.added for m in ROLLBACK_IDENTIFIER.finditer(code_of(line)))
    return tuple(dict.fromkeys(found))


def rollback_patch(patches: tuple[PatchFact, ...]) -> Recognised | None:
    """The first patch that changes llama.cpp's recurrent-state memory and adds rollback code to it."""
    for patch in patches:
        hunks = [(f, rollback_code(f)) for f in patch.files if RECURRENT_STATE_SOURCE.search(f.path)]
        hunks = [(f, names) for f, names in hunks if names]
        if hunks:
            names = ", ".join(dict.fromkeys(n for _, found in hunks for n in found))
            changed = ", ".join(f"{f.path} +{len(f.added)}/-{f.removed}" for f, _ in hunks)
            return Recognised(patch.name, f"adds rollback code ({names}) to {changed}")
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
    looked = "; ".join(
        f"{p.name} changes {', '.join(f.path for f in p.files) or 'no file'}{_only_said(p)}" for p in patches
    )
    return None, (
        "serve.spec_draft needs the recurrent-state rollback patch (seed 000: kimi-k3-rs-rollback.patch) "
        "in build.patches: a patch that changes llama.cpp's recurrent-state memory "
        "(src/llama-memory-recurrent.cpp/.h) adding rollback code (a function, member or call named "
        "*rollback*; comments do not count); " + (f"none does ({looked})" if patches else "build.patches is empty")
    )


def _only_said(patch: PatchFact) -> str:
    """Say so when the recurrent-state memory's added lines mention a rollback in comments or strings only."""
    said = any(
        ROLLBACK_IDENTIFIER.search(line)
        for f in patch.files
        if RECURRENT_STATE_SOURCE.search(f.path)
        for line in f.added
    )
    return " (rollback only in comments or strings there, no code)" if said else ""
