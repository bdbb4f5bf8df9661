"""Plan the container: create, replace on a fingerprint change (with the field diff), or start."""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Action, DiffItem, Step
from kimik3_reconciler.planning.launch import Launch


def input_diff(old: dict[str, object], new: dict[str, object]) -> tuple[DiffItem, ...]:
    return tuple(
        DiffItem(k, old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
    )


def plan_container(launch: Launch, observed: Observed) -> Step:
    name = launch.spec.name
    container = observed.container
    if container is None:
        return Step("container", name, Action.CREATE, "no container: launch it", spec=launch.spec,
                    warnings=launch.warnings)
    if container.fingerprint != launch.fingerprint:
        diff = input_diff(container.inputs, launch.inputs)
        why = "launch inputs changed" if diff else "container was not made by this kimik3 profile (fingerprint differs)"
        return Step("container", name, Action.REPLACE,
                    f"{why} (fingerprint {container.fingerprint} → {launch.fingerprint})",
                    diff=diff, spec=launch.spec, warnings=launch.warnings)
    tagged = next((i for i in observed.images if launch.spec.image in i.tags), None)
    # Only a rebuild of *these* inputs (same fingerprint, e.g. a new base image) counts; the tag may
    # point at another profile's build of the same pin, which says nothing about this container.
    if (tagged and container.image_id and tagged.id != container.image_id
            and tagged.fingerprint == launch.inputs.get("image.fingerprint")):
        # Same fingerprint, new image under the tag (a base-image rebuild): run the new one.
        return Step("container", name, Action.REPLACE, f"{launch.spec.image} was rebuilt since this container started",
                    diff=(DiffItem("image id", container.image_id[:19], tagged.id[:19]),), spec=launch.spec)
    if container.state in ("running", "restarting"):
        return Step("container", name, Action.NOOP, f"running, fingerprint {launch.fingerprint} matches",
                    spec=launch.spec)
    exit_note = f" (exit code {container.exit_code})" if container.exit_code is not None else ""
    verb = "unpause" if container.state == "paused" else "start"
    return Step("container", name, Action.UPDATE, f"container is {container.state}{exit_note}: {verb} it",
                diff=(DiffItem("state", container.state, "running"),), spec=launch.spec)
