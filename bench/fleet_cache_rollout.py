"""Benchmark (issue 40 item 2): the fleet's prompt-cache hit rate through a rollout of all three hosts, with the
warm step (each host's busiest slots saved after its drain and restored before it rejoins) against without it.

On the fleet rig (tests/support/fleet_hosts.py; shared/TESTING.md §12), set up as the rollout test's (its fleet
file, names and ports) but with the router's cache_aware policy (kimik3's settings) and serve.slot_save on:

    flock /tmp/k3-fleet-rig.lock .venv/bin/python bench/fleet_cache_rollout.py [--runs 2] [--window 60]

bench/fleet_cache.py's agent-like trace (`agent_trace`: sessions of a few agents sharing long system prompts with
tool schemas, growing by a tool call and its result per turn; `send_turn`: streamed, TTFT as the client sees it)
runs through the router the whole time, continuously: `--clients` threads, each sending the next turn of one of its
sessions as soon as the last reply ended; a finished session is followed by a new one of the same agent. Per run,
two rollouts of the three hosts (an env change: model and context unchanged, every server replaced):

- warm: `kimik3 fleet apply` as it is (each host's slots restored before it rejoins);
- cold: the same with the hosts' warm records removed first, so no host keeps its slots (a rollout as before).

Per rollout: the fleet's hit rate (the servers' own counters, as `kimik3 fleet status` reads them) over `--window` s
before the rollout and over `--window` s from the moment the last host rejoined (`fleet apply` returned), the ratio
(goal >= 95 %), each replica's share of the requests smg sent in that window (`smg_worker_requests_total`;
goal >= 0.8/3), failed requests over the whole rollout (goal 0), TTFT
p50 in both windows, and what each host's warm step did.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import fleet_cache  # noqa: E402
import httpx  # noqa: E402
from fleet import deployed, every_host_in_rotation  # noqa: E402
from fleet_cache import Session, Turn, agent_trace, quantile, send_turn, watch_window  # noqa: E402
from integration.test_fleet_rollout_docker import FLEET, NAME, PORT, ROUTER_PORT, fleet_cmd, write_fleet  # noqa: E402
from support.fleet_hosts import GATEWAY, Rig, fleet_rig  # noqa: E402
from support.realparts import require_docker_and_demo_hub  # noqa: E402

from kimik3_demo.hub import FixtureHub  # noqa: E402
from kimik3_demo.prepare import demo_repos  # noqa: E402
from kimik3_reconciler.adapters.router_smg import SmgRouter  # noqa: E402

QUANT = "UD-Q2_K_XL"
# The tiny model's trained context is 4,096 tokens a slot: 4 slots of 4,096, every conversation of the trace fits one.
SERVE = {"slot_save": True, "parallel": 4, "ctx_size": 16384}
POLICY = {"policy": "cache_aware"}
fleet_cache.MODEL_NAME = NAME  # send_turn asks for the fleet's served name


class Trace:
    """The trace played continuously through the router by `clients` threads; every turn recorded."""

    def __init__(self, url: str, sessions: int, agents: int, turns: int, clients: int) -> None:
        self.url, self.sessions, self.agents, self.turns = url, sessions, agents, turns
        self.systems = [s.system for s in agent_trace(agents, agents, turns)]  # each agent's, kept for every session
        self.generation = 0
        self.played: list[Turn] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._queue: list[Session] = []
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _next(self) -> Session:
        with self._lock:
            if not self._queue:  # a new batch of sessions, the agents' system prompts as before
                self.generation += 1
                fresh = agent_trace(self.sessions, self.agents, self.turns, seed=40 + self.generation)
                self._queue = [
                    dataclasses.replace(s, name=f"g{self.generation}-{s.name}", system=self.systems[s.agent])
                    for s in reversed(fresh)
                ]
            return self._queue.pop()

    def __enter__(self) -> Trace:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(300)

    def _run(self) -> None:
        with httpx.Client(timeout=300) as client:
            while not self._stop.is_set():
                session = self._next()
                for turn in range(session.turns):
                    if self._stop.is_set():
                        return
                    outcome = send_turn(client, self.url, session, turn, 8)
                    with self._lock:
                        self.played.append(outcome)

    def between(self, start: float, end: float) -> list[Turn]:
        with self._lock:
            return [t for t in self.played if start <= t.started < end]


def _window(rig: Rig, trace: Trace, seconds: float) -> dict:
    """The fleet's hit rate, each replica's share of the requests smg sent and TTFT over the next `seconds`
    (bench/fleet_cache.py's `watch_window`: smg's per-worker counts, the servers' own counters)."""
    urls = {f"http://{h.address}:{PORT}": h.name for h in rig.hosts}
    start = time.monotonic()
    seen = watch_window(list(urls), f"http://127.0.0.1:{ROUTER_PORT + 1}", seconds)
    turns = trace.between(start, time.monotonic())
    return {
        "hit rate": seen.hit_rate if seen.hit_rate is not None else float("nan"),
        "shares": {urls[u]: share for u, share in seen.shares.items()},
        "ttft p50": quantile([t.ttft for t in turns if t.ttft is not None], 0.5),
        "requests": len(turns),
    }


def rollout(work: Path, rig: Rig, hub: FixtureHub, trace: Trace, generation: int, warm: bool, window: float) -> dict:
    router = SmgRouter(f"http://127.0.0.1:{ROUTER_PORT}", f"http://127.0.0.1:{ROUTER_PORT + 1}")
    every_host_in_rotation(router, rig)
    router.close()
    before = _window(rig, trace, window)
    if not warm:  # no record of what the hosts run: the warm step keeps nothing (a rollout as before it)
        shutil.rmtree(work / "controller-state" / "fleet" / FLEET / "warm", ignore_errors=True)
    write_fleet(work, rig, hub, QUANT, serve={**SERVE, "env": {"K3_BENCH_GENERATION": str(generation)}}, **POLICY)
    started = time.monotonic()
    done = fleet_cmd(work, "apply", "--traffic-timeout", "5", "fleet.yaml")
    rejoined = time.monotonic()
    if done.returncode != 0:
        raise SystemExit(f"the rollout exited {done.returncode}:\n{done.stderr[-3000:]}")
    after = _window(rig, trace, window)
    record = json.loads((work / "controller-state" / "fleet" / FLEET / "rollout.json").read_text())
    return {
        "warm": warm,
        "before": before,
        "after": after,
        "ratio": after["hit rate"] / before["hit rate"],
        "failed": sum(t.status != 200 for t in trace.between(started - window, time.monotonic())),
        "seconds": rejoined - started,
        "warm steps": {h: f"{w['how']}:{w['tokens'] or w['prompts']}" for h, w in record.get("warm", {}).items()},
    }


def _row(seen: dict) -> str:
    shares = "/".join(f"{v:.2f}" for v in seen["after"]["shares"].values())
    return (
        f"{'warm' if seen['warm'] else 'cold':5} {seen['before']['hit rate']:7.1%} {seen['after']['hit rate']:7.1%} "
        f"{seen['ratio']:7.1%} {shares:>15} {seen['failed']:6} "
        f"{seen['before']['ttft p50']:7.2f}s {seen['after']['ttft p50']:7.2f}s {seen['seconds']:6.0f}s  "
        + " ".join(seen["warm steps"].values())
    )


HEADER = (
    f"{'':5} {'before':>7} {'after':>7} {'ratio':>7} {'shares after':>15} {'failed':>6} "
    f"{'TTFT bef':>8} {'TTFT aft':>8} {'rollout':>7}  warm step per host (restored tokens)"
)


def _spread(values: list[float], form: str = ".1%") -> str:
    return f"{format(statistics.median(values), form)} ({format(min(values), form)}–{format(max(values), form)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="pairs of rollouts (warm, then cold)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured before and after a rollout")
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--agents", type=int, default=4, help="distinct system prompts the sessions share")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--clients", type=int, default=6, help="sessions played at once")
    parser.add_argument("--json", type=Path, help="write every rollout's figures here")
    args = parser.parse_args()
    hub_root = require_docker_and_demo_hub()
    work = Path(tempfile.mkdtemp(prefix="k3cache-rollout-"))
    (work / "build").mkdir()
    seen: list[dict] = []
    with (
        fleet_rig(3, prefix="k3fb") as rig,
        FixtureHub(demo_repos(hub_root), host=GATEWAY) as hub,
        deployed(rig, hub, work, serve={**SERVE, "env": {"K3_BENCH_GENERATION": "0"}}, **POLICY),
        Trace(f"http://127.0.0.1:{ROUTER_PORT}", args.sessions, args.agents, args.turns, args.clients) as trace,
    ):
        generation = 0
        for run in range(args.runs):
            for warm in (True, False):
                generation += 1
                seen.append(rollout(work, rig, hub, trace, generation, warm, args.window))
                print(f"run {run + 1}/{args.runs}\n{HEADER}\n{_row(seen[-1])}", flush=True)
                if args.json:
                    args.json.write_text(json.dumps(seen, indent=2))
    print(f"\nrollouts of 3 hosts under the trace, {args.runs} run(s) each: median (min–max)")
    for warm in (True, False):
        mine = [s for s in seen if s["warm"] == warm]
        least = [min(s["after"]["shares"].values()) for s in mine]
        print(
            f"{'warm' if warm else 'cold'}: hit rate before {_spread([s['before']['hit rate'] for s in mine])}, "
            f"within {args.window:.0f} s after the last host rejoined {_spread([s['after']['hit rate'] for s in mine])}"
            f", after/before {_spread([s['ratio'] for s in mine])} (goal >= 95 %); least replica share "
            f"{_spread(least, '.2f')} (goal >= {0.8 / 3:.2f}); failed {sum(s['failed'] for s in mine)} (goal 0); "
            f"TTFT p50 after {_spread([s['after']['ttft p50'] for s in mine], '.2f')} s"
        )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
