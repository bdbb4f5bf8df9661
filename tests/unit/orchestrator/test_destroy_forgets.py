"""`destroy` forgets what would bring the deployment back (issue 30, item 4), on fakes: the last good profile (the
revert target of a later failing apply) and an owed verify go with the container; a live reconcile loop of the
profile refuses the destroy (its next pass would launch it again)."""

from __future__ import annotations

import pytest
from test_orchestrator import PROFILE, load, world  # noqa: F401 - `world` is a fixture

from kimik3_reconciler.errors import LoadFailed, PlanError
from kimik3_reconciler.locking import new_holder
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.records import last_good_key, reconcile_loop_key, unverified_key

CHANGED = PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")


def records_step(plan):  # noqa: ANN001, ANN201 - model.plan.Plan -> Step
    return next(s for s in plan.steps if s.kind == "records")


def test_destroy_removes_the_revert_target_so_a_failing_apply_brings_nothing_back(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())  # recorded as the last good profile
    assert orchestrator.ports.state.read(last_good_key("k3-test")) is not None
    teardown = orchestrator.destroy(load(), images=False, model=False)
    step = records_step(teardown)
    assert step.action == Action.DELETE and step.target == last_good_key("k3-test")
    assert "a later failing apply of k3-test would relaunch it" in step.reason
    assert orchestrator.ports.state.read(last_good_key("k3-test")) is None and "k3-test" not in docker.containers
    docker.crash_on_start = True  # the next profile of that name cannot load
    with pytest.raises(LoadFailed) as failed:
        orchestrator.apply_or_revert(load(CHANGED))
    assert "reverted" not in str(failed.value)
    # What runs is nothing: the failed launch is stopped, and the destroyed one was not brought back.
    assert docker.containers["k3-test"]["State"]["Status"] == "exited"
    cmd = docker.containers["k3-test"]["Config"]["Cmd"]
    assert cmd[cmd.index("--ubatch-size") + 1] == "2048"


def test_destroy_forgets_an_owed_verify_too_and_a_dry_run_forgets_nothing(world):  # noqa: F811
    orchestrator, _, _, _ = world
    orchestrator.ports.verifier = lambda: None  # an apply that meant to verify, and died before it did
    orchestrator.apply(load())
    orchestrator.ports.verifier = None
    orchestrator.ports.state.write(last_good_key("k3-test"), {"text": PROFILE, "date": "2026-01-01T00:00:00+00:00"})
    shown = orchestrator.destroy(load(), images=False, model=False, execute_steps=False)
    assert records_step(shown).spec.keys == (last_good_key("k3-test"), unverified_key("k3-test"))
    assert orchestrator.ports.state.read(last_good_key("k3-test")) and orchestrator.ports.state.read(
        unverified_key("k3-test")
    )
    orchestrator.destroy(load(), images=False, model=False)
    assert orchestrator.ports.state.read(last_good_key("k3-test")) is None
    assert orchestrator.ports.state.read(unverified_key("k3-test")) is None
    again = orchestrator.destroy(load(), images=False, model=False)
    assert records_step(again).action == Action.NOOP and again.changes == ()


def test_destroy_is_refused_while_a_reconcile_loop_keeps_the_profile_converged(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    clock, state = orchestrator.ports.clock, orchestrator.ports.state
    loop = new_holder("reconcile", "k3-test", clock)
    state.write(
        reconcile_loop_key("k3-test"),
        {
            "holder": loop.to_json(),
            "file": "/etc/kimik3/k3.yaml",
            "interval_s": 60,
            "last_pass": clock.now().isoformat(),
        },
    )
    with pytest.raises(
        PlanError,
        match=r"a reconcile loop keeps k3-test converged: `kimik3 reconcile "
        r"/etc/kimik3/k3.yaml`.*stop the loop",
    ) as refused:
        orchestrator.destroy(load(), images=False, model=False)
    assert refused.value.exit_code == 3
    assert docker.containers["k3-test"]["State"]["Status"] == "running"  # nothing removed
    assert state.read(last_good_key("k3-test")) is not None
    clock.sleep(3600)  # the loop stopped coming (its process gone, no pass for an hour): no longer live
    orchestrator.destroy(load(), images=False, model=False)
    assert "k3-test" not in docker.containers and state.read(last_good_key("k3-test")) is None
