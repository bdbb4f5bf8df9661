"""Benchmark (issue 40 item 2): the fleet's prompt-cache hit rate through a rollout of all three hosts, with the
warm step (each host's busiest slots saved after its drain and restored before it rejoins) against without it.

On the fleet rig (tests/support/fleet_hosts.py; shared/TESTING.md §12), set up as the rollout test's (its fleet
file, names and ports) but with smg's cache_aware policy and serve.slot_save on:

    flock /tmp/k3-fleet-rig.lock .venv/bin/python bench/fleet_cache_rollout.py [--runs 2] [--window 60]

A minimal agent-like trace runs through smg the whole time (written here because bench/fleet_cache.py, issue 40's
routing bench, was not on main when this was written): `--sessions` conversations (long system prompts shared by
`--agents` agents, each conversation's own opening, growing turn by turn, restarted after `--turns`), `--workers`
threads each sending the next turn of one of its conversations as soon as the last answer came. Per run, two
rollouts of the three hosts (an env change: model and context unchanged, every server replaced):

- warm: `kimik3 fleet apply` as it is (restore);
- cold: the same, with the hosts' warm records removed first, so no host keeps its slots (the rollout as before).

Per rollout: the fleet's hit rate (prompt tokens served from the cache / all prompt tokens, from the servers' own
counters `llamacpp:prompt_tokens_cached_total` and `prompt_tokens_total`) over `--window` s before the rollout and
over `--window` s from the moment the last host rejoined (`fleet apply` returned), their ratio (goal >= 95 %), each
replica's share of the requests in that window (smg's `smg_worker_requests_total`; goal >= 0.8/3), failed requests
(goal 0), and the request latency p50 (4 tokens generated: mostly prefill) in both windows.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import httpx  # noqa: E402
from fleet import deployed, every_host_in_rotation  # noqa: E402
from handover import quantile  # noqa: E402
from integration.test_fleet_rollout_docker import FLEET, NAME, PORT, ROUTER_PORT, fleet_cmd, write_fleet  # noqa: E402
from support.fleet_hosts import GATEWAY, Rig, fleet_rig  # noqa: E402
from support.realparts import require_docker_and_demo_hub  # noqa: E402

from kimik3_demo.hub import FixtureHub  # noqa: E402
from kimik3_demo.prepare import demo_repos  # noqa: E402
from kimik3_reconciler.adapters.router_smg import SmgRouter  # noqa: E402
from kimik3_reconciler.fleet.server_load import running_requests  # noqa: E402

QUANT = "UD-Q2_K_XL"
# The tiny model's trained context is 4,096 tokens a slot: 4 slots, every conversation fits one.
SERVE = {"slot_save": True, "parallel": 4, "ctx_size": 16384}
WORDS = "agent build test deploy router cache slot prompt token host fleet rollout drain gate verify".split()


def _text(seed: int, words: int) -> str:
    pick = random.Random(seed)
    return " ".join(pick.choice(WORDS) for _ in range(words))


class Trace:
    """The conversations and the threads that send them through the router; every answer recorded."""

    def __init__(self, url: str, sessions: int, agents: int, turns: int, workers: int) -> None:
        self.url, self.turns = url, turns
        self.systems = [f"You are agent {a}. " + _text(a, 500) for a in range(agents)]
        self.sessions = [self._opening(s) for s in range(sessions)]
        self.generation = [0] * sessions
        self.outcomes: list[tuple[float, float, int]] = []  # (started, ended, HTTP status or 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(w, workers), daemon=True) for w in range(workers)]

    def _opening(self, session: int, generation: int = 0) -> list[dict]:
        system = self.systems[session % len(self.systems)]
        intro = f"Task {session}.{generation}: " + _text(1000 + session * 97 + generation, 120)
        return [{"role": "system", "content": system}, {"role": "user", "content": intro}]

    def __enter__(self) -> Trace:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)

    def _run(self, worker: int, workers: int) -> None:
        mine = list(range(worker, len(self.sessions), workers))
        client = httpx.Client(timeout=300)
        turn = 0
        while not self._stop.is_set():
            session = mine[turn % len(mine)]
            turn += 1
            messages = self.sessions[session]
            started = time.monotonic()
            try:
                answer = client.post(
                    f"{self.url}/v1/chat/completions",
                    json={"model": NAME, "messages": messages, "max_tokens": 4, "temperature": 0},
                )
                status = answer.status_code
                reply = answer.json()["choices"][0]["message"].get("content") or "ok" if status == 200 else ""
            except (httpx.HTTPError, ValueError, KeyError, IndexError):
                status, reply = 0, ""
            with self._lock:
                self.outcomes.append((started, time.monotonic(), status))
            if status != 200:
                continue
            if (len(messages) - 2) // 2 + 1 >= self.turns:  # a finished conversation starts over, as a new one
                self.generation[session] += 1
                self.sessions[session] = self._opening(session, self.generation[session])
            else:
                self.sessions[session] = [
                    *messages,
                    {"role": "assistant", "content": reply[:200]},
                    {"role": "user", "content": _text(len(messages) * 31 + session, 40)},
                ]
        client.close()

    def between(self, start: float, end: float) -> list[tuple[float, float, int]]:
        with self._lock:
            return [o for o in self.outcomes if start <= o[0] < end]


def _counters(rig: Rig) -> dict[str, tuple[float, float]]:
    """Each host's (cached prompt tokens, processed prompt tokens) from its server's /metrics."""
    seen = {}
    for host in rig.hosts:
        text = httpx.get(f"http://{host.address}:{PORT}/metrics", timeout=10).text
        seen[host.name] = (
            float(running_requests(text, "llamacpp:prompt_tokens_cached_total") or 0),
            float(running_requests(text, "llamacpp:prompt_tokens_total") or 0),
        )
    return seen


def _routed(rig: Rig) -> dict[str, float]:
    """smg's count of requests sent to each host (smg_worker_requests_total, summed over its other labels)."""
    text = httpx.get(f"http://127.0.0.1:{ROUTER_PORT + 1}/metrics", timeout=10).text
    counts = dict.fromkeys((h.name for h in rig.hosts), 0.0)
    for line in text.splitlines():
        if line.startswith("smg_worker_requests_total{"):
            for host in rig.hosts:
                if f"http://{host.address}:{PORT}" in line:
                    counts[host.name] += float(line.rsplit(" ", 1)[1])
    return counts


def _window(rig: Rig, trace: Trace, seconds: float) -> dict:
    """The fleet's hit rate, each replica's share and the latency over the next `seconds`."""
    start, counters, routed = time.monotonic(), _counters(rig), _routed(rig)
    time.sleep(seconds)
    end, counters_end, routed_end = time.monotonic(), _counters(rig), _routed(rig)
    cached = sum(counters_end[h][0] - counters[h][0] for h in counters)
    processed = sum(counters_end[h][1] - counters[h][1] for h in counters)
    sent = {h: routed_end[h] - routed[h] for h in routed}
    done = trace.between(start, end)
    return {
        "hit rate": cached / (cached + processed) if cached + processed else float("nan"),
        "shares": {h: n / sum(sent.values()) if sum(sent.values()) else float("nan") for h, n in sent.items()},
        "p50": quantile([e - s for s, e, status in done if status == 200], 0.5),
        "requests": len(done),
    }


def rollout(work: Path, rig: Rig, hub: FixtureHub, trace: Trace, generation: int, warm: bool, window: float) -> dict:
    router = SmgRouter(f"http://127.0.0.1:{ROUTER_PORT}", f"http://127.0.0.1:{ROUTER_PORT + 1}")
    every_host_in_rotation(router, rig)
    router.close()
    before = _window(rig, trace, window)
    if not warm:  # no record of what the hosts run: the warm step keeps nothing (the rollout as before it)
        shutil.rmtree(work / "controller-state" / "fleet" / FLEET / "warm", ignore_errors=True)
    write_fleet(work, rig, hub, QUANT, serve={**SERVE, "env": {"K3_BENCH_GENERATION": str(generation)}}, **POLICY)
    started = time.monotonic()
    done = fleet_cmd(work, "apply", "--traffic-timeout", "5", "fleet.yaml")
    rejoined = time.monotonic()
    if done.returncode != 0:
        raise SystemExit(f"the rollout exited {done.returncode}:\n{done.stderr[-3000:]}")
    after = _window(rig, trace, window)
    record = json.loads((work / "controller-state" / "fleet" / FLEET / "rollout.json").read_text())
    failed = [o for o in trace.between(started - window, time.monotonic()) if o[2] != 200]
    return {
        "warm": warm,
        "before": before,
        "after": after,
        "ratio": after["hit rate"] / before["hit rate"],
        "failed": len(failed),
        "seconds": rejoined - started,
        "restored": {h: (w["how"], w["tokens"]) for h, w in record.get("warm", {}).items()},
    }


POLICY = {"policy": "cache_aware"}


def _row(seen: dict) -> str:
    shares = ", ".join(f"{v:.2f}" for v in seen["after"]["shares"].values())
    return (
        f"{'warm' if seen['warm'] else 'cold':5} {seen['before']['hit rate']:8.1%} {seen['after']['hit rate']:8.1%} "
        f"{seen['ratio']:7.1%} {shares:>18} {seen['failed']:7} {seen['before']['p50']:6.2f}s "
        f"{seen['after']['p50']:6.2f}s {seen['seconds']:6.0f}s  "
        + " ".join(f"{how}:{tokens}" for how, tokens in seen["restored"].values())
    )


HEADER = (
    f"{'':5} {'before':>8} {'after':>8} {'ratio':>7} {'shares after':>18} {'failed':>7} {'p50 bef':>7} "
    f"{'p50 aft':>7} {'rollout':>7}  warm step per host (tokens)"
)


def _spread(values: list[float], percent: bool = True) -> str:
    form = (lambda v: f"{v:.1%}") if percent else (lambda v: f"{v:.2f}")
    return f"{form(statistics.median(values))} ({form(min(values))}–{form(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="pairs of rollouts (warm, then cold)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured before and after a rollout")
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--agents", type=int, default=4, help="distinct system prompts the sessions share")
    parser.add_argument("--turns", type=int, default=6, help="turns before a conversation starts over")
    parser.add_argument("--workers", type=int, default=6, help="the trace's client threads")
    args = parser.parse_args()
    hub_root = require_docker_and_demo_hub()
    work = Path(tempfile.mkdtemp(prefix="k3cache-rollout-"))
    (work / "build").mkdir()
    seen: list[dict] = []
    with (
        fleet_rig(3, prefix="k3fb") as rig,
        FixtureHub(demo_repos(hub_root), host=GATEWAY) as hub,
        deployed(rig, hub, work, serve={**SERVE, "env": {"K3_BENCH_GENERATION": "0"}}, **POLICY),
        Trace(f"http://127.0.0.1:{ROUTER_PORT}", args.sessions, args.agents, args.turns, args.workers) as trace,
    ):
        generation = 0
        for run in range(args.runs):
            for warm in (True, False):
                generation += 1
                seen.append(rollout(work, rig, hub, trace, generation, warm, args.window))
                print(f"run {run + 1}/{args.runs}\n{HEADER}\n{_row(seen[-1])}", flush=True)
    print(f"\nrollouts of 3 hosts under the trace, {args.runs} run(s) each: median (min–max)")
    for warm in (True, False):
        mine = [s for s in seen if s["warm"] == warm]
        least = [min(s["after"]["shares"].values()) for s in mine]
        print(
            f"{'warm' if warm else 'cold'}: hit rate before {_spread([s['before']['hit rate'] for s in mine])}, "
            f"within {args.window:.0f} s after the last host rejoined {_spread([s['after']['hit rate'] for s in mine])}"
            f", after/before {_spread([s['ratio'] for s in mine])} (goal >= 95 %); least replica share "
            f"{_spread(least, percent=False)} (goal >= {0.8 / 3:.2f}); failed {sum(s['failed'] for s in mine)}"
        )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
