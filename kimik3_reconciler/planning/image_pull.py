"""Plan the image of an engine that pulls it by digest (`ImageSource.kind == "pull"`: vLLM, SGLang) instead of
building it: present with the digest = nothing to do; else one pull, priced from the registry's manifest."""

from __future__ import annotations

from kimik3_reconciler.model.facts import ContainerFact, PulledImageFact
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.image_ref import pinned_image
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.specs import ImagePull, RemoveImage


def pull_spec(ref: str) -> ImagePull:
    """The payload for `ref` (a PlanError naming image.ref when it has no digest)."""
    image = pinned_image(ref)
    return ImagePull(ref=ref, by_digest=image.by_digest, digest=image.digest)


def plan_pull(pulled: PulledImageFact) -> tuple[Step, ...]:
    """The image step: NOOP when an image with the digest is here (no registry asked), else a pull."""
    spec = pull_spec(pulled.ref)
    if pulled.image_id is not None:
        return (
            Step(
                "image",
                pulled.ref,
                Action.NOOP,
                f"image {spec.digest[:19]}… present ({pulled.image_id[:19]}): pinned by digest, nothing to pull",
                spec=spec,
            ),
        )
    cost = (
        f"{gib(pulled.pull_bytes)} to pull (registry manifest: config + layers, compressed)"
        if pulled.pull_bytes is not None
        else f"unknown size ({pulled.size_unknown or 'the registry did not say'})"
    )
    return (
        Step(
            "image",
            pulled.ref,
            Action.CREATE,
            f"no local image has digest {spec.digest[:19]}…: pull {spec.by_digest}",
            spec=spec,
            cost=cost,
        ),
    )


def plan_pulled_removal(pulled: PulledImageFact, remove: bool, others: tuple[ContainerFact, ...] = ()) -> Step:
    """`destroy`'s image step for a pulled image: kept unless `--images`, and kept when another profile's container
    runs the same digest (docker would refuse, or leave that deployment without its image on the next restart)."""
    spec = pull_spec(pulled.ref)
    if pulled.image_id is None:
        return Step("image", pulled.ref, Action.NOOP, f"no local image has digest {spec.digest[:19]}…")
    users = sorted(c.name for c in others if c.image_id == pulled.image_id)
    if users:
        return Step("image", pulled.ref, Action.NOOP, f"kept: the container of {', '.join(users)} runs this digest")
    if not remove:
        return Step("image", pulled.ref, Action.NOOP, "kept (pass --images to remove)")
    return Step(
        "image",
        pulled.ref,
        Action.DELETE,
        f"--images: remove the profile's image (pulled by digest: the next apply pulls it again, {spec.digest[:19]}…)",
        spec=RemoveImage(spec.by_digest),
    )
