"""Where a fleet's replicas run: one module per target, each holding what differs there (the way engines/ holds
what differs between serving engines). The fleet file's `target:` chooses who runs the replicas; the fleet file,
its validation, the rollout policy, the router and its drain are the same for every target.

  ansible.py     the default: `kimik3 apply` on each host over SSH, the rollout one Ansible playbook
  slurm.py       each replica a job pinned to its node (a main server with RPC workers: one heterogeneous job), the
                 rollout node by node through sbatch/scancel/srun (slurm_section.py: the fleet file's `slurm:`)
  kubernetes.py  `kimik3 fleet render --target kubernetes`: the manifests a GitOps repo commits, render only
                 (kubernetes_router.py: smg in front; kubernetes_objects.py: the manifests' shared values;
                 kubernetes_section.py: the fleet file's `kubernetes:` section)

A target does what `fleet apply` and `fleet status` need of it (`Target`); its effects come through adapters the CLI
hands it, the decisions stay here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kimik3_reconciler.fleet.values import Fleet


@dataclass(frozen=True)
class Replica:
    """A replica as its target sees it: `state` (running, pending, absent, ...), `where` (the node(s)), `job` (the
    target's handle: a Slurm job id; "" where the target has none) and what else it says (`detail`)."""

    host: str
    state: str
    where: str = ""
    job: str = ""
    detail: str = ""


class Target(Protocol):
    """What a target does for `fleet apply` and `fleet status`."""

    name: str

    def roll(self, fleet: Fleet, batches: Sequence[Sequence[str]]) -> None:
        """Replace the replicas of `batches`, batch by batch, each out of the router, gated, and back in; the
        outcome (hosts done, the host that failed a gate) in the rollout record, as the router steps write it."""
        ...

    def replicas(self, fleet: Fleet) -> Mapping[str, Replica]:
        """Each replica's state as the target knows it ({} where only the hosts themselves know: Ansible)."""
        ...
