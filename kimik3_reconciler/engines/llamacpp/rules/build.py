"""Rules about the image: vision only in the fork, variant against gpus, a pinned archive, kimik3's
built-in patches."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.model.builtin_patches import BUILTIN_PATCHES, builtin_patch, builtin_patches_for
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import Finding, error, warning


def vision(p: Profile) -> Iterator[Finding]:
    if p.model.mmproj is not None and p.build.source == "mainline":
        # rule: mmproj-fork-only
        # Seed 000: vision lives only in the fork; mainline errors on --mmproj or silently ignores it.
        yield error(
            ("model", "mmproj"),
            "mainline has no vision (MoonViT-3d is only in the fork): drop mmproj or use build.source: fork",
        )


def variant(p: Profile) -> Iterator[Finding]:
    if p.build.variant == "cpu" and p.gpus != "none":
        # rule: variant-gpus
        # design.md: the CPU variant is built without CUDA, so it cannot use a GPU.
        yield error(("build", "variant"), "cpu images have no CUDA kernels: set gpus: none")
    elif p.build.variant == "cuda" and p.gpus == "none":
        # rule: variant-gpus
        # design.md: gpus: none exists for the CPU variant only.
        yield error(("gpus",), "none needs build.variant: cpu")


def archive(p: Profile) -> Iterator[Finding]:
    archive = p.build.archive
    if archive and archive.startswith(("http://", "https://")) and p.build.archive_sha256 is None:
        # rule: archive-pinned
        # Seed 000: a pinned build, not a moving one; a URL's content can change under the same name.
        yield warning(("build", "archive"), "a downloaded archive without build.archive_sha256 is not pinned")


def builtin_patches(p: Profile) -> Iterator[Finding]:
    for i, name in enumerate(p.build.builtin_patches or ()):
        patch = builtin_patch(name)
        if patch is None:
            # rule: builtin-patch-names
            # A name kimik3 does not carry would build the image without what the profile asks for.
            known = ", ".join(b.name for b in BUILTIN_PATCHES)
            yield error(("build", "builtin_patches", i), f"{name!r} is not one of kimik3's patches ({known})")
        elif p.build.variant not in patch.variants:
            # rule: builtin-patch-names
            # The patch changes code the other variant does not compile (the CPU image has no CUDA backend).
            yield error(
                ("build", "builtin_patches", i),
                f"{name!r} applies to {'/'.join(patch.variants)} builds only, not build.variant {p.build.variant}",
            )
    chosen = p.build.builtin_patches
    if chosen:  # [] turns every patch off on purpose: nothing to warn about
        # rule: builtin-patches-whole-set
        # The list is the whole set, so naming one patch alone silently drops the other default ones for the
        # variant (a CUDA profile asking for parallel-host-read would lose parallel-pin's 2x faster hybrid load).
        left_out = [b.name for b in builtin_patches_for(p.build.variant, None) if b.name not in chosen]
        if left_out:
            them = "it" if len(left_out) == 1 else "them"
            yield warning(
                ("build", "builtin_patches"),
                f"leaves out {', '.join(left_out)}, built by default for "
                f"build.variant {p.build.variant}: the list is the whole set; add {them} to keep {them}",
            )
