"""A profile's pins: the fields that name what is served (the hub revisions, the pulled image), which of them are
unpinned (a branch, a tag) and which hold a made-up value that only looks like a pin. PURE.

`kimik3 pin FILE` resolves the unpinned ones, the way a lock file is written: the commit the hub serves for the
branch now, the digest the registry serves for the tag now. plan and apply refuse an unpinned profile (what they
would serve could change under them); validate refuses a made-up one (it validates, then no hub has it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kimik3_reconciler.model.profile_rules.finding import FieldPath

if TYPE_CHECKING:
    from kimik3_reconciler.model.profile import Profile

_COMMIT = re.compile(r"[0-9a-f]{40}")
_DIGEST = re.compile(r"@sha256:([0-9a-f]{64})$")
# Runs a person types for "some hash": 0123…, fedc…, 1234567890…, and one character repeated.
_RUNS = ("0123456789abcdef" * 6, "fedcba9876543210" * 6, "1234567890" * 8, "0987654321" * 8)


@dataclass(frozen=True)
class Pin:
    """One pinnable field: `kind` hub (a revision of `source`, a hub repo at `endpoint`) or image (`source` is the
    reference itself); `value` as written."""

    field: FieldPath
    kind: Literal["hub", "image"]
    value: str
    source: str
    endpoint: str | None = None

    @property
    def pinned(self) -> bool:
        """A commit (hub) or a digest (image): what it names cannot move."""
        return bool(_COMMIT.fullmatch(self.value)) if self.kind == "hub" else bool(_DIGEST.search(self.value))

    @property
    def name(self) -> str:
        """What a person chose: the branch or tag (hub), the reference without its digest (image)."""
        return self.value if self.kind == "hub" else self.value.split("@", 1)[0]

    @property
    def made_up(self) -> bool:
        """The commit or digest is a placeholder (a run like 0123456789abcdef…, or one character repeated)."""
        if not self.pinned:
            return False
        hexes = self.value if self.kind == "hub" else _DIGEST.search(self.value).group(1)  # type: ignore[union-attr]
        return len(set(hexes)) == 1 or any(hexes in run for run in _RUNS)


def pins(profile: Profile) -> tuple[Pin, ...]:
    """Every pinnable field the profile writes, in the profile's order."""
    model = profile.model
    found = [Pin(("model", "revision"), "hub", model.revision, model.repo, model.endpoint)]
    if model.tokenizer is not None:
        found.append(
            Pin(
                ("model", "tokenizer", "revision"),
                "hub",
                model.tokenizer.revision,
                model.tokenizer.repo,
                model.endpoint,
            )
        )
    if profile.image is not None:
        found.append(Pin(("image", "ref"), "image", profile.image.ref, profile.image.ref))
    return tuple(found)


def unpinned(profile: Profile) -> tuple[Pin, ...]:
    return tuple(pin for pin in pins(profile) if not pin.pinned)


def unpinned_message(pin: Pin, source: str) -> str:
    """What plan, apply and validate say of an unpinned field (`source`: the profile's file, for the command)."""
    what = "branch or tag" if pin.kind == "hub" else "tag without a digest"
    served = "commit the hub" if pin.kind == "hub" else "digest the registry"
    return (
        f"{pin.value!r} is a {what}, not a pin: `kimik3 pin {source}` writes the {served} serves for it now "
        "(plan and apply serve a pinned profile only)"
    )


def made_up_message(pin: Pin, source: str) -> str:
    """What validate and pin say of a placeholder (`source`: the profile's file, for the command)."""
    what = "commit" if pin.kind == "hub" else "digest"
    example = "revision: main" if pin.kind == "hub" else f"ref: {pin.name}"
    return (
        f"{pin.value!r} looks made up (a placeholder, not a real {what}): write the branch or tag ({example}) "
        f"and run `kimik3 pin {source}`, or the real {what}"
    )
