"""Plan the image: pulled by digest, or built from the engine's build recipe (`ServingEngine.build_recipe`: its
payload, inputs, cost and notes), kept, retagged or rebuilt by its fingerprint."""

from __future__ import annotations

import json
from dataclasses import replace

from kimik3_reconciler.engines.base import BuildRecipe
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ImageFact, Observed
from kimik3_reconciler.model.labels import BASE_DIGESTS, BASE_IMAGES, IMAGE_INPUTS
from kimik3_reconciler.model.plan import Action, DiffItem, Step, flat_diff
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ImageBuild, RetagImage
from kimik3_reconciler.planning.container_step import container_alone, container_changes
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.image_pull import plan_pull
from kimik3_reconciler.planning.preread_step import build_overlap


def pinned(ref: str) -> bool:
    """A base image given by digest (`repo[:tag]@sha256:…`): the digest is in the fingerprint, it cannot move."""
    return "@sha256:" in ref


def _digest_drift(image: ImageFact, observed: Observed) -> tuple[DiffItem, ...]:
    """Tags whose local image now has another repo digest than the one the image was built on."""
    # rule: base-image-digest
    # Seed 000 "Why build from source in Docker": build once, keep the image, rebuild only when a pin
    # moves. A tag is no pin: the digest it resolved to at build time is recorded, another one here rebuilds.
    built_on = json.loads(image.labels.get(BASE_DIGESTS, "{}"))
    both = {ref: now for ref, now in observed.base_digests.items() if now and built_on.get(ref) and not pinned(ref)}
    return flat_diff(
        {ref: built_on[ref][:19] for ref in both},
        {ref: now[:19] for ref, now in both.items()},
        prefix="base image tag ",
    )


def _base_drift(image: ImageFact, observed: Observed) -> tuple[DiffItem, ...]:
    """Base images the image was not built on: a tag now at another digest, else (no digest known: an
    imported image, or a build older than digest records) another local id."""
    moved = _digest_drift(image, observed)
    if moved:
        return moved
    built_on = json.loads(image.labels.get(BASE_IMAGES, "{}"))
    known = json.loads(image.labels.get(BASE_DIGESTS, "{}"))
    both = {
        ref: now
        for ref, now in observed.base_images.items()
        if now and built_on.get(ref) and not (known.get(ref) and observed.base_digests.get(ref))
    }
    return flat_diff(
        {ref: built_on[ref][:19] for ref in both}, {ref: now[:19] for ref, now in both.items()}, prefix="base image "
    )


def _pin_hints(profile: Profile, observed: Observed) -> tuple[str, ...]:
    """For each base given by tag whose digest is known here: the pinned form, to copy into the profile."""
    hints = []
    for role in ("build", "runtime"):
        ref = getattr(profile.build.base_images, role)
        digest = observed.base_digests.get(ref)
        if digest and not pinned(ref):
            hints.append(
                f"build.base_images.{role} is the tag {ref} (now {digest[:19]}…): write "
                f"{ref}@{digest} to build the same image on every host"
            )
    return tuple(hints)


def _tagged_id(observed: Observed, tag: str) -> str | None:
    return next((i.id[:19] for i in observed.images if tag in i.tags), None)


def plan_image(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """The image step: pulled by digest for an engine whose image is pulled (planning/image_pull.py), else built;
    a build is refused when a speculative draft is asked for and no patch is the rollback patch."""
    if desired.engine.image_source.kind == "pull":
        if observed.pulled is None:  # observation looks at the image whenever the engine pulls: a fact missing is a bug
            raise PlanError(
                f"engine {desired.engine.name} pulls its image, but nothing observed image.ref",
                fields=(("image", "ref"),),
            )
        return plan_pull(observed.pulled)
    recipe = desired.engine.build_recipe(desired.profile, observed)
    assert recipe is not None  # the engine builds its image (image_source.kind "build")
    refusal = recipe.refusal()
    if refusal:
        raise PlanError(refusal, fields=(("build", "patches"),))  # the orchestrator adds the profile's file:line
    steps = _with_preread(_plan_image(desired, observed, recipe), desired, observed)
    for note in recipe.notes():
        steps = tuple(replace(s, reason=f"{s.reason}; {note}") for s in steps)
    return steps


def _with_preread(steps: tuple[Step, ...], desired: Desired, observed: Observed) -> tuple[Step, ...]:
    """A build of minutes to an hour hides a read of the model: its payload carries the pre-read when the pre-read
    planner's facts allow it (planning/preread_step.py decides; its own step then only tops up what was lost)."""
    if not any(s.changes and isinstance(s.spec, ImageBuild) for s in steps):
        return steps
    overlap = build_overlap(desired, observed)
    if overlap is None or overlap.spec is None:
        return steps  # the pre-read step says why not
    return tuple(
        replace(
            s,
            spec=replace(s.spec, preread=overlap.spec),
            reason=f"{s.reason}; {overlap.reason}",
            cost=f"{s.cost}; the pre-read overlaps the compile, the step waits for the rest of it",
        )
        if s.changes and isinstance(s.spec, ImageBuild)
        else s
        for s in steps
    )


def _plan_image(desired: Desired, observed: Observed, recipe: BuildRecipe) -> tuple[Step, ...]:
    spec = desired.build
    present = [i for i in observed.images if i.fingerprint == spec.fingerprint]
    current = [i for i in present if not _base_drift(i, observed)]
    if any(spec.tag in i.tags for i in current):
        return (
            Step(
                "image", spec.tag, Action.NOOP, f"image {spec.tag} present (fingerprint {spec.fingerprint})", spec=spec
            ),
        )
    in_use = observed.container.image_id if observed.container else None
    # The container step comes later: ask it now whether it will change anything (start included).
    if not container_changes(container_alone(desired, observed)) and any(i.id == in_use for i in current):
        # The tag points at another profile's build of this pin; ours runs: nothing to do.
        return (
            Step(
                "image",
                spec.tag,
                Action.NOOP,
                f"this profile's build (fingerprint {spec.fingerprint}) runs; "
                f"the tag {spec.tag} points at another build of the pin",
                spec=spec,
            ),
        )
    if current:
        # A kept build with exactly these inputs: point the tag back at it instead of compiling.
        return (
            Step(
                "image",
                spec.tag,
                Action.UPDATE,
                f"a kept build has fingerprint {spec.fingerprint}: tag it {spec.tag} again (no rebuild)",
                diff=(DiffItem("tag", _tagged_id(observed, spec.tag), current[0].id[:19]),),
                spec=RetagImage(current[0].id, spec.tag),
            ),
        )
    if present:
        drift = _base_drift(present[0], observed)
        why = (
            "base image tag now points to another digest: rebuild on it"
            if any(d.field.startswith("base image tag ") for d in drift)
            else "a base image was updated since the build: rebuild on it"
        )
        return (
            Step(
                "image",
                spec.tag,
                Action.CREATE,
                why,
                diff=drift,
                spec=spec,
                cost=recipe.cost(),
                warnings=_pin_hints(desired.profile, observed),
            ),
        )
    same_tag = [i for i in observed.images if spec.tag in i.tags]
    if not same_tag:
        return (
            Step(
                "image",
                spec.tag,
                Action.CREATE,
                f"no image with fingerprint {spec.fingerprint}: build it",
                spec=spec,
                cost=recipe.cost(),
                warnings=_pin_hints(desired.profile, observed),
            ),
        )
    diff = flat_diff(json.loads(same_tag[0].labels.get(IMAGE_INPUTS, "{}")), recipe.inputs())
    return (
        Step(
            "image",
            spec.tag,
            Action.CREATE,
            f"{spec.tag} was built from other inputs (fingerprint {same_tag[0].fingerprint} → {spec.fingerprint}); "
            "the old image stays as a rollback target",
            diff=diff,
            spec=spec,
            cost=recipe.cost(),
            warnings=_pin_hints(desired.profile, observed),
        ),
    )
