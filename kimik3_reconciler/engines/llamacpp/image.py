"""llama.cpp's image build, rendered from the profile: Dockerfile.llamacpp's build args, the patches in apply order,
the CMake flags, the tag and the image fingerprint (`Build`, what `LlamaCpp.build_recipe` hands the image planner)."""

from __future__ import annotations

import json
from functools import cached_property

from kimik3_reconciler.engines.llamacpp.build_flags import cmake_definitions, docker_build_args
from kimik3_reconciler.engines.llamacpp.build_time import build_cost
from kimik3_reconciler.engines.llamacpp.patch_roles import Recognised, rollback_requirement
from kimik3_reconciler.engines.llamacpp.sources import source_archive
from kimik3_reconciler.model.builtin_patches import BUILTIN_PATCHES
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.hashing import fingerprint
from kimik3_reconciler.model.labels import IMAGE_FINGERPRINT, IMAGE_INPUTS, PROFILE_LABEL
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ImageBuild


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
    if observed.inputs.builtin_patches:
        # Only when the image gets one (CUDA by default; CPU only when the profile opts in to one): an image
        # without any keeps the fingerprint it had before kimik3 carried patches (the CPU image's did not move).
        inputs["build.builtin_patches"] = [f"{p.name}@{p.sha256[:12]}" for p in observed.inputs.builtin_patches]
    inputs["build.base_images.build"] = profile.build.base_images.build
    inputs["build.base_images.runtime"] = profile.build.base_images.runtime
    inputs.update({f"build.cmake.{k}": v for k, v in sorted(cmake_definitions(profile, observed.host).items())})
    return inputs


def render_image_build(profile: Profile, observed: Observed) -> ImageBuild:
    inputs = image_inputs(profile, observed)
    digest = fingerprint(inputs)
    archive_location, archive_sha = source_archive(profile, observed)
    # Dockerfile.llamacpp applies /patches/*.patch in name order: number them, keep the suffix. kimik3's own
    # patches come first (named kimik3-…), then build.patches: a user's patch applies on top of what kimik3 ships.
    ordered = [(f"kimik3-{p.name}", p.path) for p in observed.inputs.builtin_patches]
    ordered += [(p.name, p.path) for p in observed.inputs.patches]
    patches = tuple(
        (f"{i:02d}-{name}" + ("" if name.endswith(".patch") else ".patch"), path)
        for i, (name, path) in enumerate(ordered)
    )
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
        source=profile.build.source,
        commit=profile.build.effective_commit,
        dockerfile=observed.inputs.dockerfile_path,
        archive=archive_location,
        archive_sha256=archive_sha,
        patches=patches,
        build_args=tuple(docker_build_args(profile, observed.host).items()),
        labels=labels,
        variant=profile.build.variant,
    )


def builtin_summary(observed: Observed) -> str:
    """What the plan says of kimik3's own patches in this image (none, as the CPU variant by default: nothing said)."""
    facts = observed.inputs.builtin_patches
    if not facts:
        return ""
    names = {p.file: p.name for p in BUILTIN_PATCHES}
    return "kimik3 patches: " + ", ".join(f"{names.get(p.name, p.name)} ({p.name} {p.sha256[:12]})" for p in facts)


class Build:
    """The profile's build on this observation (engines/base.py's `BuildRecipe`): each part rendered when first asked
    (a no-op plan asks for the payload only)."""

    def __init__(self, profile: Profile, observed: Observed):
        self.profile, self.observed = profile, observed
        self.tag = image_tag(profile)

    def spec(self) -> ImageBuild:
        return render_image_build(self.profile, self.observed)

    def inputs(self) -> dict[str, object]:
        return image_inputs(self.profile, self.observed)

    def cost(self) -> str:
        return build_cost(self.profile, self.observed)

    @cached_property
    def _rollback(self) -> tuple[Recognised | None, str | None]:
        return rollback_requirement(self.profile, self.observed.inputs.patches)

    def refusal(self) -> str | None:
        """Why the build is refused: a speculative draft is asked for and no patch is the rollback patch."""
        return self._rollback[1]

    def notes(self) -> tuple[str, ...]:
        """What the image step's reason adds: kimik3's own patches, then which patch carries the draft's rollback and
        why kimik3 believes so (content, not name)."""
        rollback = self._rollback[0]
        notes = (
            builtin_summary(self.observed),
            f"spec_draft's rollback patch: {rollback}" if rollback is not None else "",
        )
        return tuple(note for note in notes if note)
