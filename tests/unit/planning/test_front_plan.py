"""What the plan tells about the hold (issue 29): the predicted hold (the health step's downtime), the drain timeout,
the queue and wait bounds, the Retry-After clients get; and that a wait bound under the predicted hold means 503s.
The cases are tests/cases/plan/190, 193 and 194 (their steps are checked by test_plan_cases.py; their cost lines here)."""

from __future__ import annotations

from pathlib import Path

import yaml
from test_plan_cases import build_case

from kimik3_reconciler.model.front import HoldOrder
from kimik3_reconciler.planning import plan

CASES = Path(__file__).resolve().parents[2] / "cases" / "plan"


def hold_step(case: str):  # noqa: ANN201
    desired, observed = build_case(yaml.safe_load((CASES / case).read_text()))
    made = plan(desired, observed)
    health = next(s for s in made.steps if s.kind == "health")
    return next(s for s in made.steps if s.kind == "front" and s.changes), health


def test_the_hold_says_how_long_clients_wait_and_within_what_bounds() -> None:
    hold, health = hold_step("190-handover-knob-change.yaml")
    predicted = health.cost.split("predicted downtime ~")[1].split(" ")[0]
    assert f"clients held ~{predicted} " in hold.cost
    assert "drain up to 45 s" in hold.cost and "at most 32 held, each up to 10 min" in hold.cost
    order = HoldOrder.from_json(hold.spec.order)
    assert (order.drain_s, order.queue, order.wait_s) == (45, 32, 600)
    assert f"503 Retry-After {order.retry_after_s} s" in hold.cost and 1 <= order.retry_after_s <= 120
    assert order.lease_s > order.drain_s + order.wait_s  # the front lets go only after every held request gave up
    assert "under the predicted hold" not in hold.cost


def test_a_wait_bound_under_the_predicted_hold_is_said() -> None:
    hold, _ = hold_step("193-handover-wait-under-the-hold.yaml")
    assert "wait_s 30 s is under the predicted hold: held requests will get 503" in hold.cost


def test_the_hold_predicts_the_partial_preread_as_the_health_step_does() -> None:
    """Issue 38 item 12: where only a part of the model fits the page cache the hold said a whole warm load's
    downtime (from the page cache), much shorter than the health step's (the part cached warm, the rest from disk)."""
    hold, health = hold_step("194-handover-hold-partial-preread.yaml")
    predicted = health.cost.split("predicted downtime ~")[1].split(" (")[0]
    assert "partial pre-read:" in health.cost
    assert f"clients held ~{predicted} (the predicted downtime: partial pre-read: " in hold.cost
    how = health.cost.split("predicted downtime ~")[1].split(" (", 1)[1].split("; gives up")[0]
    assert f"(the predicted downtime: {how} plus verify" in hold.cost
