"""A validated fleet as frozen values: its hosts (each with its effective profile), the rollout policy, the router.

This is the fleet's API for every command (`fleet plan`, `fleet status`, `fleet apply`): fleet/source.py makes it
from a fleet file; nothing here reads or runs anything."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import FieldPath


@dataclass(frozen=True)
class FleetHost:
    """One host of the fleet: how SSH reaches it, the groups it is in, its inventory vars, and the profile it
    serves with its overrides applied (`profile_text`: sent to the host as is; its relative paths made absolute
    against `profile_dir`, the folder they mean on that host)."""

    name: str
    address: str  # ansible_host, else the inventory name
    user: str | None  # ansible_user, else ssh's own default
    port: int | None  # ansible_port, else ssh's own default (22)
    groups: tuple[str, ...]
    vars: Mapping[str, Any]
    overrides: Mapping[str, Any]  # as written in the fleet file (the override tree)
    profile_text: str  # the effective profile, as YAML
    profile: Profile  # the effective profile, validated
    kimik3_command: tuple[str, ...]  # argv prefix that runs kimik3 there
    profile_dir: str  # absolute: what the profile's relative paths are relative to on that host

    @property
    def ssh_options(self) -> tuple[str, ...]:
        """ssh options from the inventory's connection vars, as Ansible's ssh connection passes them:
        ansible_ssh_private_key_file (-i), ansible_ssh_common_args and ansible_ssh_extra_args (split as a shell
        would, never run by one). The operator's inventory, never a profile field."""
        options: list[str] = []
        if key := self.vars.get("ansible_ssh_private_key_file"):
            options += ["-i", str(key)]
        for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
            if words := self.vars.get(name):
                options += shlex.split(str(words))
        return tuple(options)

    @property
    def ssh_target(self) -> str:
        """user@address (or address): what `ssh` connects to."""
        return f"{self.user}@{self.address}" if self.user else self.address


@dataclass(frozen=True)
class RolloutPolicy:
    """Batches of at most `max_unavailable` hosts, the canary hosts first and alone; what a failure does."""

    hosts: tuple[str, ...]  # the hosts rolled, in inventory order
    canary: tuple[str, ...]  # rolled first, in their own batch(es)
    max_unavailable: int
    on_failure: str  # halt | continue
    drain_timeout_s: float
    warm_prompts: str | None = None  # the operator's hot prompts file (absolute), rollout.warm_prompts
    hot_prompts: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)  # its prompts, as chat request bodies

    @property
    def min_serving(self) -> int:
        """The capacity floor: hosts in the router at every moment of a rollout that goes to plan."""
        return len(self.hosts) - self.max_unavailable

    def batches(self, among: Iterable[str] | None = None) -> tuple[tuple[str, ...], ...]:
        """The order: the canary hosts (in batches of max_unavailable), then the others (the same); `among`: only
        these hosts (those with changes), in the same order."""
        chosen = set(self.hosts if among is None else among)
        canary = tuple(h for h in self.canary if h in chosen)
        rest = tuple(h for h in self.hosts if h not in self.canary and h in chosen)
        return _chunks(canary, self.max_unavailable) + _chunks(rest, self.max_unavailable)


def _chunks(names: tuple[str, ...], size: int) -> tuple[tuple[str, ...], ...]:
    return tuple(names[i : i + size] for i in range(0, len(names), size))


@dataclass(frozen=True)
class RouterPlacement:
    """The router: its kind and pinned version, the host it runs on (`localhost`: where kimik3 fleet runs), port,
    policy."""

    kind: str
    version: str
    host: str
    port: int
    policy: str  # the policy in force: the fleet file's, else slots (fleet/router_layout.py)
    policy_given: bool = True  # the fleet file names it (the Kubernetes render refuses slots only then)


@dataclass(frozen=True)
class Fleet:
    """A validated fleet file: its name, the profile it serves, its hosts (those the rollout covers, inventory
    order), the rollout policy, the router; `inventory`: the inventory as written (for Ansible); `lines`: the line
    of every key in the fleet file."""

    name: str
    source: str
    profile_path: Path  # absolute
    hosts: tuple[FleetHost, ...]
    rollout: RolloutPolicy
    router: RouterPlacement
    inventory: Mapping[str, Any] = field(repr=False)
    lines: Mapping[FieldPath, int] = field(default_factory=dict, repr=False, compare=False)
    # The fleet file's `kubernetes:` section (fleet/targets/kubernetes_section.py), None where it has none.
    kubernetes: Any = None
    target: str = "ansible"  # fleet/targets/: what runs the replicas
    slurm: Any = None  # target slurm: the fleet file's `slurm:` section (fleet/targets/slurm_section.py), or None

    def host(self, name: str) -> FleetHost:
        return next(h for h in self.hosts if h.name == name)
