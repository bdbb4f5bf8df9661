"""The agent trace's measurement (issue 40's hit-rate check), kept as tests/fixtures/bench/agent-trace.json (the
bench's --json of each invocation, `bench/fleet_cache.py --trace agent`, 2026-12-05): it was the trace and the
replica sizing bench/agent_trace.py makes now, and the table and ratios docs/operations.md quotes ("The agent
trace") are those runs' figures through the bench's own summary; no assertion on the timings' values beyond that."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from support.bench_tables import quoted, table_rows

from bench.agent_trace import coding_agent_trace, replica_sizing, reuse_bounds
from bench.fleet_cache import summary

ROOT = Path(__file__).resolve().parents[3]
RECORD = json.loads((ROOT / "tests" / "fixtures" / "bench" / "agent-trace.json").read_text())
DOCS = " ".join((ROOT / "docs" / "operations.md").read_text().split())
POLICIES = ["round_robin", "cache_aware", "slots"]
RUNS = [run for runs in RECORD["invocations"] for run in runs]


def test_the_runs_played_the_trace_and_the_replicas_the_bench_makes_now():
    trace = coding_agent_trace()
    assert RECORD["sizing"] == dataclasses.asdict(replica_sizing(trace))
    assert RECORD["bounds"] == list(reuse_bounds(trace))
    # each replica's prompt cache limit as sized: its log's `cache state` line (limits: MiB, the context's tokens)
    limits = f"(limits: {RECORD['sizing']['cache_ram_mib']:.3f} MiB, {RECORD['sizing']['ctx_size']} tokens,"
    assert all(limits in p["limits"] for run in RUNS for p in run)


def test_every_run_is_whole_two_at_least_and_no_request_failed():
    assert len(RUNS) >= 2
    assert all([p["policy"] for p in run] == POLICIES for run in RUNS)
    requests = sum(s.turns for s in coding_agent_trace())
    assert all(p["failed"] == 0 and not p["cut"] and p["requests"] == requests for run in RUNS for p in run)


def test_the_table_in_the_docs_is_the_runs():
    rows = list(table_rows(RECORD["invocations"], held=True))
    assert len(rows) == len(RUNS) * len(POLICIES)  # a row for each policy of each run
    for row in rows:
        assert row in DOCS, row


def test_the_ratios_against_round_robin_in_the_docs_follow_from_the_runs():
    checked = 0
    for line in summary(RUNS, POLICIES):
        if " x median" in line:
            for part in line.split(";"):
                assert quoted(part) in DOCS, part
                checked += 1
    assert checked == 6  # cache_aware and slots: hit rate, TTFT p50 and p95
