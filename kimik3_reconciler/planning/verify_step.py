"""Plan the verify an earlier apply owed: its launch is running, but that apply died (or lost dockerd) before
`kimik3 verify` passed. A `<=` step, so `plan --detailed-exitcode` says there is work (exit 4) and a timer's
apply or a reconcile pass finishes it; an apply that launches verifies its own launch at its end."""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.specs import VerifyServer
from kimik3_reconciler.planning.container_step import container_changes
from kimik3_reconciler.planning.desired import Desired


def plan_verify(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    container = observed.container
    # Only the launch the record names, as it runs now: a container this plan (re)launches or starts gets a
    # fresh record and is verified by the apply that launches it.
    if (
        container is None
        or observed.unverified is None
        or container.fingerprint != observed.unverified
        or container.fingerprint != desired.launch.fingerprint
        or container_changes(planned)
    ):
        return ()
    return (
        Step(
            "verify",
            container.name,
            Action.READ,
            "launched by an apply that did not verify it (interrupted?): verify it (as `kimik3 verify`)",
            spec=VerifyServer(container.name, container.fingerprint),
            cost="health, models, text, tool call, two turns: a few short requests",
        ),
    )
