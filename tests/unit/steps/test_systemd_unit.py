"""The unit step on in-memory fakes (FakeUnits): install, drift, enable, conflicts, removal, no systemd."""

from __future__ import annotations

import pytest
from test_orchestrator import PROFILE, load, world  # noqa: F401 - `world` is a fixture

from kimik3_reconciler.errors import PlanError, ProfileError
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.specs import StopUnit
from kimik3_reconciler.model.unit_files import env_path, unit_path

UNIT = "k3-test.service"
WITH_UNIT = PROFILE + "systemd: {unit: k3-test, enable: false}\n"


def units_of(orchestrator):  # noqa: ANN001, ANN201 - the FakeUnits of the world
    return orchestrator.ports.units


def changes(plan) -> list[tuple[str, Action]]:  # noqa: ANN001
    return [(s.kind, s.action) for s in plan.changes]


def test_first_apply_installs_and_starts_the_unit_after_health(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    result = orchestrator.apply(load(WITH_UNIT))
    assert [(s.kind, s.action) for s in result.executed][-2:] == [("health", Action.READ), ("unit", Action.CREATE)]
    units = units_of(orchestrator)
    assert units.files[unit_path(UNIT)].startswith("# kimik3: fingerprint=")
    assert "KIMIK3_CONTAINER=k3-test" in units.files[env_path(UNIT)].splitlines()
    assert units.calls == [
        f"write {env_path(UNIT)}",
        f"write {unit_path(UNIT)}",
        "systemctl daemon-reload",
        f"systemctl disable {UNIT}",
        f"systemctl reset-failed {UNIT}",
        f"systemctl start {UNIT}",
    ]
    assert units.state[UNIT]["ActiveState"] == "active" and units.state[UNIT]["UnitFileState"] == "disabled"
    # systemd supervises: dockerd must not restart the container too (nor start it at boot).
    assert docker.containers["k3-test"]["spec"].restart_policy == "no"
    assert result.final.converged
    assert not orchestrator.apply(load(WITH_UNIT)).changed


def hand_edited(fixture: tuple, path: str, old: str, new: str) -> tuple:  # (orchestrator, units, text, plan)
    """WITH_UNIT applied, then `old` replaced by `new` in the file `path` by hand: the orchestrator, the fake units,
    the file as kimik3 wrote it, and the plan made after the edit."""
    orchestrator = fixture[0]  # the `world` fixture
    orchestrator.apply(load(WITH_UNIT))
    units = units_of(orchestrator)
    written = units.files[path]
    units.files[path] = written.replace(old, new)
    return orchestrator, units, written, orchestrator.plan(load(WITH_UNIT))


def test_a_hand_edited_unit_is_drift_that_apply_restores(world):  # noqa: F811
    orchestrator, units, rendered, plan = hand_edited(world, unit_path(UNIT), "TimeoutStopSec=150", "TimeoutStopSec=5")
    assert changes(plan) == [("unit", Action.UPDATE)]
    assert "edited by hand" in plan.changes[0].reason
    assert [str(d) for d in plan.changes[0].diff] == ["unit Service.TimeoutStopSec: 5 → 150"]
    orchestrator.apply(load(WITH_UNIT))
    assert units.files[unit_path(UNIT)] == rendered


def test_an_edited_or_missing_env_file_is_restored(world):  # noqa: F811
    edit = ("KIMIK3_CONTAINER=k3-test", "KIMIK3_CONTAINER=k3-test # the main one")
    orchestrator, units, env, plan = hand_edited(world, env_path(UNIT), *edit)
    assert "env file /etc/kimik3/k3-test.env was edited by hand" in plan.changes[0].reason
    assert [str(d) for d in plan.changes[0].diff] == ["env KIMIK3_CONTAINER: k3-test # the main one → k3-test"]
    del units.files[env_path(UNIT)]
    assert "is missing: write it" in orchestrator.plan(load(WITH_UNIT)).changes[0].reason
    orchestrator.apply(load(WITH_UNIT))
    assert units.files[env_path(UNIT)] == env


def test_enable_flips_without_touching_file_or_container(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load(WITH_UNIT))
    calls = len(docker.calls)
    boot = load(WITH_UNIT.replace("enable: false", "enable: true"))
    plan = orchestrator.plan(boot)
    assert changes(plan) == [("unit", Action.UPDATE)]
    assert [str(d) for d in plan.changes[0].diff] == ["enabled: disabled → enabled"]
    orchestrator.apply(boot)
    assert units_of(orchestrator).state[UNIT]["UnitFileState"] == "enabled" and docker.calls[calls:] == []


def test_a_stopped_or_failed_unit_is_started_again(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load(WITH_UNIT))
    units = units_of(orchestrator)
    units.systemctl("stop", UNIT)  # the operator's on-demand stop: the container stops with it
    plan = orchestrator.plan(load(WITH_UNIT))
    assert changes(plan) == [("container", Action.UPDATE), ("health", Action.READ), ("unit", Action.UPDATE)]
    assert "unit inactive: start it" in plan.changes[-1].reason
    orchestrator.apply(load(WITH_UNIT))
    assert units.state[UNIT]["ActiveState"] == "active"
    units.state[UNIT].update(ActiveState="failed", Result="exit-code")
    assert (
        "unit failed (result exit-code): reset it and start it" in orchestrator.plan(load(WITH_UNIT)).changes[0].reason
    )


def test_without_systemd_as_pid1_the_plan_refuses_the_unit_but_plain_profiles_plan(world):  # noqa: F811
    orchestrator, _, _, _ = world
    units_of(orchestrator).is_booted = False
    with pytest.raises(PlanError, match="systemd is not PID 1 on this host"):
        orchestrator.plan(load(WITH_UNIT))
    assert orchestrator.apply(load()).final.converged
    assert units_of(orchestrator).calls == []  # a plain profile makes no systemctl call


def test_a_systemd_without_docker_service_is_refused(world):  # noqa: F811
    orchestrator, _, _, _ = world
    units_of(orchestrator).has_docker_service = False
    with pytest.raises(PlanError, match="no docker.service"):
        orchestrator.plan(load(WITH_UNIT))


def test_a_unit_kimik3_did_not_install_is_never_overwritten(world):  # noqa: F811
    orchestrator, _, _, _ = world
    units = units_of(orchestrator)
    units.files[unit_path(UNIT)] = "[Unit]\nDescription=the operator's own\n"
    with pytest.raises(PlanError, match="was not installed by kimik3"):
        orchestrator.plan(load(WITH_UNIT))
    units.files[unit_path(UNIT)] = "# kimik3: fingerprint=0123456789abcdef profile=someone-else\n[Unit]\n"
    with pytest.raises(PlanError, match="belongs to kimik3 profile someone-else"):
        orchestrator.plan(load(WITH_UNIT))


def test_a_packaged_unit_or_a_template_name_is_refused(world):  # noqa: F811
    orchestrator, _, _, _ = world
    units_of(orchestrator).packaged[UNIT] = "/lib/systemd/system/k3-test.service"
    with pytest.raises(PlanError, match=r"already exists \(/lib/systemd/system/k3-test.service\)"):
        orchestrator.plan(load(WITH_UNIT))
    # a template is refused at validate now (cases/profile/systemd_unit_template.yaml), before any plan
    with pytest.raises(ProfileError, match=r"a template name \('name@'\)"):
        load(WITH_UNIT.replace("unit: k3-test,", "unit: k3-test@,"))


def test_destroy_removes_only_what_kimik3_installed_for_the_profile(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load(WITH_UNIT))
    units = units_of(orchestrator)
    foreign = "/etc/systemd/system/operator.service"
    units.files[foreign] = "[Unit]\nDescription=not ours\n"
    units.calls.clear()
    teardown = orchestrator.destroy(load(WITH_UNIT), images=False, model=False)
    assert [(s.kind, s.action) for s in teardown.steps][:2] == [("unit", Action.DELETE), ("container", Action.DELETE)]
    assert unit_path(UNIT) not in units.files and env_path(UNIT) not in units.files
    assert foreign in units.files
    assert units.calls == [
        f"systemctl stop {UNIT}",
        f"systemctl disable {UNIT}",
        f"rm {unit_path(UNIT)}",
        f"rm {env_path(UNIT)}",
        "systemctl daemon-reload",
        f"systemctl reset-failed {UNIT}",
    ]
    assert "k3-test" not in docker.containers


def test_dropping_the_systemd_section_removes_the_unit_before_the_relaunch(world):  # noqa: F811
    orchestrator, _, _, _ = world
    orchestrator.apply(load(WITH_UNIT))
    plan = orchestrator.plan(load())
    assert changes(plan) == [
        ("preread", Action.READ),
        ("unit", Action.DELETE),
        ("container", Action.REPLACE),
        ("health", Action.READ),
    ]
    orchestrator.apply(load())
    assert not units_of(orchestrator).files


def test_the_conflicting_pair_switches_through_their_units(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    main = load(WITH_UNIT.replace("enable: false", "enable: false, conflicts: [k3-interactive]"))
    # The interactive profile lists no conflict: the shared port derives `Conflicts=k3-test.service`.
    interactive = load(WITH_UNIT.replace("k3-test", "k3-interactive"))
    orchestrator.apply(main)
    plan = orchestrator.plan(interactive)
    conflict = [s for s in plan.steps if s.kind == "conflict"]
    assert [(s.target, s.action, s.spec) for s in conflict] == [("k3-test", Action.UPDATE, StopUnit(UNIT))]
    assert "stop unit k3-test.service" in conflict[0].reason
    orchestrator.apply(interactive)
    units = units_of(orchestrator)
    assert "Conflicts=k3-test.service" in units.files[unit_path("k3-interactive.service")].splitlines()
    assert units.state[UNIT]["ActiveState"] == "inactive"
    assert docker.containers["k3-test"]["State"]["Status"] == "exited"
    # An operator switches back with systemd alone: starting one stops the other (Conflicts=).
    units.systemctl("start", UNIT)
    assert docker.containers["k3-test"]["State"]["Status"] == "running"
    assert docker.containers["k3-interactive"]["State"]["Status"] == "exited"
    assert units.state["k3-interactive.service"]["ActiveState"] == "inactive"
    assert orchestrator.plan(main).converged
