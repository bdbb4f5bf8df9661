"""Benchmark (issue 40 item 2): the fleet's prompt-cache hit rate through a rollout of all three hosts, with the
warm step (each host's busiest slots saved after its drain and restored before it rejoins) against without it.

    .venv/bin/python bench/fleet_cache_rollout.py [--runs 2] [--window 60]            # loopback replicas
    flock /tmp/k3-fleet-rig.lock .venv/bin/python bench/fleet_cache_rollout.py --rig   # the fleet rig

bench/fleet_cache.py's agent-like trace (`agent_trace`: sessions of a few agents sharing long system prompts with
tool schemas, growing by a tool call and its result per turn; `send_turn`: streamed, TTFT as the client sees it)
runs through smg (cache_aware, kimik3's settings) the whole time, continuously: `--clients` threads, each sending
the next turn of a session as soon as the last reply ended; a finished session is followed by a new one of the same
agent. Per run, two rollouts of the three hosts (model and context unchanged, every server replaced):

- warm: each host's slots saved after its drain and restored into its new server before it rejoins;
- cold: the same rollout without the warm step (as before it).

Two fleets:
- loopback (default): bench/fleet_cache.py's replicas (three llama-server containers of the demo image on loopback,
  tests/support/llama_replicas.py) with --slot-save-path on a folder that outlives the container, rolled one at a
  time by `kimik3 fleet router-step`'s own functions (cli/fleet_apply.py `_take_out`: out of smg, drained;
  cli/fleet_warm.py: slots saved; the container replaced; `_put_back`: warmed, back in, sent traffic): the rollout's
  router and warm steps without Ansible and the hosts' gates;
- `--rig`: the fleet rig (tests/support/fleet_hosts.py), `kimik3 fleet apply` of an env change (the cold rollout
  with the hosts' warm records removed first), set up as the rollout test's with serve.slot_save on. Minutes per
  host on a 2-core machine.

`--out hold` (loopback only) holds each host out of smg instead of removing it (its probes fail; its part of the
cache-aware tree kept, which a removal purges) and releases it: what issue 40's hold would do, not shipped (smg puts
a held worker back in rotation when its replies complete: bench/router_hold.py). `--out remove` (the
default) is the router steps as shipped. `--only warm|cold` runs one kind of rollout per run.

`--policies cache_aware,manual:min_load,slots` (loopback only): who routes the trace, each in turn in every run, the
first the baseline: smg's cache_aware (kimik3's settings, as shipped); smg's `manual` policy with `--assignment-mode
min_load`, keyed by the session header the bench sends; `slots`: kimik3's own router (routing/slot_route.py's
policy, the servers' own `timings.cache_n`), started as `fleet apply` starts it, in front of smg, whose rotation the
router steps change; its shares are its own per-replica counts. A fresh router per rollout; the replicas (and their
caches) carry on.

Per rollout: the fleet's hit rate (the servers' own counters, as `kimik3 fleet status` reads them) over `--window` s
before the rollout and over `--window` s from the moment the last host rejoined, the ratio (goal >= 95 %), each
replica's share of the requests smg sent in that window (`smg_worker_requests_total`; goal >= 0.8/3), failed
requests from the start of the first window to the end of the second (goal 0), TTFT p50 in both windows, what
each host's warm step did, the later turns (a conversation's second on) whose reply reused < 5 % of its prompt before,
during and after the rollout, and under `slots` the router's `voided` decisions (bench/warm_restore_reuse.py: why a
rejoined replica's first turns reuse nothing even after a warm restore, on a recurrent model).
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
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import fleet_cache  # noqa: E402
import httpx  # noqa: E402
from fleet import deployed, every_host_in_rotation  # noqa: E402
from fleet_cache import (  # noqa: E402
    SERIES,
    SLOTS,
    Session,
    Turn,
    agent_trace,
    quantile,
    routed,
    router_metrics,
    send_turn,
    watch_window,
)
from router_hold import hold_out, put_back_held  # noqa: E402
from support.closed_loop import Workers  # noqa: E402
from support.fleet_hosts import GATEWAY, Rig, fleet_rig  # noqa: E402
from support.fleet_rollout import FLEET, NAME, PORT, ROUTER_PORT, fleet_cmd, write_fleet  # noqa: E402
from support.llama_replicas import MODEL_NAME, Replicas, write_model  # noqa: E402
from support.realparts import require_docker_and_demo_hub  # noqa: E402
from support.shipped import pinned_text  # noqa: E402

from kimik3_demo.hub import FixtureHub  # noqa: E402
from kimik3_demo.prepare import demo_repos  # noqa: E402
from kimik3_reconciler.adapters.router_smg import SmgRouter  # noqa: E402
from kimik3_reconciler.cli import fleet_warm  # noqa: E402
from kimik3_reconciler.cli.fleet_apply import _put_back, _take_out, server_in_flight  # noqa: E402
from kimik3_reconciler.fleet.warm import warm_record  # noqa: E402
from kimik3_reconciler.model.profile_source import parse_profile  # noqa: E402
from kimik3_reconciler.routing.slot_route import COLD  # noqa: E402

QUANT = "UD-Q2_K_XL"
# The tiny model's trained context is 4,096 tokens a slot: 4 slots of 4,096, every conversation of the trace fits one.
SERVE = {"slot_save": True, "parallel": 4, "ctx_size": 16384}
POLICY = {"policy": "cache_aware"}
fleet_cache.MODEL_NAME = NAME  # send_turn asks for the fleet's served name (the loopback replicas': their own)


class Trace(Workers):
    """The trace played continuously through the router by `clients` threads; every turn recorded."""

    def __init__(  # noqa: PLR0913
        self, url: str, sessions: int, agents: int, turns: int, clients: int, seed: int = 40
    ) -> None:
        super().__init__()
        self.url, self.sessions, self.agents, self.turns, self.seed = url, sessions, agents, turns, seed
        self.systems = [s.system for s in agent_trace(agents, agents, turns)]  # each agent's, kept for every session
        self.generation = 0
        self.played: list[Turn] = []
        self._lock = threading.Lock()
        self._queue: list[Session] = []
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _next(self) -> Session:
        with self._lock:
            if not self._queue:  # a new batch of sessions, the agents' system prompts as before
                self.generation += 1
                fresh = agent_trace(self.sessions, self.agents, self.turns, seed=self.seed + self.generation)
                self._queue = [
                    dataclasses.replace(s, name=f"g{self.generation}-{s.name}", system=self.systems[s.agent])
                    for s in reversed(fresh)
                ]
            return self._queue.pop()

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


def _window(urls: dict[str, str], metrics_url: str, trace: Trace, seconds: float) -> dict:
    """The fleet's hit rate, each replica's share of the requests and TTFT over the next `seconds`
    (bench/fleet_cache.py's `watch_window`: the router's per-worker counts, smg's or under `slots` kimik3's router's;
    the servers' own counters)."""
    start = time.monotonic()
    seen = watch_window(list(urls), metrics_url, seconds)
    turns = trace.between(start, time.monotonic())
    shares = seen.shares
    return {
        "hit rate": seen.hit_rate if seen.hit_rate is not None else float("nan"),
        "shares": {urls[u]: share for u, share in shares.items()},
        "ttft p50": quantile([t.ttft for t in turns if t.ttft is not None], 0.5),
        "ttft p95": quantile([t.ttft for t in turns if t.ttft is not None], 0.95),
        "requests": len(turns),
    }


class RigFleet:
    """The fleet rig behind smg, rolled by `kimik3 fleet apply`."""

    def __init__(self, work: Path, rig: Rig, hub: FixtureHub) -> None:
        self.work, self.rig, self.hub, self.generation = work, rig, hub, 0
        self.urls = {f"http://{h.address}:{PORT}": h.name for h in rig.hosts}
        self.router_url, self.metrics_url = f"http://127.0.0.1:{ROUTER_PORT}", f"http://127.0.0.1:{ROUTER_PORT + 1}"

    def ready(self) -> None:
        router = SmgRouter(self.router_url, self.metrics_url)
        every_host_in_rotation(router, self.rig)
        router.close()

    def roll(self, warm: bool) -> dict[str, str]:
        state = self.work / "controller-state" / "fleet" / FLEET
        if not warm:  # no record of what the hosts run: the warm step keeps nothing (a rollout as before it)
            shutil.rmtree(state / "warm", ignore_errors=True)
        self.generation += 1
        env = {"K3_BENCH_GENERATION": str(self.generation)}
        write_fleet(self.work, self.rig, self.hub, QUANT, serve={**SERVE, "env": env}, **POLICY)
        done = fleet_cmd(self.work, "apply", "--traffic-timeout", "5", "fleet.yaml")
        if done.returncode != 0:
            raise SystemExit(f"the rollout exited {done.returncode}:\n{done.stderr[-3000:]}")
        record = json.loads((state / "rollout.json").read_text())
        return {h: f"{w['how']}:{w['tokens'] or w['prompts']}" for h, w in record.get("warm", {}).items()}


class SlotReplicas(Replicas):
    """bench/fleet_cache.py's replicas with llama-server's --slot-save-path on a folder of this machine per replica
    (0700), which outlives its container, as serve.slot_save's Docker volume does."""

    def __init__(self, model: Path, slots: Path, **kwargs: object) -> None:
        super().__init__(model, prefix="k3warm", **kwargs)  # type: ignore[arg-type]
        self.slots = slots

    def argv(self, name: str, port: int) -> list[str]:
        folder = self.slots / name
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        argv = super().argv(name, port)
        at = argv.index(self.image)
        return [*argv[:at], "-v", f"{folder}:/slots", *argv[at:], "--slot-save-path", "/slots"]


class LoopbackFleet:
    """Three replicas on loopback behind smg, rolled one at a time by the router steps' own functions."""

    def __init__(  # noqa: PLR0913
        self,
        work: Path,
        replicas: SlotReplicas,
        router: SmgRouter,
        router_url: str,
        profile,
        out: str = "hold",  # noqa: ANN001
    ) -> None:
        self.work, self.replicas, self.profile, self.router, self.hold = work, replicas, profile, router, out == "hold"
        self.urls = {u: f"replica-{i}" for i, u in enumerate(replicas.urls, 1)}
        self.router_url, self.metrics_url = router_url, router.metrics_url or ""
        self.record = work / "fleet" / "rollout.json"
        for name in self.urls.values():  # as after a rollout that rolled them: what their servers run
            fleet_warm._write(fleet_warm._path(self.record, name), warm_record(profile))

    def ready(self) -> None:
        for url in self.urls:
            self.router.wait_in_rotation(url, timeout_s=120)

    def roll(self, warm: bool) -> dict[str, str]:
        series = (SERIES.running, SERIES.waiting)
        done = {}
        for index, (url, name) in enumerate(self.urls.items()):
            (hold_out if self.hold else _take_out)(self.router, name, url, 60, 2, server_in_flight(url, series))
            if warm:
                fleet_warm.save_before_swap(self.record, name, url, self.profile, 0)
            self.replicas.restart(index)
            seen: dict = {}

            def warmed(name: str = name, url: str = url, seen: dict = seen) -> None:
                seen.update(fleet_warm.warm_after_swap(self.record, name, url, self.profile, ()))

            (put_back_held if self.hold else _put_back)(self.router, name, url, 5, warmed if warm else None)
            done[name] = f"{seen['how']}:{seen['tokens']}" if seen else "cold"
        return done


def rollout(fleet: RigFleet | LoopbackFleet, trace: Trace, warm: bool, window: float) -> dict:
    fleet.ready()
    before = _window(fleet.urls, fleet.metrics_url, trace, window)
    started = time.monotonic()
    steps = fleet.roll(warm)
    rejoined = time.monotonic()
    after = _window(fleet.urls, fleet.metrics_url, trace, window)
    spans = {
        "before": (started - window, started),
        "during": (started, rejoined),
        "after": (rejoined, time.monotonic()),
    }
    return {
        "misses": {span: _misses(trace.between(*bounds)) for span, bounds in spans.items()},
        "warm": warm,
        "before": before,
        "after": after,
        "ratio": after["hit rate"] / before["hit rate"],
        "failed": sum(t.status != 200 for t in trace.between(started - window, time.monotonic())),
        "seconds": rejoined - started,
        "warm steps": steps,
    }


def _misses(turns: list[Turn]) -> list[int]:
    """[later turns answered, of them those whose reply reused under COLD of the prompt]: a conversation's next turn
    that found nothing of it cached on the replica that took it (what kimik3's router voids on, where it sent the
    turn for what that replica held)."""
    later = [t for t in turns if t.turn > 0 and t.cached is not None and t.evaluated is not None]
    return [len(later), sum(t.cached < COLD * (t.cached + t.evaluated) for t in later)]


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


def _profile():  # noqa: ANN202 - Profile
    """The demo profile as the replicas run it (slots kept, their slot count): what the warm step decides from."""
    text = pinned_text(ROOT / "profiles" / "demo-cpu.yaml")
    profile = parse_profile(text, "demo-cpu.yaml").profile
    serve = profile.serve.model_copy(update={"slot_save": True, "parallel": SERVE["parallel"]})
    return profile.model_copy(update={"serve": serve})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="pairs of rollouts (warm, then cold)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured before and after a rollout")
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--agents", type=int, default=4, help="distinct system prompts the sessions share")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--clients", type=int, default=6, help="sessions played at once")
    parser.add_argument("--json", type=Path, help="write every rollout's figures here")
    parser.add_argument("--rig", action="store_true", help="the fleet rig and `kimik3 fleet apply` (minutes a host)")
    parser.add_argument(
        "--out",
        choices=("hold", "remove"),
        default="remove",
        help="how `router: out` takes a host out: removed (as shipped) or held (its tree kept; not safe to ship)",
    )
    parser.add_argument("--only", choices=("warm", "cold"), help="one kind of rollout per run, not both")
    parser.add_argument(
        "--policies",
        default="cache_aware",
        help=f"who routes the trace, each in turn in every run (the first the baseline): cache_aware (smg, kimik3's "
        f"settings), {SLOTS} (kimik3's router, from the servers' own reuse counts, in front of smg as fleet apply "
        "starts it)",
    )
    args = parser.parse_args()
    policies = args.policies.split(",")
    if unknown := set(policies) - {"cache_aware", "manual:min_load", SLOTS}:
        parser.error(f"--policies: unknown {', '.join(sorted(unknown))} (cache_aware, manual:min_load, {SLOTS})")
    if args.rig and args.out != "remove":
        parser.error("--out hold is the loopback fleet's: the rig runs `kimik3 fleet apply` as shipped")
    if args.rig and policies != ["cache_aware"]:
        parser.error(
            "--policies: the rig runs `kimik3 fleet apply` with router.policy cache_aware (its fleet file names it)"
        )
    work = Path(tempfile.mkdtemp(prefix="k3cache-rollout-"))
    seen: list[dict] = []
    trace_args = (args.sessions, args.agents, args.turns, args.clients)
    kinds = (True, False) if args.only is None else (args.only == "warm",)
    with ExitStack() as stack:
        if args.rig:
            (work / "build").mkdir()
            rig = stack.enter_context(fleet_rig(3, prefix="k3fb"))
            hub = stack.enter_context(FixtureHub(demo_repos(require_docker_and_demo_hub()), host=GATEWAY))
            stack.enter_context(
                deployed(rig, hub, work, serve={**SERVE, "env": {"K3_BENCH_GENERATION": "0"}}, **POLICY)
            )
            rig_fleet = RigFleet(work, rig, hub)  # one: it counts the rollouts' generations
            fleets = {"cache_aware": lambda _stack: (rig_fleet, None)}
        else:
            fleet_cache.MODEL_NAME = MODEL_NAME
            model = write_model(work / "model")
            replicas = stack.enter_context(SlotReplicas(model, work / "slots", parallel=SERVE["parallel"]))
            fleets = {p: _loopback(work, replicas, p, args.out) for p in policies}
        phase = 0
        for run in range(args.runs):
            for policy in policies:
                for warm in kinds:
                    phase += 1  # each rollout's own sessions (the agents' system prompts are the same throughout)
                    with ExitStack() as each:
                        fleet, front = fleets[policy](each)
                        trace = each.enter_context(
                            Trace(front or fleet.router_url, *trace_args, seed=40 + 1000 * phase)
                        )
                        seen.append(rollout(fleet, trace, warm, args.window))
                        if front is not None:  # slots: how often a server's reply voided what it was thought to hold
                            seen[-1]["voids"] = _voids(fleet.metrics_url)
                    seen[-1]["out"], seen[-1]["policy"], seen[-1]["run"] = args.out, policy, run + 1
                    print(
                        f"run {run + 1}/{args.runs} ({policy}, router: out by {args.out})\n{HEADER}\n{_row(seen[-1])}",
                        flush=True,
                    )
                    if args.json:
                        args.json.write_text(json.dumps(seen, indent=2))
    if voids := [f"{s['policy']} run {s['run']}: {s['voids']}" for s in seen if "voids" in s]:
        print(f"replies that voided a replica's entries (slots): {', '.join(voids)}")
    for s in seen:
        misses = ", ".join(f"{span} {n[1]} of {n[0]}" for span, n in s["misses"].items())
        print(f"{s['policy']} run {s['run']}: later turns that reused < {COLD:.0%} of their prompt: {misses}")
    print(f"\nrollouts of 3 hosts under the trace (router: out by {args.out}), {args.runs} run(s): median (min–max)")
    for line in summary(seen, policies, kinds, args.window):
        print(line)
    shutil.rmtree(work, ignore_errors=True)


def _loopback(work: Path, replicas: SlotReplicas, policy: str, out: str):  # noqa: ANN202
    """How a rollout under `policy` starts on the loopback replicas: the router as `fleet apply` starts it (smg with
    that policy; `slots`: kimik3's router in front of smg, whose rotation the router steps change); the fleet and,
    for `slots`, kimik3's router's URL (the trace's, and its counts')."""

    def start(stack: ExitStack) -> tuple[LoopbackFleet, str | None]:
        router_url, router = stack.enter_context(routed(replicas.urls, policy, work))
        fleet = LoopbackFleet(work, replicas, router, router_url, _profile(), out)
        if policy != SLOTS:
            return fleet, None
        fleet.metrics_url = router_metrics(router_url)  # its per-replica counts: smg routes nothing here
        return fleet, router_url

    return start


def _voids(metrics_url: str) -> int:
    """kimik3's router's `voided` decisions so far (replies that said a replica held nothing it was thought to)."""
    text = httpx.get(f"{metrics_url}/metrics", timeout=10).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith('kimik3_router_decisions_total{decision="voided"}')
    )


def summary(seen: list[dict], policies: list[str], kinds: tuple[bool, ...], window: float) -> list[str]:
    """Per policy and kind of rollout: the figures' median (min–max) over the runs; then each policy against the
    first, per run (the same run's rollout of the same kind), as ratios."""
    lines = []
    for policy in policies:
        for warm in kinds:
            mine = [s for s in seen if s["warm"] == warm and s.get("policy", "cache_aware") == policy]
            if not mine:
                continue
            least = [min(s["after"]["shares"].values()) for s in mine]
            lines.append(
                f"{policy} {'warm' if warm else 'cold'}: hit rate before {_spread([s['before']['hit rate'] for s in mine])}"
                f", within {window:.0f} s after the last host rejoined {_spread([s['after']['hit rate'] for s in mine])}"
                f", after/before {_spread([s['ratio'] for s in mine])} (goal >= 95 %); least replica share "
                f"{_spread(least, '.2f')} (goal >= {0.8 / 3:.2f}); failed {sum(s['failed'] for s in mine)} (goal 0); "
                f"TTFT p50 after {_spread([s['after']['ttft p50'] for s in mine], '.2f')} s"
            )
    base = policies[0]
    for policy in policies[1:]:
        for warm in kinds:
            pairs = [
                (b, p)
                for b in seen
                for p in seen
                if b.get("policy") == base
                and p.get("policy") == policy
                and b["warm"] == p["warm"] == warm
                and b.get("run") == p.get("run")
            ]
            if not pairs:
                continue
            hits = [p["after"]["hit rate"] / b["after"]["hit rate"] for b, p in pairs]
            p50 = [p["after"]["ttft p50"] / b["after"]["ttft p50"] for b, p in pairs]
            least = [min(p["after"]["shares"].values()) - min(b["after"]["shares"].values()) for b, p in pairs]
            lines.append(
                f"{policy} against {base}, same run, {'warm' if warm else 'cold'}: hit rate after x "
                f"{_spread(hits, '.2f')}, TTFT p50 after x {_spread(p50, '.2f')}, least share after "
                f"{_spread(least, '+.2f')}"
            )
    return lines


if __name__ == "__main__":
    main()
