"""Plan the front (issue 29, metrics.handover): `kimik3 front-serve <profile>`, kimik3's proxy as a process of its own
on serve.port. Its fingerprint leaves the server's out, so a relaunch of the server never replaces it; it is started
when absent, replaced when its own inputs move or it stops answering, stopped when handover goes. Before a planned
replacement of a serving server the plan holds the front's clients (`FrontHold`): the plan says what they will see."""

from __future__ import annotations

import math

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.front import FrontConfig, HoldOrder
from kimik3_reconciler.model.helpers import FRONT
from kimik3_reconciler.model.humanize import duration
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import handover
from kimik3_reconciler.model.specs import FrontHold, FrontStop
from kimik3_reconciler.planning.container_step import container_changes, plan_container
from kimik3_reconciler.planning.desired import Desired, changes
from kimik3_reconciler.planning.front_unit import plan_front_unit
from kimik3_reconciler.planning.health_step import predicted_downtime
from kimik3_reconciler.planning.helper_step import plan_detached, plan_helper_teardown
from kimik3_reconciler.planning.launch import bind_address

# A held request's Retry-After, when the front refuses it, is the predicted hold: bounded so a client neither
# hammers (1 s) nor gives up on a server that is back in a minute.
RETRY_AFTER_S = (1, 120)
# The front lets go by itself this long after the last held request gave up (an apply killed mid-hold).
LEASE_MARGIN_S = 60


def render_front(desired: Desired, observed: Observed) -> FrontConfig | None:
    """The front this profile wants on this host; None without metrics.handover."""
    profile, launch = desired.profile, desired.launch
    if handover(profile) is None:
        return None
    return FrontConfig(
        profile=profile.name,
        bind=bind_address(profile, observed)[0],
        port=profile.serve.port,
        server_url=launch.input.server_url,
        api_key_file=launch.input.serve.api_key_file,
    )


def _running(observed: Observed, planned: tuple[Step, ...]):  # noqa: ANN202 - ExporterFact | None
    return None if changes(planned, FrontStop) else observed.front


def plan_release_front(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Before the exporter and the container: a front the profile no longer wants still holds serve.port, which
    the exporter's proxy or llama-server binds next; it is stopped first."""
    running = observed.front
    if running is None or render_front(desired, observed) is not None:
        return ()
    why = "metrics.handover removed" if running.alive else "record of a front that no longer runs"
    return (
        Step(
            "front",
            desired.profile.name,
            Action.DELETE,
            why,
            spec=FrontStop(desired.profile.name, running.pid if running.alive else 0),
        ),
    )


def plan_hold(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Right before the swap (after the pre-read: the old server serves through it), when a front of this profile
    serves and the container is replaced: hold the clients, and say for how long and within what bounds."""
    spec, wanted = handover(desired.profile), render_front(desired, observed)
    running = _running(observed, planned)
    if spec is None or wanted is None or running is None or running.serving != wanted.fingerprint:
        return ()  # no front answering yet: this apply starts it after the server (nothing to hold)
    container = observed.container
    if container is None or not container.serving or not container_changes(plan_container(desired, observed, planned)):
        return ()
    # The health step's prediction: a partial pre-read leaves only a part of the model in the page cache, and an
    # engine's fixed start-up (vLLM, SGLang) adds to the load: the hold lasts as long as that downtime does.
    seconds, how = predicted_downtime(desired, observed, planned)
    retry = int(min(max(math.ceil(seconds), RETRY_AFTER_S[0]), RETRY_AFTER_S[1]))
    order = HoldOrder(
        drain_s=float(spec.drain_s),
        queue=spec.queue,
        wait_s=float(spec.wait_s),
        lease_s=float(spec.drain_s + spec.wait_s + LEASE_MARGIN_S),
        retry_after_s=retry,
    )
    public = wanted.control_url.split("/.kimik3")[0]
    return (
        Step(
            "front",
            public,
            Action.READ,
            f"hold new requests at {public} while the server is replaced; in-flight ones finish first",
            spec=FrontHold(desired.profile.name, wanted.control_url, order.to_json()),
            cost=f"clients held ~{duration(seconds)} (the predicted downtime: {how}) plus verify; drain up to "
            f"{duration(spec.drain_s)}; at most {spec.queue} held, each up to {duration(spec.wait_s)}, past "
            f"either 503 Retry-After {retry} s"
            # A wait bound under the predicted hold turns every held request into a 503: said here.
            + (
                f"; wait_s {duration(spec.wait_s)} is under the predicted hold: held requests will get 503"
                if spec.wait_s < seconds
                else ""
            ),
        ),
    )


def plan_front(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    wanted = render_front(desired, observed)
    running = _running(observed, planned)
    if wanted is None:
        return ()  # plan_release_front stopped it
    if desired.profile.systemd is not None:
        # Under `systemd:` the front is a unit next to the server's (planning/front_unit.py): systemd restarts it.
        return plan_front_unit(desired.profile, observed, wanted)
    if running is not None and running.unit is not None:
        running = None  # it ran as a unit, removed above with the `systemd:` section (plan_stale_units): start it
    target = wanted.control_url.split("/.kimik3")[0]
    return plan_detached(
        FRONT,
        wanted,
        running,
        target,
        swap_ports=f"the public port {target}",
        started=f" (it holds {target} from now on)",
        unanswered="does not answer",
        steady=f"holds {target}",
    )


def plan_front_teardown(desired_name: str, observed: Observed) -> tuple[Step, ...]:
    """destroy: stop the front (it would answer 502 for a server that is gone)."""
    return plan_helper_teardown(FRONT, desired_name, observed.front)
