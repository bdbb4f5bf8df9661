"""The measurement of the slots policy (then bench/slot_route.py, the bench routing itself; now routing/slot_route.py,
kimik3's router) against smg's cache_aware (issue 40 item 4), kept as
tests/fixtures/bench/slot-route.json (the benches' --json, 2026-12-05): the figures docs/operations.md quotes
("Prefix-cache routing") follow from those runs through the benches' own summaries; no assertion on the timings'
values beyond that."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bench_tables import quoted, table_rows

from bench.fleet_cache import summary as cache_summary
from bench.fleet_cache_rollout import summary as rollout_summary

ROOT = Path(__file__).resolve().parents[3]
RECORD = json.loads((ROOT / "tests" / "fixtures" / "bench" / "slot-route.json").read_text())
DOCS = " ".join((ROOT / "docs" / "operations.md").read_text().split())


@pytest.mark.parametrize("invocation", [0, 1])
def test_the_steady_trace_ratios_in_the_docs_follow_from_the_runs(invocation: int):
    runs = RECORD["fleet_cache"][invocation]
    policies = [p["policy"] for p in runs[0]]
    assert all([p["policy"] for p in run] == policies for run in runs) and len(runs) >= 2
    assert policies[0] == "cache_aware" and "slots" in policies
    assert all(p["failed"] == 0 and not p["cut"] and p["requests"] == 144 for run in runs for p in run)
    checked = 0
    for line in cache_summary(runs, policies):
        if " x median" in line and line.split(":")[0].strip() in ("slots", "manual:min_load"):
            for part in line.split(";"):
                assert quoted(part) in DOCS, part
                checked += 1
    assert checked >= 3


def test_the_steady_trace_table_in_the_docs_is_the_runs():
    rows = list(table_rows(RECORD["fleet_cache"]))
    assert len(rows) == sum(len(phases) for runs in RECORD["fleet_cache"] for phases in runs) > 0
    for row in rows:
        assert row in DOCS, row


ROLLOUTS = {
    "rollout": ["cache_aware", "slots"],
    "rollout_min_load": ["cache_aware", "manual:min_load", "slots"],
    "rollout_cold": ["cache_aware", "slots"],
}


@pytest.mark.parametrize("record", ROLLOUTS)
def test_every_warm_rollout_routed_by_slots_kept_a_fair_share_and_none_failed(record: str):
    rollouts = RECORD[record]
    assert all(r["warm"] == (record != "rollout_cold") and r["failed"] == 0 and r["out"] == "remove" for r in rollouts)
    slots = [r for r in rollouts if r["policy"] == "slots"]
    assert len(slots) >= 2 and min(min(r["after"]["shares"].values()) for r in slots) >= 0.8 / 3
    for run in {r["run"] for r in rollouts}:  # every run rolled under each policy: paired
        assert sorted(r["policy"] for r in rollouts if r["run"] == run) == sorted(ROLLOUTS[record])


@pytest.mark.parametrize("record", ROLLOUTS)
def test_the_rollout_figures_in_the_docs_follow_from_the_runs(record: str):
    rollouts = RECORD[record]
    warm = record != "rollout_cold"
    kind = "" if warm else " (cold)"
    for line in rollout_summary(rollouts, ROLLOUTS[record], (warm,), 60.0):
        if "least replica share" in line:
            least = line.split("least replica share ", 1)[1].split(" (goal")[0]
            assert f"{line.split(' ')[0]}{kind}: least share {least}" in DOCS, line
    for r in rollouts:
        shares = " / ".join(f"{v:.2f}" for v in r["after"]["shares"].values())
        assert f"| {r['policy']}{kind} | {r['before']['hit rate']:.1%} |".replace("%", " %") in DOCS, r
        assert f"| {shares} | {r['after']['requests']} |" in DOCS, r


# Through kimik3's router as shipped (bench/fleet_cache_rollout.py's `slots` starting `kimik3 fleet route` in front of
# smg, as `fleet apply` does; the void count fixed to one a reply): docs/operations.md "kimik3's router".
ROUTER_ROLLOUTS = {"router_rollout": "", "router_rollout_cold": " (cold)"}


def router_row(r: dict, kind: str) -> str:
    """A rollout's row as docs/operations.md writes it."""
    shares = r["after"]["shares"].values()
    misses = " / ".join(f"{r['misses'][span][1]} of {r['misses'][span][0]}" for span in ("before", "during", "after"))
    row = (
        f"| {r['run']} | {r['policy']}{kind} | {r['before']['hit rate']:.1%} | {r['after']['hit rate']:.1%} | "
        f"{r['ratio']:.1%} | {' / '.join(f'{v:.2f}' for v in shares)} | {min(shares):.2f} | {r['after']['requests']} | "
        f"{r['failed']} | {r.get('voids', '–')} | {misses} |"
    )
    return row.replace("%", " %")


@pytest.mark.parametrize("record", [r for r in ROUTER_ROLLOUTS if r in RECORD])
def test_the_shipped_routers_rollout_tables_are_the_runs(record: str):
    kind = ROUTER_ROLLOUTS[record]
    rollouts = RECORD[record]
    assert {r["policy"] for r in rollouts} == {"cache_aware", "slots"} and all(r["out"] == "remove" for r in rollouts)
    assert all(r["warm"] == (kind == "") for r in rollouts) and all(
        ("voids" in r) == (r["policy"] == "slots") for r in rollouts
    )
    for r in rollouts:
        assert router_row(r, kind) in DOCS, router_row(r, kind)


@pytest.mark.parametrize("record", [r for r in ROUTER_ROLLOUTS if r in RECORD])
def test_the_shipped_routers_counts_of_goals_met_are_the_runs(record: str):
    kind = ROUTER_ROLLOUTS[record]
    for policy in ("cache_aware", "slots"):
        mine = [r for r in RECORD[record] if r["policy"] == policy]
        shares = sum(min(r["after"]["shares"].values()) >= 0.8 / 3 for r in mine)
        ratios = sum(r["ratio"] >= 0.95 for r in mine)
        said = f"{policy}{kind}: every replica ≥ 0.27 in {shares} of {len(mine)}, after/before ≥ 95 % in {ratios} of {len(mine)}"
        assert said in DOCS, said
