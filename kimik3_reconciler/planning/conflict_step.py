"""Plan the conflicts: another profile's running container that shares GPUs (or the port) stops first.

Seed 000 step 7: the standing and the interactive deployments share the GPUs, so starting one
stops the other (systemd `Conflicts=`). kimik3 applies the same rule to containers: explicit
`systemd.conflicts`, or an overlap of GPUs, or the same host port.
"""

from __future__ import annotations

from kimik3_reconciler.model.facts import ContainerFact, Observed, UnitFact
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import StopContainer, StopUnit
from kimik3_reconciler.planning.desired import Desired


def _gpus(value: object) -> set[str] | str:
    if value in ("all", "none"):
        return str(value)
    return {str(g) for g in value} if isinstance(value, list) else "none"


def why_conflicting(profile: Profile, other: ContainerFact, port: int) -> str | None:
    if profile.systemd is not None and other.profile in profile.systemd.conflicts:
        return f"systemd.conflicts lists {other.profile}"
    # rule: shared-gpus
    mine, theirs = _gpus(profile.gpus if profile.build.variant == "cuda" else "none"), _gpus(other.inputs.get("gpus"))
    if "none" not in (mine, theirs) and (mine == "all" or theirs == "all" or (mine & theirs)):  # type: ignore[operator]
        return f"it holds GPUs {theirs if theirs == 'all' else sorted(theirs)} this profile needs"
    if other.inputs.get("serve.port") == port:
        return f"it listens on port {port} too"
    return None


def supervising_unit(observed: Observed, profile: str | None) -> UnitFact | None:
    """The kimik3 unit of another profile that is running (or restarting) its container, if any."""
    if observed.systemd is None or not observed.systemd.booted:
        return None
    return next(
        (
            u
            for u in observed.systemd.units
            if u.profile == profile and u.active_state in ("active", "activating", "reloading")
        ),
        None,
    )


def _kept(profile: Profile, other: ContainerFact) -> str:
    """What happens to a stopped conflicting container afterwards."""
    if other.profile == profile.name:
        # This profile's own labels under another name (renamed by hand, or a copy): kimik3 launches the profile
        # under its own name, so nothing would ever start this one again; say how to remove it.
        return (
            f"it carries this profile's labels under another name (renamed by hand?): kimik3 runs the profile "
            f"as {profile.name} and leaves {other.name} stopped; `docker rm {other.name}` removes it"
        )
    return "its container is kept, `kimik3 apply` of that profile starts it again"


def plan_conflicts(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    profile = desired.profile
    steps = []
    for other in observed.others:
        unit = supervising_unit(observed, other.profile)
        if not other.up and unit is None:
            continue
        why = why_conflicting(profile, other, profile.serve.port)
        if not why:
            continue
        if unit is not None:
            # Stopping only the container, systemd would see a failure and start it again (Restart=on-failure).
            steps.append(
                Step(
                    "conflict",
                    other.name,
                    Action.UPDATE,
                    f"stop unit {unit.name} (profile {other.profile}, container {other.name}) first: {why}; "
                    f"its container is kept, `kimik3 apply` of that profile or `systemctl start {unit.name}` "
                    "starts it again",
                    spec=StopUnit(unit.name),
                    cost="the other deployment is down while this one runs",
                )
            )
            continue
        steps.append(
            Step(
                "conflict",
                other.name,
                Action.UPDATE,
                f"stop {other.name} (profile {other.profile}) first: {why}; {_kept(profile, other)}",
                spec=StopContainer(other.name),
                cost="the other deployment is down while this one runs",
            )
        )
    return tuple(steps)
