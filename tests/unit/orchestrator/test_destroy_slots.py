"""`destroy` and the volume of a deployment's saved slots (serve.slot_save, `kimik3-slots-<name>`), on fakes: kept
unless `--slots`, as the model cache (it holds users' conversations' KV cache), and named either way with how to
remove it; found by its name, so a volume an earlier launch made is named after serve.slot_save was turned off. The
real volume's lifecycle against dockerd: tests/integration/test_destroy_forgets_docker.py."""

from __future__ import annotations

from test_orchestrator import PROFILE, load, world  # noqa: F401 - `world` is a fixture

from kimik3_reconciler.model.plan import Action

SLOTS = PROFILE.replace("parallel: 2}", "parallel: 2, slot_save: true}")
VOLUME = "kimik3-slots-k3-test"


def slots_steps(plan):  # noqa: ANN001, ANN201 - model.plan.Plan -> list[Step]
    return [s for s in plan.steps if s.kind == "slots"]


def test_destroy_keeps_the_saved_slots_and_says_how_to_remove_them(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load(SLOTS))
    assert VOLUME in docker.volumes  # Docker made it at the launch
    teardown = orchestrator.destroy(load(SLOTS), images=False, model=False)
    (step,) = slots_steps(teardown)
    assert (step.target, step.action) == (VOLUME, Action.NOOP)
    assert "users' conversations' saved KV cache" in step.reason
    assert "pass --slots to remove, or `docker volume rm kimik3-slots-k3-test`" in step.reason
    assert "k3-test" not in docker.containers and VOLUME in docker.volumes


def test_destroy_slots_removes_the_volume_after_the_container(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load(SLOTS))
    shown = orchestrator.destroy(load(SLOTS), images=False, model=False, slots=True, execute_steps=False)
    assert VOLUME in docker.volumes  # a dry run removes nothing
    teardown = orchestrator.destroy(load(SLOTS), images=False, model=False, slots=True)
    assert teardown.steps == shown.steps
    (step,) = slots_steps(teardown)
    assert (step.target, step.action, step.spec.name) == (VOLUME, Action.DELETE, VOLUME)
    assert docker.calls.index(f"volume rm {VOLUME}") > docker.calls.index("rm k3-test")  # the fake refuses it in use
    assert VOLUME not in docker.volumes
    assert slots_steps(orchestrator.destroy(load(SLOTS), images=False, model=False, slots=True)) == []


def test_a_volume_left_by_an_earlier_launch_is_named_after_slot_save_is_turned_off(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load(SLOTS))
    orchestrator.apply(load())  # serve.slot_save off: the server is replaced, the volume stays (Docker keeps it)
    assert VOLUME in docker.volumes
    (step,) = slots_steps(orchestrator.destroy(load(), images=False, model=False, slots=True))
    assert step.action == Action.DELETE and VOLUME not in docker.volumes


def test_no_volume_no_slots_step(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load())
    assert docker.volumes == {}
    assert slots_steps(orchestrator.destroy(load(), images=False, model=False, slots=True)) == []
