"""The Ansible target (the default): `kimik3 apply` on each host over SSH, the rollout one playbook (fleet/playbook.py:
the play, its router steps, gates and rescue) run by `ansible-playbook`; the hosts' model mirrors stopped after it
whatever its outcome. Moved here from `fleet apply`'s command as it was; the effects are the runner the CLI hands in
(adapters/ansible_play.py, with the documents written to the run folder)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from kimik3_reconciler.fleet.playbook import (
    Install,
    RolloutHost,
    RouterStep,
    inventory,
    mirror_stop_playbook,
    playbook,
)
from kimik3_reconciler.fleet.targets import Replica
from kimik3_reconciler.fleet.values import Fleet


class PlaybookRunner(Protocol):
    """Writes `documents` (file name -> data) into the run folder and runs the named playbook over the named
    inventory; ansible-playbook's exit status."""

    def write(self, documents: Mapping[str, object]) -> None: ...

    def run(self, playbook_name: str, inventory_name: str) -> int: ...


class AnsibleTarget:
    """fleet/targets.Target through one Ansible playbook; `code`: ansible-playbook's exit status after `roll`."""

    name = "ansible"

    def __init__(
        self,
        runner: PlaybookRunner,
        hosts: Sequence[RolloutHost],
        step: RouterStep,
        install: Install | None = None,
        registry: str | None = None,
    ) -> None:
        self.runner, self.hosts, self.step, self.install, self.registry = runner, hosts, step, install, registry
        self.code = 0

    def render(self, fleet: Fleet, batches: Sequence[Sequence[str]]) -> None:
        """The run folder's inventory and playbook (written also when nothing is left to roll: what would run)."""
        self.runner.write(
            {
                "inventory.json": inventory(self.hosts, batches),
                "playbook.yaml": playbook(fleet.name, batches, self.step, self.install, self.registry),
            }
        )

    def roll(self, fleet: Fleet, batches: Sequence[Sequence[str]]) -> None:
        self.runner.write({"mirrors-stop.yaml": mirror_stop_playbook()})
        try:
            self.code = self.runner.run("playbook.yaml", "inventory.json")
        finally:
            # The hosts' model mirrors serve only during the rollout, whatever its outcome.
            self.runner.run("mirrors-stop.yaml", "inventory.json")

    def replicas(self, fleet: Fleet) -> dict[str, Replica]:
        return {}  # only the hosts know: `fleet status` asks each one's kimik3 over SSH
