"""Plan the container: create; replace on a fingerprint change, on drift from the rendered container, or
after the model files it loaded were found corrupt (each with the field diff); or start."""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Action, DiffItem, Step, flat_diff
from kimik3_reconciler.model.specs import LaunchContainer, StartContainer, WorkerLaunch
from kimik3_reconciler.planning.cluster_render import members_lost
from kimik3_reconciler.planning.container_drift import running_drift
from kimik3_reconciler.planning.desired import Desired, changes
from kimik3_reconciler.planning.launch import Launch
from kimik3_reconciler.planning.worker_step import restarted_workers


def _rebuilt_image_id(launch: Launch, observed: Observed) -> str | None:
    """The id now under the container's tag when it is a rebuild of the same inputs (a new base image)."""
    container = observed.container
    tagged = next((i for i in observed.images if launch.spec.image in i.tags), None)
    # Only a rebuild of *these* inputs (same fingerprint, e.g. a new base image) counts; the tag may
    # point at another profile's build of the same pin, which says nothing about this container.
    if (
        container is not None
        and tagged
        and container.image_id
        and tagged.id != container.image_id
        and tagged.fingerprint == launch.input.image_fingerprint
    ):
        return tagged.id
    return None


def container_changes(planned: tuple[Step, ...]) -> bool:
    """Does the plan so far (re)launch or start the container? Health, unit and the revert warning follow it."""
    return changes(planned, LaunchContainer, StartContainer)


def _drift(launch: Launch, observed: Observed) -> tuple[DiffItem, ...]:
    container = observed.container
    if container is None or container.running is None:
        return ()
    return running_drift(launch.spec, container.running)


def _loaded_corrupt(observed: Observed) -> tuple[str, ...]:
    """Corrupt model files a running server may have loaded (the model step refetches them first).
    A file that is only missing is not here: the server could not have loaded it as it is now."""
    container = observed.container
    if container is None or not container.loaded:
        return ()
    return observed.model.corrupt


def container_alone(desired: Desired, observed: Observed) -> tuple[Step, ...]:
    """The container's steps planned alone (no steps before it), once per plan: the image, pre-read and build
    overlap planners each ask whether a launch follows before the container planner's turn."""
    return desired.answer("container steps planned alone", observed, lambda: plan_container(desired, observed))


def plan_container(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """The container's step; a launch says what each request will get (issue 27: ctx_size is over the slots)."""
    steps = _plan_container(desired, observed, planned)
    context = desired.launch.context
    return tuple(
        replace(s, reason=f"{s.reason}; {context}")
        if context and s.changes and isinstance(s.spec, LaunchContainer)
        else s
        for s in steps
    )


def _plan_container(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    launch = desired.launch
    name = launch.spec.name
    container = observed.container
    if container is None:
        return (
            Step(
                "container",
                name,
                Action.CREATE,
                "no container: launch it",
                spec=LaunchContainer(launch.spec),
                warnings=launch.warnings,
            ),
        )
    if container.fingerprint != launch.fingerprint:
        diff = flat_diff(container.inputs, launch.inputs)
        why = "launch inputs changed" if diff else "container was not made by this kimik3 profile (fingerprint differs)"
        return (
            Step(
                "container",
                name,
                Action.REPLACE,
                f"{why} (fingerprint {container.fingerprint} → {launch.fingerprint})",
                diff=diff,
                spec=LaunchContainer(launch.spec, replace=True),
                warnings=launch.warnings,
            ),
        )
    relaunched = [s.target for s in planned if s.changes and isinstance(s.spec, WorkerLaunch)]
    restarted = restarted_workers(observed)
    if container.loaded and (relaunched or restarted):
        # rule: rpc-worker-restart-replaces-server
        # The server's tensors on a worker live in that rpc-server's memory: a new rpc-server holds none of them.
        who = ", ".join(relaunched) or ", ".join(restarted)
        why = ("its worker is relaunched" if relaunched else "its worker restarted after it started") + f" ({who})"
        return (
            Step(
                "container",
                name,
                Action.REPLACE,
                f"{why}: the layers placed there are gone, reload",
                diff=(DiffItem("rpc worker", "started before the server", "restarted"),),
                spec=LaunchContainer(launch.spec, replace=True),
                warnings=launch.warnings,
            ),
        )
    lost = members_lost(desired.profile, launch, observed)
    if lost and container.up:
        # rule: cluster-member-lost-restarts-replica
        # vLLM's Ray executor does not survive a lost actor (nor SGLang's ranks a lost peer): the server must start
        # again with every member, and the head's Ray with it (its nodes rejoin the new head: the member step).
        who = "; ".join(f"{name}: {why}" for name, why in lost)
        head = " and Ray's head" if len(launch.cluster[0].processes) > 1 else ""
        return (
            Step(
                "container",
                name,
                Action.REPLACE,
                f"the replica lost a member ({who}): restart the head's server{head} with it",
                diff=tuple(DiffItem(f"member {n}", why, "running") for n, why in lost),
                spec=LaunchContainer(launch.spec, replace=True),
                warnings=launch.warnings,
            ),
        )
    drift = _drift(launch, observed)
    if drift:
        return (
            Step(
                "container",
                name,
                Action.REPLACE,
                "the running container differs from the rendered one (changed outside kimik3)",
                diff=drift,
                spec=LaunchContainer(launch.spec, replace=True),
                warnings=launch.warnings,
            ),
        )
    corrupt = _loaded_corrupt(observed)
    if corrupt:
        # Its memory may hold the bad bytes: serve only what the refetch verified (the model step runs first).
        return (
            Step(
                "container",
                name,
                Action.REPLACE,
                f"the model files it loaded were re-fetched (sha256 mismatch: {', '.join(corrupt)})",
                spec=LaunchContainer(launch.spec, replace=True),
                warnings=launch.warnings,
            ),
        )
    rebuilt = _rebuilt_image_id(launch, observed)
    if rebuilt is not None and container.image_id:
        # Same fingerprint, new image under the tag (a base-image rebuild): run the new one.
        return (
            Step(
                "container",
                name,
                Action.REPLACE,
                f"{launch.spec.image} was rebuilt since this container started",
                diff=(DiffItem("image id", container.image_id[:19], rebuilt[:19]),),
                spec=LaunchContainer(launch.spec, replace=True),
            ),
        )
    if container.up:
        # The payload rides along (never executed): `plan --json` shows what runs.
        return (
            Step(
                "container",
                name,
                Action.NOOP,
                f"running, fingerprint {launch.fingerprint} matches",
                spec=LaunchContainer(launch.spec),
            ),
        )
    exit_note = f" (exit code {container.exit_code})" if container.exit_code is not None else ""
    if container.crash:  # its log named the cause: starting it as it is may crash it the same way
        exit_note = f" (exit code {container.exit_code}: it {container.crash})"
    verb = "unpause" if container.state == "paused" else "start"
    return (
        Step(
            "container",
            name,
            Action.UPDATE,
            f"container is {container.state}{exit_note}: {verb} it",
            diff=(DiffItem("state", container.state, "running"),),
            spec=StartContainer(name),
        ),
    )
