"""The rollout priced before it runs (issue 36 item 2): its order, how long each host is out of the router, the
rollout's duration, the capacity timeline and the bytes to move, from the hosts' own plans; PURE.

A host with changes leaves the router for its drain (up to the drain timeout), its apply's compile (when its plan
builds) and its predicted downtime (the load, from its recorded load rates); a converged host never leaves. The
batches are the policy's (canary first, max_unavailable at a time) over the hosts that change. With the site's
registry (`fleet apply --registry`), the image is built once and pulled by the others (`ImageShare`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kimik3_reconciler.fleet.host_plan import HostPlan
from kimik3_reconciler.fleet.values import RolloutPolicy


@dataclass(frozen=True)
class BatchPrice:
    """One batch: its hosts, whether it is the canary, when it starts and how long it is out (drain excluded and
    with the whole drain timeout)."""

    hosts: tuple[str, ...]
    canary: bool
    start_s: float
    out_s: float  # the slowest host's compile + predicted downtime
    serving: int  # hosts in the router while it is out
    # The wait for the others' capacity before it leaves (cli/fleet_apply.py `_leaving`): none in a rollout to plan
    # (each batch is back in rotation before the next leaves); the drain timeout where fewer than the floor would be
    # left serving (a host not planned, counted as not serving) by a host in the router (one whose container is to
    # be created has no server yet: it leaves at once). Where none comes back meanwhile, `router: out` fails
    # outside the play's rescue (fleet/playbook.py, any_errors_fatal): the rollout halts there, the batch kept in.
    capacity_wait_s: float = 0.0


@dataclass(frozen=True)
class Transfer:
    """Model bytes one host lacks, and where they come from: the hub for the first, a peer holding them after."""

    host: str
    bytes: int
    source: str  # the hub's URL, or "peer NAME"
    model: str


@dataclass(frozen=True)
class ImageShare:
    """The serving image once per site, as `fleet apply --registry` moves it (fleet/playbook.py image_tasks): the
    first host rolled builds (or finds) it as its own plan says and pushes it once it is back in rotation; every host
    of a later batch pulls it by digest before it leaves the router, so its apply compiles nothing; a host of the
    first batch has no reference yet and builds its own. The image's size is not known before it is built, and no
    link rate is known: the push and the pulls are named, not timed."""

    registry: str
    pusher: str  # the first host rolled
    builders: tuple[str, ...]  # hosts of the first batch whose own plan compiles
    pullers: tuple[str, ...]  # every host of a later batch
    compiles_saved: tuple[str, ...]  # pullers whose own plan compiles: with the registry they do not
    compile_saved_s: float  # those compiles' predicted time, out of the router


@dataclass(frozen=True)
class RolloutPrice:
    batches: tuple[BatchPrice, ...]
    duration_s: float  # every drain immediate
    duration_max_s: float  # every drain taking the whole drain timeout, and the capacity waits foretold
    timeline: tuple[tuple[float, int, str], ...]  # (seconds from start, hosts serving, what happened)
    transfers: tuple[Transfer, ...]
    unpriced: tuple[str, ...]  # hosts whose downtime the plan does not state (counted as 0 s)
    hosts: int
    min_serving: int
    image: ImageShare | None = None  # with the site's registry

    @property
    def hub_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers if not t.source.startswith("peer "))

    @property
    def peer_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers if t.source.startswith("peer "))


def _out_s(plan: HostPlan, pulls_image: bool = False) -> float:
    return (0.0 if pulls_image else plan.build_s or 0.0) + (plan.downtime_s or 0.0)


def image_share(policy: RolloutPolicy, plans: Mapping[str, HostPlan], registry: str) -> ImageShare | None:
    """Who builds, pushes and pulls the image with the site's registry, over every host as `fleet apply` rolls
    them (a converged first host still pushes the image it runs); None for a fleet with no host."""
    batches = policy.batches()
    if not batches:
        return None
    first, later = batches[0], [h for batch in batches[1:] for h in batch]
    compiles = [h for h in later if h in plans and plans[h].build_s]
    return ImageShare(
        registry,
        first[0],
        tuple(h for h in first if h in plans and plans[h].build_s),
        tuple(later),
        tuple(compiles),
        sum(plans[h].build_s or 0.0 for h in compiles),
    )


def transfers(batches: tuple[tuple[str, ...], ...], plans: Mapping[str, HostPlan]) -> tuple[Transfer, ...]:
    """Bytes per host in rollout order, from where `fleet apply` then takes them (cli/fleet_mirror.py: every host
    serves its verified files from the start of the rollout; each host asks the others in rollout order, then
    the hub): from the first other host holding them when it is rolled (one that lacked nothing, or one of an
    earlier batch, which fetched them), else from the hub. A host of the same batch is rolled at the same time, so
    it holds nothing yet."""
    order = [(index, name) for index, batch in enumerate(batches) for name in batch if name in plans]
    moved = []
    for index, name in order:
        plan = plans[name]
        if plan.fetch_bytes == 0:
            continue
        peer = next(
            (
                other
                for at, other in order
                if other != name and plans[other].model == plan.model and (plans[other].fetch_bytes == 0 or at < index)
            ),
            None,
        )
        moved.append(Transfer(name, plan.fetch_bytes, f"peer {peer}" if peer else plan.hub, plan.model))
    return tuple(moved)


def price_rollout(policy: RolloutPolicy, plans: Mapping[str, HostPlan], registry: str | None = None) -> RolloutPrice:
    """`plans`: the hosts planned (a host missing from it could not be planned: it stays where it is, counted as
    not serving, since nothing says it serves). `registry`: `fleet apply --registry`'s (`image_share`)."""
    changing = tuple(h for h in policy.hosts if h in plans and not plans[h].converged)
    serving_now = sum(1 for h in policy.hosts if h in plans)
    image = image_share(policy, plans, registry) if registry else None
    pulls = set(image.pullers) if image else set()
    clock, batches, timeline = 0.0, [], [(0.0, serving_now, "start")]
    for hosts in policy.batches(among=changing):
        out = max(_out_s(plans[h], h in pulls) for h in hosts)
        serving = serving_now - len(hosts)
        # Below the floor only where a host is not planned: `_leaving` waits its drain timeout, then halts the rollout;
        # a host with no server yet is in no rotation and leaves at once.
        waits = serving < policy.min_serving and any(plans[h].serving for h in hosts)
        wait = policy.drain_timeout_s if waits else 0.0
        batches.append(BatchPrice(hosts, all(h in policy.canary for h in hosts), clock, out, serving, wait))
        timeline.append((clock, serving, f"{', '.join(hosts)} out of the router: drain, apply"))
        clock += out
        timeline.append((clock, serving_now, f"{', '.join(hosts)} back in the router"))
    # Each drain, and the capacity waits the plans foretell (a host not planned). Another wait for the others'
    # capacity (up to another drain timeout) comes only where hosts left the rotation for a reason no plan shows.
    drains = len(batches) * policy.drain_timeout_s + sum(b.capacity_wait_s for b in batches)
    unpriced = tuple(h for h in changing if plans[h].relaunch and plans[h].downtime_s is None)
    return RolloutPrice(
        tuple(batches),
        clock,
        clock + drains,
        tuple(timeline),
        transfers(policy.batches(), plans),  # every host: fleet apply rolls (and mirrors) each one
        unpriced,
        len(policy.hosts),
        policy.min_serving,
        image,
    )
