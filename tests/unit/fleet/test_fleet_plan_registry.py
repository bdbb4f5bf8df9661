"""`kimik3 fleet plan --registry`: the rollout priced as `fleet apply --registry` runs it (fleet/pricing.py
ImageShare, fleet/report.py): the first host rolled builds the image and pushes it, a host of its batch builds its
own, every later host pulls it by digest before it leaves the router and compiles nothing; in the rendered plan and
its JSON; and the wait for capacity a host not planned foretells. Host plans are values here (the hosts' own
`kimik3 plan --json` read: test_fleet_pricing.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.gather import HostAnswer
from kimik3_reconciler.fleet.host_plan import HostPlan
from kimik3_reconciler.fleet.pricing import price_rollout
from kimik3_reconciler.fleet.report import plan_document, plan_lines

DEMO = Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml"
REGISTRY = "10.0.0.5:5000"
COMPILE_S = 600.0
FLEET = """
apiVersion: kimik3/v1
kind: Fleet
name: f
profile: demo-cpu.yaml
inventory:
  all:
    children:
      canary:
        hosts: {a: {ansible_host: 127.0.0.1}, b: {ansible_host: 127.0.0.2}}
      serving:
        children: {canary: }
        hosts: {c: {ansible_host: 127.0.0.3}, d: {ansible_host: 127.0.0.4}}
rollout: {hosts: serving, canary: canary, max_unavailable: 2}
router: {version: "1.13.0", host: localhost}
"""


@pytest.fixture
def fleet(tmp_path: Path):  # noqa: ANN201 - fleet.Fleet: canary batch (a, b), then (c, d)
    (tmp_path / "demo-cpu.yaml").write_text(DEMO.read_text())
    (tmp_path / "fleet.yaml").write_text(FLEET)
    return parse_fleet(FLEET, str(tmp_path / "fleet.yaml"), read_text)


def _plan(host: str, build_s: float | None) -> HostPlan:
    return HostPlan(host, False, "2 to change", (), True, 40.0, build_s, 0, 0, "r@v/q", "https://hub")


# a, b, c lack the image (their plans compile it); d holds a build of it already
PLANS = {"a": _plan("a", COMPILE_S), "b": _plan("b", COMPILE_S), "c": _plan("c", COMPILE_S), "d": _plan("d", None)}
ANSWERS = tuple(HostAnswer(h, {}, version="1") for h in "abcd")


def test_with_the_registry_the_later_hosts_pull_the_image_and_compile_nothing(fleet) -> None:  # noqa: ANN001
    shared, alone = price_rollout(fleet.rollout, PLANS, REGISTRY), price_rollout(fleet.rollout, PLANS)
    assert [b.hosts for b in shared.batches] == [("a", "b"), ("c", "d")]
    assert [b.out_s for b in shared.batches] == [COMPILE_S + 40, 40]  # c's compile is not spent out of the router
    assert [b.out_s for b in alone.batches] == [COMPILE_S + 40, COMPILE_S + 40]
    assert (shared.duration_s, alone.duration_s) == (COMPILE_S + 80, 2 * COMPILE_S + 80)
    lines = plan_lines(fleet, ANSWERS, PLANS, shared)
    assert "  canary: a, b at +0 s: a ~40 s downtime + ~10.0 min compile, b ~40 s downtime + ~10.0 min compile; " in (
        "\n".join(lines)
    )
    assert (
        "  batch 2: c, d at +10.7 min: c ~40 s downtime (the image pulled before, not its ~10.0 min compile), "
        "d ~40 s downtime; 2 serving meanwhile"
    ) in lines
    assert lines[-1] == (
        "  image: built on a (~10.0 min compile), pushed to 10.0.0.5:5000 once a is back in rotation; pulled by "
        "digest by c, d before each leaves the router: ~10.0 min of compile not spent (c); b (the first batch) builds "
        "its own; the plans state no image size, and no link rate prices the push and the pulls"
    )
    assert not any("image:" in line for line in plan_lines(fleet, ANSWERS, PLANS, alone))
    assert "  batch 2: c, d at +10.7 min: c ~40 s downtime + ~10.0 min compile, " in "\n".join(
        plan_lines(fleet, ANSWERS, PLANS, alone)
    )


def test_the_json_names_who_builds_pushes_and_pulls(fleet) -> None:  # noqa: ANN001
    document = json.loads(
        json.dumps(plan_document(fleet, ANSWERS, PLANS, price_rollout(fleet.rollout, PLANS, REGISTRY)))
    )
    assert document["rollout"]["image"] == {
        "registry": REGISTRY,
        "pusher": "a",
        "builders": ["a", "b"],
        "pullers": ["c", "d"],
        "compiles_saved": ["c"],
        "compile_saved_s": COMPILE_S,
    }
    assert document["rollout"]["duration_s"] == COMPILE_S + 80
    assert plan_document(fleet, ANSWERS, PLANS, price_rollout(fleet.rollout, PLANS))["rollout"]["image"] is None


def test_a_first_host_that_holds_the_image_pushes_the_one_it_runs(fleet) -> None:  # noqa: ANN001
    plans = {**PLANS, "a": _plan("a", None), "b": _plan("b", None), "c": _plan("c", None)}
    line = plan_lines(fleet, ANSWERS, plans, price_rollout(fleet.rollout, plans, REGISTRY))[-1]
    assert line.startswith("  image: the one a runs, pushed to 10.0.0.5:5000 once a is back in rotation; pulled by ")
    assert "(no later host's plan compiles)" in line and "builds its own" not in line


def test_a_host_not_planned_names_the_capacity_wait_below_the_floor(fleet) -> None:  # noqa: ANN001
    """d not planned (counted as not serving): the canary batch (a, b) would leave c alone, below the floor of 2.
    Where none of the others comes back in the wait, `router: out` fails (cli/fleet_apply.py `_leaving`: PlanError)
    outside the play's rescue block, and `any_errors_fatal` halts the rollout there: the line says so, not only
    that the host stays in (fleet/playbook.py)."""
    plans = {h: PLANS[h] for h in "abc"}
    price = price_rollout(fleet.rollout, plans)
    lines = plan_lines(fleet, ANSWERS[:3], plans, price)
    assert (
        "  canary: a, b at +0 s: a ~40 s downtime + ~10.0 min compile, b ~40 s downtime + ~10.0 min compile; 1 serving "
        "meanwhile (below the floor of 2: fleet apply waits up to 60 s for the others' capacity, then halts the "
        "rollout there, a, b kept in)"
    ) in lines
    assert any(line.endswith("if every drain takes its whole timeout (and each capacity wait)") for line in lines)
    assert plan_document(fleet, ANSWERS[:3], plans, price)["rollout"]["batches"][0]["capacity_wait_s"] == 60.0


def test_hosts_not_planned_are_named_in_the_price_not_read_as_converged(fleet) -> None:  # noqa: ANN001
    """Every host unreachable printed 'nothing to roll: no planned host has changes' (the demo fleet's first plan)."""
    down = tuple(HostAnswer(h, None, "unreachable", f"{h} is unreachable over SSH") for h in "abcd")
    lines = plan_lines(fleet, down, {}, price_rollout(fleet.rollout, {}))
    assert "  not planned (above): a, b, c, d: priced without them, counted as not serving" in lines
    assert "  nothing to roll: no host was planned" in lines
    some = (*down[:2], *ANSWERS[2:])
    plans = {h: PLANS[h] for h in "cd"}
    lines = plan_lines(fleet, some, plans, price_rollout(fleet.rollout, plans))
    assert "  not planned (above): a, b: priced without them, counted as not serving" in lines
    assert not any("nothing to roll" in line for line in lines)
