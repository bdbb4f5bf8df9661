"""Plan the image: render Dockerfile.llamacpp build args, the tag and the image fingerprint."""

from __future__ import annotations

import json

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.hashing import fingerprint
from kimik3_reconciler.model.plan import Action, DiffItem, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ImageBuild
from kimik3_reconciler.model.labels import IMAGE_FINGERPRINT, IMAGE_INPUTS, PROFILE_LABEL
from kimik3_reconciler.planning.sources import source_archive

# profile cpu_features name -> the ggml CMake switches it turns on (reference/llama-cpp.md §3.2)
_FEATURE_SWITCHES = {
    "avx512": ("GGML_AVX512",),
    "avx512_vbmi": ("GGML_AVX512_VBMI",),
    "avx512_vnni": ("GGML_AVX512_VNNI",),
    "avx512_bf16": ("GGML_AVX512_BF16",),
    "amx": ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"),
}
# /proc/cpuinfo flag(s) -> cpu_features name, for `cpu_features: auto`
_HOST_FLAGS = {
    "avx512": ("avx512f",),
    "avx512_vbmi": ("avx512vbmi",),
    "avx512_vnni": ("avx512_vnni",),
    "avx512_bf16": ("avx512_bf16",),
    "amx": ("amx_tile", "amx_int8", "amx_bf16"),
}


def cpu_features(profile: Profile, observed: Observed) -> tuple[str, ...]:
    """The CPU kernels to compile: the profile's list, or what the host has (`auto`)."""
    if profile.build.cpu_features != "auto":
        return tuple(sorted(profile.build.cpu_features))
    flags = set(observed.host.cpu_flags)
    return tuple(sorted(name for name, need in _HOST_FLAGS.items() if set(need) <= flags))


def build_args(profile: Profile, observed: Observed) -> dict[str, str]:
    """Every build arg, always all of them, so Docker's layer cache keys stay stable."""
    build = profile.build
    features = cpu_features(profile, observed)
    args = {
        "BUILD_IMAGE": build.base_images.build,
        "RUNTIME_IMAGE": build.base_images.runtime,
        "GGML_CUDA": "ON" if build.variant == "cuda" else "OFF",
        "LLAMA_BUILD_NUMBER": str(build.effective_build_number),
        "LLAMA_BUILD_COMMIT": build.effective_commit[:7],
    }
    for name, switches in _FEATURE_SWITCHES.items():
        for switch in switches:
            args[switch] = "ON" if name in features else "OFF"
    if build.variant == "cuda":
        # CPU images never compile CUDA kernels, so the architecture list is not part of them.
        args["CUDA_ARCHITECTURES"] = ";".join(build.cuda_architectures)
    return args


def image_tag(profile: Profile) -> str:
    suffix = "-cpu" if profile.build.variant == "cpu" else ""
    return f"kimi-k3-llamacpp:{profile.build.source}-{profile.build.effective_commit[:7]}{suffix}"


def image_inputs(profile: Profile, observed: Observed) -> dict[str, object]:
    """The flattened build inputs; stored as a label so a rebuild can say which one moved."""
    archive_location, archive_sha = source_archive(profile, observed)
    inputs: dict[str, object] = {
        "build.source": profile.build.source,
        "build.commit": profile.build.effective_commit,
        "build.variant": profile.build.variant,
        "build.archive.sha256": archive_sha or f"(pinned by commit: {archive_location})",
        "build.patches": [f"{p.name}@{p.sha256[:12]}" for p in observed.inputs.patches],
        "dockerfile.sha256": observed.inputs.dockerfile_sha256[:12],
    }
    inputs.update({f"build.args.{k}": v for k, v in sorted(build_args(profile, observed).items())})
    return inputs


def render_image_build(profile: Profile, observed: Observed) -> ImageBuild:
    inputs = image_inputs(profile, observed)
    digest = fingerprint(inputs)
    archive_location, archive_sha = source_archive(profile, observed)
    patches = tuple((f"{i:02d}-{p.name}", p.path) for i, p in enumerate(observed.inputs.patches))
    labels = (
        (IMAGE_FINGERPRINT, digest),
        (IMAGE_INPUTS, json.dumps(inputs, sort_keys=True)),
        ("kimik3.source", profile.build.source),
        ("kimik3.commit", profile.build.effective_commit),
        (PROFILE_LABEL, profile.name),
    )
    return ImageBuild(
        tag=image_tag(profile),
        fingerprint=digest,
        dockerfile=observed.inputs.dockerfile_path,
        archive=archive_location,
        archive_sha256=archive_sha,
        patches=patches,
        build_args=tuple(sorted(build_args(profile, observed).items())),
        labels=labels,
    )


def plan_image(profile: Profile, observed: Observed) -> Step:
    spec = render_image_build(profile, observed)
    present = [i for i in observed.images if i.fingerprint == spec.fingerprint]
    if present:
        return Step("image", spec.tag, Action.NOOP, f"image {spec.tag} present (fingerprint {spec.fingerprint})", spec=spec)
    same_tag = [i for i in observed.images if spec.tag in i.tags]
    if not same_tag:
        return Step("image", spec.tag, Action.CREATE, f"no image with fingerprint {spec.fingerprint}: build it",
                    spec=spec, cost="compile llama.cpp (minutes)")
    old_inputs = json.loads(same_tag[0].labels.get(IMAGE_INPUTS, "{}"))
    new_inputs = image_inputs(profile, observed)
    diff = tuple(
        DiffItem(k, old_inputs.get(k), new_inputs.get(k))
        for k in sorted(set(old_inputs) | set(new_inputs))
        if old_inputs.get(k) != new_inputs.get(k)
    )
    return Step("image", spec.tag, Action.CREATE,
                f"{spec.tag} was built from other inputs (fingerprint {same_tag[0].fingerprint} → {spec.fingerprint}); "
                "the old image stays as a rollback target",
                diff=diff, spec=spec, cost="compile llama.cpp (minutes)")
