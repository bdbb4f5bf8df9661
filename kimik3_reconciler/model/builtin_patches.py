"""The llama.cpp patches kimik3 itself carries (kimik3_reconciler/patches/): which build variant gets each,
why, and how a user turns it off. Pure values; observe/local_inputs.py hashes the files, the image step puts
them (before the profile's build.patches) in the build context and in the image fingerprint.

Each applies with `patch -p1 --forward --batch` to both pins (model/pins.py) and to the b11434 archive the demo
and the tests build (tests/unit/test_builtin_patches.py checks this against the unpacked archive)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinPatch:
    name: str  # the short name a profile's build.builtin_patches uses
    file: str  # under kimik3_reconciler/patches/
    variants: tuple[str, ...]  # build.variant values whose image gets it
    what: str
    runtime_off: str  # how a running server turns it off without a rebuild


BUILTIN_PATCHES: tuple[BuiltinPatch, ...] = (
    BuiltinPatch(
        name="parallel-pin",
        file="parallel-pinned-host-buffer.patch",
        variants=("cuda",),
        what="the pinned (CUDA_Host) buffer of the CPU experts is faulted in by several threads, then registered "
             "with CUDA, instead of one thread in cudaMallocHost (issue 15: 5-9 s of a 16 GB hybrid load)",
        runtime_off="serve.env: {KIMIK3_PARALLEL_PIN: '0'} (stock cudaMallocHost path, no rebuild)",
    ),
)


def builtin_patch(name: str) -> BuiltinPatch | None:
    return next((p for p in BUILTIN_PATCHES if p.name == name), None)


def builtin_patches_for(variant: str, chosen: list[str] | None) -> tuple[BuiltinPatch, ...]:
    """The built-in patches an image of `variant` gets: every one for the variant (chosen None), else the
    chosen ones that apply to it (profile_rules refuses names that are unknown or for another variant)."""
    return tuple(p for p in BUILTIN_PATCHES if variant in p.variants and (chosen is None or p.name in chosen))
