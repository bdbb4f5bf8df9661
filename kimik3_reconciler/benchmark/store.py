"""Bench runs in kimik3's state (StatePort records): one record per run under the deployment fingerprint
it measured, and a per-profile index that `--compare` and `tune` read."""

from __future__ import annotations

from kimik3_reconciler.model.bench import BenchRun, bench_index_key, bench_run_key
from kimik3_reconciler.ports import StatePort


def _index(state: StatePort, profile: str) -> dict:
    """The profile's index, its entries of the right shape only (a record edited by hand or of another version
    loses those entries, never the command)."""
    runs = (state.read(bench_index_key(profile)) or {}).get("runs")
    return {
        "runs": [e for e in runs if isinstance(e, dict) and isinstance(e.get("key"), str)]
        if isinstance(runs, list)
        else []
    }


def keep(state: StatePort, run: BenchRun) -> str:
    stamp = run.date.replace(":", "").replace("-", "")
    index = _index(state, run.profile)
    n = len(index["runs"])
    key = bench_run_key(run.profile, run.fingerprint, f"{stamp}-{n:04d}")
    state.write(key, run.to_json())
    index["runs"].append({"key": key, "fingerprint": run.fingerprint, "date": run.date})
    state.write(bench_index_key(run.profile), index)
    return key


def kept(state: StatePort, profile: str) -> list[BenchRun]:
    """Every kept run of the profile, oldest first (a record removed by hand, or unreadable, is skipped)."""
    runs = []
    for entry in _index(state, profile)["runs"]:
        data = state.read(entry["key"])
        if data is None:
            continue
        try:
            run = BenchRun.from_json(data)
            hash(run.fingerprint)  # a key of latest_per_fingerprint
        except (AttributeError, KeyError, TypeError, ValueError):  # edited or another version: skipped as removed
            continue
        runs.append(run)
    return runs


def latest_per_fingerprint(runs: list[BenchRun]) -> list[BenchRun]:
    """The newest run of each deployment, in the order the deployments were first measured."""
    newest: dict[str, BenchRun] = {}
    for run in runs:
        newest.pop(run.fingerprint, None)
        newest[run.fingerprint] = run
    return list(newest.values())
