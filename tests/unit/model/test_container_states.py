"""The container's derived states (ContainerFact.up / loaded / serving): the one reading of docker's states
that the planners, the host gate and verify share."""

from __future__ import annotations

import pytest

from kimik3_reconciler.model.facts import ContainerFact


@pytest.mark.parametrize(
    ("state", "health", "up", "loaded", "serving"),
    [
        ("running", "ok", True, True, True),
        ("running", "loading", True, True, False),
        ("restarting", None, True, True, False),
        ("paused", "unreachable", False, True, False),  # frozen with the model in memory: not up, still loaded
        ("exited", None, False, False, False),
        ("created", None, False, False, False),
        ("dead", None, False, False, False),
    ],
)
def test_each_docker_state_reads_one_way(state, health, up, loaded, serving) -> None:
    fact = ContainerFact(id="c" * 64, name="k3", state=state, health=health)
    assert (fact.up, fact.loaded, fact.serving) == (up, loaded, serving)
    assert "up" not in fact.model_dump()  # derived, never part of status --json or a saved plan's basis
