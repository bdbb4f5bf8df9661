"""Plan the smoke test: a new image must serve its engine's tiny model (llama.cpp: a kimi-k3 GGUF) before the real
model goes on it.

Seed 000 step 4: a tiny GGUF proves the build and the GPU plumbing in seconds, against a broken
image discovered after a ~15-minute cold load. Recorded per image, so it runs once per image.
"""

from __future__ import annotations

from kimik3_reconciler.engines import ServingEngine
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.labels import PROFILE_LABEL, SMOKE_MOUNT
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ImageBuild, SmokeTest
from kimik3_reconciler.planning.desired import Desired, changes
from kimik3_reconciler.planning.launch import gpu_request, gpus_of


def render_smoke(profile: Profile, observed: Observed, image: ImageBuild, engine: ServingEngine) -> SmokeTest:
    smoke = engine.smoke
    assert smoke is not None  # plan_smoke asks first
    command = smoke.argv(f"{SMOKE_MOUNT}/{smoke.entry}", observed.host.physical_cores)
    return SmokeTest(
        container=f"{profile.name}-smoke",
        image=image.tag,
        image_fingerprint=image.fingerprint,
        command=command,
        gpus=gpus_of(profile),
        gpu_request=gpu_request(observed, gpus_of(profile)),
        labels=((PROFILE_LABEL, profile.name), ("kimik3.role", "smoke")),
        engine=engine.name,
    )


def plan_smoke(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    smoke = desired.engine.smoke
    if smoke is None or desired.engine.image_source.kind != "build":
        # The smoke test proves a build (llama-server from pinned source) on the engine's tiny model; a pulled image
        # is the vendor's, pinned by digest, whose first launch's health wait and verify are its test.
        return ()
    spec = render_smoke(desired.profile, observed, desired.build, desired.engine)
    target = spec.image
    if not desired.profile.gate.smoke:
        return (Step("smoke", target, Action.NOOP, "gate.smoke is off", spec=spec),)
    if changes(planned, ImageBuild):  # a new build (a re-tag reuses a tested one)
        return (
            Step(
                "smoke",
                target,
                Action.READ,
                f"smoke-test the new image with {smoke.what}",
                spec=spec,
                cost="seconds",
            ),
        )
    image = next((i for i in observed.images if i.fingerprint == spec.image_fingerprint), None)
    if image is not None and image.smoke == "passed":
        return (Step("smoke", target, Action.NOOP, "image passed its smoke test", spec=spec),)
    if image is not None and image.smoke == "failed":
        return (
            Step(
                "smoke",
                target,
                Action.READ,
                f"the last smoke test failed ({image.smoke_detail}); the real model is not launched on this image "
                "until it passes: trying again",
                spec=spec,
            ),
        )
    return (Step("smoke", target, Action.READ, "image was never smoke-tested", spec=spec, cost="seconds"),)
