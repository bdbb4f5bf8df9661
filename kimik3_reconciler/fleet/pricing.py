"""The rollout priced before it runs (issue 36 item 2): its order, how long each host is out of the router, the
rollout's duration, the capacity timeline and the bytes to move, from the hosts' own plans; PURE.

A host with changes leaves the router for its drain (up to the drain timeout), its apply's compile (when its plan
builds) and its predicted downtime (the load, from its recorded load rates); a converged host never leaves. The
batches are the policy's (canary first, max_unavailable at a time) over the hosts that change."""

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


@dataclass(frozen=True)
class Transfer:
    """Model bytes one host lacks, and where they come from: the hub for the first, a peer holding them after."""

    host: str
    bytes: int
    source: str  # the hub's URL, or "peer NAME"
    model: str


@dataclass(frozen=True)
class RolloutPrice:
    batches: tuple[BatchPrice, ...]
    duration_s: float  # every drain immediate
    duration_max_s: float  # every drain taking the whole drain timeout
    timeline: tuple[tuple[float, int, str], ...]  # (seconds from start, hosts serving, what happened)
    transfers: tuple[Transfer, ...]
    unpriced: tuple[str, ...]  # hosts whose downtime the plan does not state (counted as 0 s)
    hosts: int
    min_serving: int

    @property
    def hub_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers if not t.source.startswith("peer "))

    @property
    def peer_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers if t.source.startswith("peer "))


def _out_s(plan: HostPlan) -> float:
    return (plan.build_s or 0.0) + (plan.downtime_s or 0.0)


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


def price_rollout(policy: RolloutPolicy, plans: Mapping[str, HostPlan]) -> RolloutPrice:
    """`plans`: the hosts planned (a host missing from it could not be planned: it stays where it is, counted as
    not serving, since nothing says it serves)."""
    changing = tuple(h for h in policy.hosts if h in plans and not plans[h].converged)
    serving_now = sum(1 for h in policy.hosts if h in plans)
    clock, batches, timeline = 0.0, [], [(0.0, serving_now, "start")]
    for hosts in policy.batches(among=changing):
        out = max(_out_s(plans[h]) for h in hosts)
        serving = serving_now - len(hosts)
        batches.append(BatchPrice(hosts, all(h in policy.canary for h in hosts), clock, out, serving))
        timeline.append((clock, serving, f"{', '.join(hosts)} out of the router: drain, apply"))
        clock += out
        timeline.append((clock, serving_now, f"{', '.join(hosts)} back in the router"))
    drains = len(batches) * policy.drain_timeout_s
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
    )
