"""The llama.cpp patches kimik3 itself carries (kimik3_reconciler/patches/): which build variant gets each,
why, and how a user turns it off. Pure values; observe/local_inputs.py hashes the files, the image step puts
them (before the profile's build.patches) in the build context and in the image fingerprint.

A patch is a default (every image of its variant gets it unless build.builtin_patches says otherwise) only once
it was measured where it matters; until then it is opt-in: an image gets it only when the profile names it, so
carrying it moves no existing image's fingerprint.

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
    default: bool = True  # False: opt-in, only when build.builtin_patches names it (not measured on a GPU yet)


BUILTIN_PATCHES: tuple[BuiltinPatch, ...] = (
    BuiltinPatch(
        name="parallel-pin",
        file="parallel-pinned-host-buffer.patch",
        variants=("cuda",),
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
             "thread (issue 15: the warm hybrid load grows with the bytes, so a pre-read reload stays at 0.5x the "
             "cold one)",
        runtime_off="serve.env: {KIMIK3_PARALLEL_READ: '0'} (stock one-thread read, no rebuild)",
        default=False,  # opt-in until measured on the GPU host (tools/gpu_proof/run-load.sh measure3)
    ),
)


def builtin_patch(name: str) -> BuiltinPatch | None:
    return next((p for p in BUILTIN_PATCHES if p.name == name), None)


def builtin_patches_for(variant: str, chosen: list[str] | None) -> tuple[BuiltinPatch, ...]:
    """The built-in patches an image of `variant` gets, in BUILTIN_PATCHES order (their apply order): the
    default ones for the variant (chosen None), else the chosen ones that apply to it, opt-in ones included
    (profile_rules refuses names that are unknown or for another variant)."""
    if chosen is None:
        return tuple(p for p in BUILTIN_PATCHES if variant in p.variants and p.default)
    return tuple(p for p in BUILTIN_PATCHES if variant in p.variants and p.name in chosen)
