"""PURE planning: plan(profile, observed) -> Plan. Everything arrives as arguments; nothing is fetched.

`PLANNERS` is the plan: each planner gets what the profile renders to (`Desired`), the observation
and the steps planned before it, and returns its own steps. A new step kind is one more entry.
"""

from __future__ import annotations

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import BuildRecipe, EnginePlan
from kimik3_reconciler.errors import FieldRefusal, HubError, PlanError
from kimik3_reconciler.model.facts import ImageFact, Observed
from kimik3_reconciler.model.labels import PROFILE_LABEL
from kimik3_reconciler.model.model_files import CHECKPOINT
from kimik3_reconciler.model.plan import Action, Plan, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.records import last_good_key, unverified_key
from kimik3_reconciler.model.specs import (
    ForgetDeployment,
    ImageBuild,
    QuantGateRun,
    RemoveContainer,
    RemoveImage,
    RemoveModelFiles,
    RemoveVolume,
    slots_volume,
)
from kimik3_reconciler.planning.cluster_step import (
    plan_cluster_members,
    plan_cluster_nodes,
    plan_member_teardown,
    plan_removed_members,
)
from kimik3_reconciler.planning.conflict_step import plan_conflicts
from kimik3_reconciler.planning.container_step import container_changes, plan_container
from kimik3_reconciler.planning.desired import Desired, Planner, changes
from kimik3_reconciler.planning.engine_plan import PlanOnHost
from kimik3_reconciler.planning.front_step import plan_front, plan_front_teardown, plan_hold, plan_release_front
from kimik3_reconciler.planning.gpu_probe import plan_gpu_probe
from kimik3_reconciler.planning.health_step import plan_health
from kimik3_reconciler.planning.host_gate import host_gate
from kimik3_reconciler.planning.host_step import plan_host
from kimik3_reconciler.planning.image_pull import plan_pulled_removal
from kimik3_reconciler.planning.image_step import plan_image
from kimik3_reconciler.planning.launch import refuse_keyless_key_file, render_launch
from kimik3_reconciler.planning.metrics_step import plan_exporter, plan_exporter_teardown, plan_release_port
from kimik3_reconciler.planning.model_step import model_spec, plan_model, plan_tokenizer
from kimik3_reconciler.planning.preread_step import plan_preread
from kimik3_reconciler.planning.quant_gate import gate_reference, plan_gate, plan_reference, plan_stop_for_gate
from kimik3_reconciler.planning.routes import profile_routes
from kimik3_reconciler.planning.smoke_step import plan_smoke
from kimik3_reconciler.planning.unit_step import plan_stale_units, plan_unit, plan_unit_teardown
from kimik3_reconciler.planning.verify_step import plan_verify
from kimik3_reconciler.planning.worker_step import plan_removed_workers, plan_worker_teardown, plan_workers

__all__ = [
    "PLANNERS",
    "Desired",
    "gate_reference",
    "plan",
    "plan_destroy",
    "plan_prune",
    "refuse_by_host_gate",
    "render_desired",
]

# In apply order. The host's kernel settings first (host.prepare): what every later step's server runs under.
# Then the GPU probe: nothing is fetched or built for a host whose containers cannot see
# its GPUs. Stale units go before the container: their ExecStop would stop a relaunched one. The pre-read
# goes after everything that downloads, builds or gates, right before the swap (the old server still serves);
# an image build may already have read the model while it compiled (ImageBuild.preread, from preread_step).
# RPC workers (other hosts) listen before the main server starts: it connects to each at load. A worker the
# profile dropped goes after the health wait: the old server keeps its tensors there until the new one serves.
# A cluster's nodes get their image and checkpoint check before the head's container, their members after it (a
# node's Ray joins the head's, which the head's container starts first), then Ray's table before the health wait; a
# node the profile dropped goes after the health wait, as a dropped worker does.
PLANNERS: tuple[Planner, ...] = (
    plan_host,
    plan_gpu_probe,
    plan_model,
    plan_tokenizer,
    plan_reference,
    plan_image,
    plan_smoke,
    plan_stop_for_gate,
    plan_gate,
    plan_preread,
    plan_hold,
    plan_stale_units,
    plan_conflicts,
    plan_release_front,
    plan_release_port,
    plan_workers,
    plan_cluster_nodes,
    plan_container,
    plan_cluster_members,
    plan_health,
    plan_removed_workers,
    plan_removed_members,
    plan_exporter,
    plan_front,
    plan_verify,
    plan_unit,
)


def render_desired(
    profile: Profile, observed: Observed, refusals: tuple[str, ...] = (), rendered: EnginePlan | None = None
) -> Desired:
    """What the profile renders to on this host, its engine's plan (mode, forecast, routes) made once with it;
    `refusals`: the plan's gate verdict (none: it passed), which the profile's own route takes; `rendered`: the
    engine's plan where the caller rendered it already (`plan`: its gate read it first)."""
    engine = engine_for(profile.engine)  # the registry: every planner learns the engine from Desired.engine
    rendered = rendered if rendered is not None else engine.render_plan(profile, observed)
    engine_plan = PlanOnHost(profile, observed, rendered, refusals)
    if engine.image_source.kind == "pull":
        # A pulled image is its digest: the container runs `repo:tag@sha256:…` and its fingerprint moves with the
        # digest only (the image steps of a pull: planning/image_step, by engine.image_source.kind). No build is
        # rendered: llama.cpp's Dockerfile, patches and CMake flags are no input of this engine's plan.
        image = profile.image
        launch = render_launch(profile, observed, image.ref, image.digest, engine, rendered)
        return Desired(profile, None, launch, engine, engine_plan)
    build = _build(profile, observed).spec()
    launch = render_launch(profile, observed, build.tag, build.fingerprint, engine, rendered)
    return Desired(profile, build, launch, engine, engine_plan)


def _build(profile: Profile, observed: Observed) -> BuildRecipe:
    """The build of a profile whose engine builds its image (its callers asked `image_source.kind` first)."""
    recipe = engine_for(profile.engine).build_recipe(profile, observed)
    assert recipe is not None, f"engine {profile.engine} builds no image"
    return recipe


def refuse_by_host_gate(profile: Profile, observed: Observed, rendered: EnginePlan | None = None) -> list[str]:
    """PlanError naming every failing fact, else the gate's warnings. Observation calls it once before any
    hub request too (with no model files yet: the sizing half waits for the listing). `rendered`: the engine's plan on
    this observation where the caller has it (`plan`), else rendered here (the early gate's observation is its own)."""
    rendered = rendered if rendered is not None else engine_for(profile.engine).render_plan(profile, observed)
    refusals, gate_warnings = host_gate(profile, observed, rendered)
    if refusals:
        fields = tuple(r.field for r in refusals if isinstance(r, FieldRefusal))
        message = "the host gate refuses this profile:\n  - " + "\n  - ".join(refusals)
        if observed.host.gpu_probe is not None or profile.gpus == "none":  # GPUs observed (or none wanted)
            # Seed 001: choose the engine by the hardware. A profile this host cannot run gets the routes it can.
            instead = profile_routes(profile, observed.host, observed=observed, refusals=refusals).instead()
            message += f"\n{instead}" if instead else ""
        raise PlanError(message, fields)
    return gate_warnings


def plan(profile: Profile, observed: Observed, warnings: tuple[str, ...] = ()) -> Plan:
    """Ordered steps: model, image, smoke, container, health, verify, unit. A step that must change carries its reason.
    The host gate comes first: a refusal names every failing fact, and nothing runs."""
    # The engine's plan, rendered once: the gate reads its mode, the desired state holds it.
    rendered = engine_for(profile.engine).render_plan(profile, observed)
    gate_warnings = refuse_by_host_gate(profile, observed, rendered)
    for fact in (observed.model, observed.tokenizer):
        if fact is not None and fact.listing_error:  # after the gate: a refused host is the more useful answer
            raise HubError(f"cannot plan the download of {fact.repo}: {fact.listing_error}")
    refuse_keyless_key_file(profile, observed)
    desired = render_desired(profile, observed, rendered=rendered)
    steps: tuple[Step, ...] = ()
    for planner in PLANNERS:
        steps += planner(desired, observed, steps)
    extra = (*warnings, *gate_warnings, *desired.launch.warnings)
    if observed.last_good and (container_changes(steps) or changes(steps, QuantGateRun)):
        extra += (
            f"if the gate, the load or verify fails, apply relaunches the last good profile "
            f"(recorded {observed.last_good})",
        )
    assert desired.plan is not None  # render_desired makes it
    return Plan(profile.name, steps, warnings=extra, forecast=desired.plan.forecast, routes=desired.plan.routes)


def plan_destroy(
    profile: Profile, observed: Observed, *, images: bool = False, model: bool = False, slots: bool = False
) -> Plan:
    """Remove what the profile created; the model cache, images and saved slots only when asked."""
    steps: list[Step] = list(plan_unit_teardown(profile, observed))  # first: a running unit would restart it
    steps += plan_exporter_teardown(profile, observed)
    steps += plan_front_teardown(profile.name, observed)
    if observed.container is not None:
        steps.append(
            Step(
                "container",
                profile.name,
                Action.DELETE,
                f"container {observed.container.state}: remove it",
                spec=RemoveContainer(profile.name),
            )
        )
    else:
        steps.append(Step("container", profile.name, Action.NOOP, "no container"))
    if observed.slots_volume:  # after the container: it mounts the volume
        steps.append(_slots_teardown(profile, slots))
    steps += plan_worker_teardown(profile, observed, model)  # after the server: it holds connections to them
    steps += plan_member_teardown(profile, observed)  # after the head: its server runs ranks on them
    if observed.pulled is not None:  # an engine that pulls its image: the digest, never a build's tag
        steps.append(plan_pulled_removal(observed.pulled, images, observed.others))
    else:
        steps += _built_image_teardown(profile, observed, images)
    target = f"{observed.model.repo}@{observed.model.revision[:12]}/{observed.model.quant}"
    cached = len(observed.model.files) - len(observed.model.missing)
    if observed.model.local_path is not None:
        # rule: local-path-kept
        # The user made that file (seed 000: REAP770 took hours to slice): kimik3 never removes it, --model or not.
        steps.append(
            Step(
                "model",
                observed.model.local_path,
                Action.NOOP,
                "model.local_path is the user's file: kept (kimik3 never removes it)",
            )
        )
    elif model and cached:
        what = "checkpoint" if observed.model.quant == CHECKPOINT else "quant"
        steps.append(
            Step(
                "model",
                target,
                Action.DELETE,
                f"--model: remove the cached files of this {what}",
                spec=RemoveModelFiles(model_spec(profile, observed)),
            )
        )
    elif cached:
        steps.append(Step("model", target, Action.NOOP, "kept (pass --model to remove)"))
    steps.append(_forget_step(profile, observed))  # last: a destroy that fails before it leaves a deployment to revert
    return Plan(profile.name, tuple(steps))


def _slots_teardown(profile: Profile, remove: bool) -> Step:
    """The step of `destroy` for the volume of the deployment's saved slots (serve.slot_save). Kept unless asked, as
    the model cache: it holds users' data (their conversations' KV cache, and slots they saved by name through
    llama-server's slot API); the plan says so, and how to remove it later."""
    volume = slots_volume(profile.name)
    if remove:
        return Step(
            "slots",
            volume,
            Action.DELETE,
            "--slots: remove the saved slots (users' conversations' KV cache)",
            spec=RemoveVolume(volume),
        )
    return Step(
        "slots",
        volume,
        Action.NOOP,
        f"kept: it holds users' conversations' saved KV cache (pass --slots to remove, or `docker volume rm {volume}`)",
    )


def _built_image_teardown(profile: Profile, observed: Observed, images: bool) -> list[Step]:
    """The image step of `destroy` for a built image (its tag is this profile's source pin)."""
    steps: list[Step] = []
    tag = _build(profile, observed).tag
    tagged = [i for i in observed.images if tag in i.tags]
    wanted = _wanted_image_fingerprint(profile, observed)
    foreign = [i for i in tagged if not _is_profiles_image(profile, observed, i, wanted)]
    if foreign:
        # The tag is source-commit-variant only, so a profile with other build
        # inputs (patches, archive, cpu_features) applied last holds it now; `destroy --images` went by the tag
        # alone and removed that other deployment's build (on a dev host, the shared cached image).
        image = foreign[0]
        owner = image.labels.get(PROFILE_LABEL) or "no kimik3 profile"
        known = f"this profile's build is {wanted}" if wanted else "this profile's build cannot be rendered here"
        steps.append(
            Step(
                "image",
                tag,
                Action.NOOP,
                f"kept: the tag holds another build (fingerprint {image.fingerprint}, built for {owner}; {known})",
            )
        )
    elif images and tagged:
        steps.append(Step("image", tag, Action.DELETE, "--images: remove the profile's image", spec=RemoveImage(tag)))
    elif tagged:
        steps.append(Step("image", tag, Action.NOOP, "kept (pass --images to remove)"))
    return steps


def _forget_step(profile: Profile, observed: Observed) -> Step:
    """The records that would bring the destroyed deployment back: the last good profile is the revert target of
    any later failing apply of this name (it relaunched what the operator removed), an owed verify names a launch."""
    keys = tuple(
        key
        for key, held in (
            (last_good_key(profile.name), observed.last_good),
            (unverified_key(profile.name), observed.unverified),
        )
        if held
    )
    if not keys:
        return Step("records", profile.name, Action.NOOP, "no revert target recorded")
    what = (
        f"the last good profile (recorded {observed.last_good}): a later failing apply of {profile.name} would "
        "relaunch it"
        if observed.last_good
        else "the launch's owed verify"
    )
    return Step("records", ", ".join(keys), Action.DELETE, f"forget {what}", spec=ForgetDeployment(keys))


def _wanted_image_fingerprint(profile: Profile, observed: Observed) -> str | None:
    if engine_for(profile.engine).image_source.kind == "pull":
        return None  # a pulled image is its digest: the container's (in use) is the one to keep
    try:
        return _build(profile, observed).spec().fingerprint
    except PlanError:  # destroy goes on when the planner would refuse a build
        return None


def _is_profiles_image(profile: Profile, observed: Observed, image: ImageFact, wanted: str | None) -> bool:
    """Is `image` this profile's: the build it wants (by fingerprint), the one its container runs, or one it built?"""
    in_use = observed.container is not None and image.id == observed.container.image_id
    return (
        in_use
        or image.labels.get(PROFILE_LABEL) == profile.name
        or (wanted is not None and image.fingerprint == wanted)
    )


def profile_images(profile: Profile, observed: Observed) -> tuple[str, list[str]]:
    """(the image this profile wants, how each local image that is this profile's reads): the one it wants, the
    one its container runs, and the older builds it labelled (rollback targets). Other profiles' images are not
    its images, though `docker images` shows them side by side. A pulled image is its digest: here or not."""
    if observed.pulled is not None:
        pulled = observed.pulled
        in_use = observed.container is not None and observed.container.image_id == pulled.image_id
        state = (
            "not pulled yet"
            if pulled.image_id is None
            else f"{pulled.image_id[:19]} (current{', in use' if in_use else ''})"
        )
        return f"{pulled.ref} (pulled by digest)", [state]
    if engine_for(profile.engine).image_source.kind == "pull":  # not looked at: no build of another engine stands in
        return f"{profile.image.ref} (pulled by digest)", ["not observed"]
    try:
        wanted: ImageBuild | None = _build(profile, observed).spec()
    except PlanError as exc:  # status reports what is there even when the planner would refuse the build
        wanted, refused = None, str(exc)
    in_use = observed.container.image_id if observed.container else None
    shown = []
    for image in observed.images:
        roles = [
            role
            for role, yes in (
                ("current", wanted is not None and image.fingerprint == wanted.fingerprint),
                ("in use", image.id == in_use),
            )
            if yes
        ]
        if not roles and image.labels.get(PROFILE_LABEL) == profile.name:
            roles = ["older build"]
        if roles:
            shown.append(f"{image.tags[0] if image.tags else image.id[:19]} ({', '.join(roles)})")
    return (
        f"{wanted.tag} (fingerprint {wanted.fingerprint})" if wanted else f"an image the planner refuses: {refused}",
        shown,
    )


def plan_prune(profile: Profile, observed: Observed) -> Plan:
    """Remove the profile's older images (rollback targets), never the current one or one in use."""
    if observed.pulled is not None:  # a pulled image has no older builds: the digest is the only one it runs
        return Plan(
            profile.name,
            (Step("image", observed.pulled.ref, Action.NOOP, "pulled by digest: no older builds to prune"),),
        )
    current = _build(profile, observed).spec().fingerprint
    in_use = observed.container.image_id if observed.container else None
    steps = []
    for image in observed.images:
        if image.labels.get(PROFILE_LABEL) != profile.name:
            continue
        name = image.tags[0] if image.tags else image.id[:19]
        if image.fingerprint == current or image.id == in_use:
            steps.append(Step("image", name, Action.NOOP, "current image" if image.id != in_use else "in use"))
        else:
            steps.append(
                Step(
                    "image",
                    name,
                    Action.DELETE,
                    f"older build (fingerprint {image.fingerprint})",
                    spec=RemoveImage(image.id),
                )
            )
    return Plan(profile.name, tuple(steps))
