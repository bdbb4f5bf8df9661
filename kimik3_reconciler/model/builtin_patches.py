"""The llama.cpp patches kimik3 itself carries (kimik3_reconciler/patches/): which build variant gets each,
why, and how a user turns it off. Pure values; observe/local_inputs.py hashes the files, the image step puts
them (before the profile's build.patches) in the build context and in the image fingerprint.

A patch is a default for a variant (every image of that variant gets it unless build.builtin_patches says
otherwise) only once it was measured on that variant's host; elsewhere it is opt-in: an image gets it only when
the profile names it, so carrying it moves no fingerprint of that variant's images.

Each applies with `patch -p1 --forward --batch` to both pins (engines/llamacpp/pins.py) and to the b11434 archive the demo
and the tests build (tests/unit/planning/test_builtin_patches.py checks this against the unpacked archive)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinPatch:
    name: str  # the short name a profile's build.builtin_patches uses
    file: str  # under kimik3_reconciler/patches/
    variants: tuple[str, ...]  # build.variant values whose image gets it
    what: str
    runtime_off: str  # how a running server turns it off without a rebuild
    # The variants whose images get it when build.builtin_patches is unset; for the others in `variants` it is
    # opt-in (built only when named): a patch becomes a default only where it was measured.
    default_for: tuple[str, ...]


BUILTIN_PATCHES: tuple[BuiltinPatch, ...] = (
    BuiltinPatch(
        name="parallel-pin",
        file="parallel-pinned-host-buffer.patch",
        variants=("cuda",),
        default_for=("cuda",),  # measured on the H200 host: hybrid load 0.44x, tokens identical (operations.md)
        what="the pinned (CUDA_Host) buffer of the CPU experts is faulted in by several threads, then registered "
        "with CUDA, instead of one thread in cudaMallocHost (issue 15: 5-9 s of a 16 GB hybrid load)",
        runtime_off="serve.env: {KIMIK3_PARALLEL_PIN: '0'} (stock cudaMallocHost path, no rebuild)",
    ),
    BuiltinPatch(
        name="parallel-host-read",
        file="parallel-host-read.patch",
        # the code path is the loader's (src/llama-model-loader.cpp), the same for the CPU buffer of a CPU build
        variants=("cuda", "cpu"),
        what="without mmap, the tensors of host buffers (the CPU experts of a hybrid load, every tensor of a CPU "
        "build) are read by several threads with pread() instead of one read() at a time on the loader's "
        "thread (issue 15: ~3.5 GB/s from the page cache on one thread, ~35 GB/s on 8; a pre-read reload "
        "0.2-0.3x the cold one instead of 0.5x)",
        runtime_off="serve.env: {KIMIK3_PARALLEL_READ: '0'} (stock one-thread read, no rebuild)",
        # CUDA: measured on the H200 host (run-load.sh measure3, tests/fixtures/h200/read-patch-h200*.json): warm
        # hybrid load 0.41x / 0.38x the pin-only build, pre-read reload 0.28x / 0.20x the cold one (16 / 41 GB),
        # tokens identical. CPU: opt-in, measured only on the 2-core dev machine (noise, 0.54-1.04x), and the
        # CPU image (the demo's, CI's) keeps its fingerprint.
        default_for=("cuda",),
    ),
)

BUILTIN_PATCH_NAMES: tuple[str, ...] = tuple(p.name for p in BUILTIN_PATCHES)  # the JSON Schema's enum of names


def builtin_patch(name: str) -> BuiltinPatch | None:
    return next((p for p in BUILTIN_PATCHES if p.name == name), None)


def builtin_patches_for(variant: str, chosen: list[str] | None) -> tuple[BuiltinPatch, ...]:
    """The built-in patches an image of `variant` gets, in BUILTIN_PATCHES order (their apply order): the
    default ones for the variant (chosen None), else the chosen ones that apply to it, opt-in ones included
    (profile_rules refuses names that are unknown or for another variant)."""
    if chosen is None:
        return tuple(p for p in BUILTIN_PATCHES if variant in p.default_for)
    return tuple(p for p in BUILTIN_PATCHES if variant in p.variants and p.name in chosen)
