"""Benchmark (issue 40): prefix-aware routing against round robin, on three real llama-server replicas behind smg.

An agent-like trace (`agent_trace`: >= 24 sessions, a few agents each with a long system prompt and tool schemas
shared by its sessions, every session a multi-turn conversation that grows by a tool call and its result per turn)
is played through smg (`play`: `--clients` sessions at once, each turn sent when the last one's reply ended,
streamed) under each policy, on fresh replicas each time (empty caches). Per policy: the prefix-cache hit rate from
the servers' own counters (llama-server's `llamacpp:prompt_tokens_cached_total` against the prompt tokens, read
through the engine protocol as `kimik3 fleet status` reads them), TTFT p50/p95 (time to the first streamed token, as
the client sees it through the router), each replica's share of the prompt tokens; then the ratios of each policy
against round robin measured in the same run, and over --runs the spread.

    .venv/bin/python bench/fleet_cache.py [--runs 2] [--trace short|agent] [--sessions 24] [--turns 6] [--clients 12]

The replicas are three containers of the demo's llama.cpp image (build b11434, the one kimik3 builds) on loopback
ports, `--network host`, with kimik3's fixed flags, `--parallel 2`, one thread each, serving the tiny kimi-k3 GGUF
(random weights, ~1 token per character: its vocabulary is bytes) written here; not the fleet rig's namespace
hosts (tests/support/fleet_hosts.py): routing and caching are the same on loopback, and the rig's image push, three
dockerds and a kimik3 install per host would cost minutes per run for nothing this bench measures. The router is
smg as `kimik3 fleet apply` starts it (adapters/router_smg.py's command line, its cache-aware settings included).

What makes a cache hit or a miss here is what makes one on a real host: each replica keeps its slots' prompts and a
host-memory prompt cache (`--cache-ram`, kimik3's default 8192 MiB; it held 6-8 of the trace's prompts per replica
here, a third of its conversations); a request that finds its conversation's prefix there reuses it (the tiny
model is hybrid, as Kimi-K3 is: KDA layers, reused through llama-server's context checkpoints). The bench prints a
replica's `cache state` line so the reader sees what it held.

`--policies ...,slots`: the same trace through kimik3's own router (routing/slot_route.py's policy: each conversation
back to the replica whose server's own `timings.cache_n` last answered it), started as `fleet apply` starts it (smg
behind it for the rotation, `kimik3 fleet route` in front), on the same fresh replicas, in the same run, so its
ratios against the baseline are like for like. smg's own conversation
pinning, keyed by the session header every request carries (`x-session-id`): `cache_aware:sticky`, `manual:min_load`
(`variant_settings`).

`--trace agent`: bench/agent_trace.py's coding agents instead (24 sessions of 4 agents, 8 turns, each adding a tool
call and a ~600-token result to a ~1,000-token shared prefix: the conversation ~3x that prefix mid-session), on
replicas sized like a Kimi-K3 host (`replica_sizing`: 4 slots, as many sessions in flight, and a `--cache-ram` that
holds as many of the trace's mid-session conversations as kimik3's default 8192 MiB holds of a Kimi-K3 agent's:
one). The default, `--trace short`, is the trace above, as it was measured. Each phase prints how many prompts each
replica's host cache held (its log's `cache state` lines).

--rejoin: instead, a replica replaced by a fresh server mid-trace (`rejoin_phase`): its share of the requests smg
sent in the minute after it rejoined, against the minute before.

Reusable (other benches import them): `agent_trace`, `routed`, `play`, `counters`, `measure_phase`; a conversation
is bench/agent_trace.py's `Session`; the replicas are tests/support/llama_replicas.py's `Replicas`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import httpx  # noqa: E402
from agent_trace import WORDS, AgentShape, Session, coding_agent_trace, replica_sizing, words  # noqa: E402
from support.llama_replicas import DEMO_IMAGE, MODEL_NAME, Replicas, free_port, write_model  # noqa: E402

from kimik3_reconciler.adapters.router_smg import SmgRouter, start_smg, stop_pid, stop_smg  # noqa: E402
from kimik3_reconciler.adapters.slot_router import CONTROL_PREFIX  # noqa: E402
from kimik3_reconciler.cli.fleet_router import start_proxy  # noqa: E402
from kimik3_reconciler.engines import engine_for  # noqa: E402
from kimik3_reconciler.engines.base import PrefixCacheTokens  # noqa: E402
from kimik3_reconciler.fleet.router_layout import SMG_BEHIND, RouterLayout  # noqa: E402
from kimik3_reconciler.fleet.server_load import series_sum  # noqa: E402
from kimik3_reconciler.model.router_health import policy_settings  # noqa: E402

SERIES = engine_for("llamacpp").series
SESSION = "x-session-id"  # each request's conversation, for smg's routing keys (`POLICY:sticky`, `manual:min_load`)


def variant_settings(policy: str, variant: str) -> tuple[str, ...] | None:
    """smg's flags for `POLICY:VARIANT` (None: kimik3's, as `fleet apply` starts it). `smg`: smg's own settings;
    `sticky`: kimik3's and smg's sticky sessions (each conversation pinned to a worker by the session header every
    bench request carries, a new one placed by POLICY); `min_load` (with `manual`): each conversation pinned by that
    header, a new one to the worker running the fewest requests."""
    keyed = ("--routing-key-headers", SESSION)
    variants = {
        "": None,
        "smg": (),
        "sticky": (*policy_settings(policy), "--routing-key-override", *keyed),
        "min_load": ("--assignment-mode", "min_load", *keyed),
    }
    if variant not in variants:
        raise ValueError(f"unknown policy variant {variant!r} (one of {', '.join(v for v in variants if v)})")
    return variants[variant]


SLOTS = "slots"  # kimik3's own router (adapters/slot_router.py) in front of smg, as `fleet apply` starts it


def agent_trace(
    sessions: int = 24,
    agents: int = 4,
    turns: int = 6,
    system_chars: int = 700,
    task_chars: int = 350,
    step_chars: int = 250,
    seed: int = 40,
) -> list[Session]:
    """`sessions` conversations of `agents` agents (each agent's system prompt: instructions and its tools' JSON
    schemas, `system_chars` long, shared by its sessions), each `turns` requests long: an opening task of
    `task_chars`, then per turn a tool call and a result of about `step_chars` in all. Deterministic for a seed."""
    rng = random.Random(seed)
    systems = []
    for agent in range(agents):
        tools = [
            {
                "name": f"tool_{agent}_{i}",
                "description": words(rng, 80),
                "parameters": {"type": "object", "properties": {w: {"type": "string"} for w in rng.sample(WORDS, 4)}},
            }
            for i in range(4)
        ]
        schemas = json.dumps(tools)
        systems.append(f"You are agent {agent}. {words(rng, max(system_chars - len(schemas), 100))}\nTools: {schemas}")
    out = []
    for index in range(sessions):
        agent = index % agents
        steps = tuple(
            (
                f'{{"tool": "tool_{agent}_{rng.randrange(4)}", "arguments": "{words(rng, step_chars // 5)}"}}',
                words(rng, step_chars - step_chars // 5),
            )
            for _ in range(turns - 1)
        )
        out.append(Session(f"s{index}", agent, systems[agent], f"Task {index}: {words(rng, task_chars)}", steps))
    return out


def counters(urls: list[str]) -> dict[str, PrefixCacheTokens | None]:
    """Each replica's prefix-cache tokens since it started, from its /metrics (the engine protocol's reading)."""
    out: dict[str, PrefixCacheTokens | None] = {}
    for url in urls:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        out[url] = SERIES.prefix_cache(lambda name, text=text: series_sum(text, name))
    return out


@contextmanager
def routed(urls: list[str], policy: str, work: Path) -> Iterator[tuple[str, SmgRouter]]:
    """The router started as `kimik3 fleet apply` starts it with `urls` as its workers, all in rotation: smg (the
    adapter's command line; `POLICY:smg`: with smg's own settings for it), and for `slots` kimik3's router in front
    of it (smg behind, round robin, keeping the rotation); the clients' URL and smg's control client. Stopped after.
    Under `slots` the control client's `metrics_url` is smg's; `router_metrics(url)` is the one to count by."""
    port, metrics = free_port(), free_port()
    policy, _, variant = policy.partition(":")
    slots = policy == SLOTS
    settings = variant_settings(policy, variant)
    log = work / f"smg-{policy}-{variant or 'kimik3'}-{port}.log"
    running = start_smg("127.0.0.1", port, metrics, SMG_BEHIND if slots else policy, log, settings=settings)
    router = SmgRouter(running.url, running.metrics_url)
    proxy = None
    try:
        for url in urls:
            router.add(url)
        for url in urls:
            router.wait_in_rotation(url, timeout_s=60)
        if not slots:
            yield running.url, router
            return
        front = f"http://127.0.0.1:{free_port()}"
        layout = RouterLayout(SLOTS, "127.0.0.1", front, running.url, running.metrics_url, SMG_BEHIND, True)
        proxy = start_proxy(layout, work / f"route-{port}.log")
        yield front, router
    finally:
        if proxy is not None:
            stop_pid(proxy)
        router.close()
        stop_smg(running)


def router_metrics(url: str) -> str:
    """kimik3's router's metrics listener at the clients' `url` (for `routed_requests`, `watch_window`)."""
    return f"{url}{CONTROL_PREFIX}"


@dataclass(frozen=True)
class Turn:
    session: str
    turn: int
    started: float  # time.monotonic()
    ttft: float | None  # seconds to the first streamed token; None: no token came
    seconds: float
    status: int  # 0: no HTTP answer
    error: str = ""
    cached: int | None = None  # the server's `timings.cache_n` (prompt tokens reused from its cache)
    evaluated: int | None = None  # `timings.prompt_n` (prompt tokens it evaluated)


def _first_token(event: dict) -> bool:
    choices = event.get("choices") or []
    delta = (choices[0].get("delta") or {}) if choices else {}
    return any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls"))


def send_turn(client: httpx.Client, url: str, session: Session, turn: int, max_tokens: int) -> Turn:
    """One streamed chat request through the router; TTFT is the first chunk that carries a token; the server's
    reuse is the last chunk's `timings`."""
    body = {"model": MODEL_NAME, "messages": session.messages(turn), "max_tokens": max_tokens, "stream": True}
    started = time.monotonic()
    ttft, timings = None, {}
    try:
        with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers={SESSION: session.name}) as answer:
            if answer.status_code != 200:
                answer.read()
                return Turn(session.name, turn, started, None, time.monotonic() - started, answer.status_code)
            for line in answer.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[6:])
                timings = event.get("timings") or timings
                if ttft is None and _first_token(event):
                    ttft = time.monotonic() - started
    except httpx.HTTPError as exc:
        return Turn(session.name, turn, started, ttft, time.monotonic() - started, 0, str(exc))
    seconds = time.monotonic() - started
    return Turn(
        session.name,
        turn,
        started,
        ttft,
        seconds,
        200,
        cached=timings.get("cache_n"),
        evaluated=timings.get("prompt_n"),
    )


@dataclass
class Played:
    turns: list[Turn] = field(default_factory=list)
    sessions_done: int = 0
    cut: bool = False  # the deadline came before every session ended


def play(
    url: str,
    trace: list[Session],
    clients: int = 12,
    max_tokens: int = 12,
    deadline_s: float = 600.0,
    played: Played | None = None,
) -> Played:
    """The trace through `url`: `clients` sessions at once, each turn sent as soon as the last one's reply ended;
    a session starts when a client is free. Bounded in time: no turn starts after `deadline_s`. `played`: filled as
    the turns end (another thread may watch it), and returned."""
    played, lock = played or Played(), threading.Lock()
    queue = list(reversed(trace))
    end = time.monotonic() + deadline_s

    def client_loop() -> None:
        with httpx.Client(timeout=300) as client:
            while True:
                with lock:
                    if not queue:
                        return
                    session = queue.pop()
                for turn in range(session.turns):
                    if time.monotonic() > end:
                        played.cut = True
                        return
                    outcome = send_turn(client, url, session, turn, max_tokens)
                    with lock:
                        played.turns.append(outcome)
                with lock:
                    played.sessions_done += 1

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():  # joined with a timeout: Ctrl-C still ends the bench
            thread.join(0.5)
    return played


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def measure_phase(replicas: Replicas, policy: str, trace: list[Session], work: Path, **play_args: object) -> dict:
    """The trace played through smg under `policy` on fresh replicas: the servers' hit rate (their counters'
    tokens added over the replicas), TTFT p50/p95, each replica's share of the prompt tokens, failures."""
    replicas.start()
    with ExitStack() as stack:
        url, _router = stack.enter_context(routed(replicas.urls, policy, work))
        before = counters(replicas.urls)
        started = time.monotonic()
        played = play(url, trace, **play_args)  # type: ignore[arg-type]
        seconds = time.monotonic() - started
        after = counters(replicas.urls)
    held = replicas.held_prompts()
    per = {u: after[u].since(before[u]) for u in replicas.urls if after[u] is not None}
    fleet = PrefixCacheTokens.total(per.values())
    ttfts = [t.ttft for t in played.turns if t.ttft is not None]
    return {
        "policy": policy,
        "requests": len(played.turns),
        "failed": sum(t.status != 200 for t in played.turns),
        "sessions_done": played.sessions_done,
        "cut": played.cut,
        "seconds": seconds,
        "hit_rate": fleet.rate if fleet else None,
        "hit_tokens": fleet.hits if fleet else None,
        "prompt_tokens": fleet.prompt if fleet else None,
        "ttft_p50": quantile(ttfts, 0.5),
        "ttft_p95": quantile(ttfts, 0.95),
        "share": [per[u].prompt / fleet.prompt if fleet and fleet.prompt else None for u in replicas.urls],
        "per_replica_hit_rate": [per[u].rate for u in replicas.urls],
        "limits": replicas.limits(),
        "held_max": [max(h, default=0) for h in held],  # prompts each replica's host cache held at most
        "held_last": [h[-1] if h else 0 for h in held],
    }


def routed_requests(metrics_url: str) -> dict[str, float]:
    """Requests the router sent to each worker, from its metrics listener: smg's `smg_worker_requests_total{worker=
    URL}`, kimik3's router's `kimik3_router_requests_total{replica=URL}` (`router_metrics`)."""
    counts: dict[str, float] = {}
    for line in httpx.get(f"{metrics_url}/metrics", timeout=10).text.splitlines():
        if line.startswith(('smg_worker_requests_total{worker="', 'kimik3_router_requests_total{replica="')):
            url = line.split('"', 2)[1]
            counts[url] = counts.get(url, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


@dataclass(frozen=True)
class Window:
    """What the fleet did over a span: each replica's share of the requests smg sent, the servers' hit rate."""

    shares: dict[str, float]
    requests: float
    hit_rate: float | None


def watch_window(urls: list[str], metrics_url: str, seconds: float) -> Window:
    """The next `seconds`, read from smg's per-worker request counts and the servers' own counters."""
    cache, sent = counters(urls), routed_requests(metrics_url)
    time.sleep(seconds)
    cache_now, sent_now = counters(urls), routed_requests(metrics_url)
    routed_there = {u: sent_now.get(u, 0.0) - sent.get(u, 0.0) for u in urls}
    total = sum(routed_there.values())
    fleet = PrefixCacheTokens.total(now.since(cache[u]) for u, now in cache_now.items() if now)
    return Window(
        {u: n / total if total else 0.0 for u, n in routed_there.items()}, total, fleet.rate if fleet else None
    )


def rejoin_phase(
    replicas: Replicas,
    policy: str,
    trace: list[Session],
    work: Path,
    at: float = 0.35,
    window_s: float = 60.0,
    **play_args: object,
) -> dict:
    """The trace through smg under `policy`; once `at` of its turns have ended, a window of `window_s`; then the last
    replica leaves the router, is replaced by a fresh server (empty cache: a host rolled to a new build) and is
    added back, and a window of `window_s` from there: its share of the requests (fair: 1/N) and the fleet's hit
    rate in each."""
    replicas.start()
    total = sum(s.turns for s in trace)
    rejoined = replicas.urls[-1]
    with routed(replicas.urls, policy, work) as (url, router):
        counted_by = router_metrics(url) if policy == SLOTS else router.metrics_url or ""
        played = Played()
        thread = threading.Thread(target=play, args=(url, trace), kwargs={**play_args, "played": played}, daemon=True)
        thread.start()
        while len(played.turns) < at * total and thread.is_alive():
            time.sleep(0.5)
        before = watch_window(replicas.urls, counted_by, window_s)
        worker = router.find(rejoined)
        if worker is not None:
            router.remove(worker.id)
            router.wait_gone(worker.id, timeout_s=60)
        replicas.restart(len(replicas.urls) - 1)
        router.add(rejoined)
        router.wait_in_rotation(rejoined, timeout_s=60)
        after = watch_window(replicas.urls, counted_by, window_s)
        while thread.is_alive():
            thread.join(0.5)
    return {
        "policy": policy,
        "share_before": before.shares[rejoined],
        "share_after": after.shares[rejoined],
        "requests_before": before.requests,
        "requests_after": after.requests,
        "hit_rate_before": before.hit_rate,
        "hit_rate_after": after.hit_rate,
        "failed": sum(t.status != 200 for t in played.turns),
    }


def _row(r: dict) -> str:
    share = "/".join(f"{s:.2f}" if s is not None else "-" for s in r["share"])
    return (
        f"{r['policy']:12} {100 * (r['hit_rate'] or 0):6.1f} % {r['ttft_p50']:7.3f}s {r['ttft_p95']:7.3f}s "
        f"{r['requests']:5d} {r['failed']:4d} {r['seconds']:6.0f}s  {share}"
    )


def _spread(values: list[float], fmt: str) -> str:
    return (
        f"median {format(statistics.median(values), fmt)} "
        f"(min {format(min(values), fmt)}, max {format(max(values), fmt)}, {len(values)} runs)"
    )


def summary(results: list[list[dict]], policies: list[str]) -> list[str]:
    """Each policy against the first, per run (the same run's phases, the same trace on fresh replicas), as ratios
    with their spread over the runs; then each policy's hit rate."""
    base = policies[0]
    lines = [f"\nagainst {base}, measured in the same run:"]
    for policy in policies[1:]:
        pairs = [({p["policy"]: p for p in run}[base], {p["policy"]: p for p in run}[policy]) for run in results]
        hits = [b["hit_rate"] and (p["hit_rate"] or 0) / b["hit_rate"] for b, p in pairs]
        p50 = [p["ttft_p50"] / b["ttft_p50"] for b, p in pairs]
        p95 = [p["ttft_p95"] / b["ttft_p95"] for b, p in pairs]
        lines.append(f"  {policy}: hit rate x {_spread(hits, '.2f')}")
        lines.append(f"  {policy}: TTFT p50 x {_spread(p50, '.2f')}; p95 x {_spread(p95, '.2f')}")
    for policy in policies:
        rates = [100 * ({p["policy"]: p for p in run}[policy]["hit_rate"] or 0) for run in results]
        lines.append(f"  {policy}: hit rate % {_spread(rates, '.1f')}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--trace",
        choices=TRACES,
        default="short",
        help="short: conversations about twice their agent's shared prompt, replicas of --parallel 2 and the default "
        "8192 MiB prompt cache; agent: bench/agent_trace.py's coding agents (tool results dwarf the shared prompt) on "
        "replicas sized like a Kimi-K3 host (agent_trace.replica_sizing: slots, context, --cache-ram, clients)",
    )
    parser.add_argument("--sessions", type=int, help="default: the trace's (24)")
    parser.add_argument("--agents", type=int, help="default: the trace's (4)")
    parser.add_argument("--turns", type=int, help="default: the trace's (short 6, agent 8)")
    parser.add_argument("--clients", type=int, help="sessions at once; default: short 12, agent the sizing's")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds a phase may send turns for")
    parser.add_argument(
        "--policies",
        default="round_robin,cache_aware",
        help="smg policies, the first the baseline; POLICY:VARIANT as variant_settings says (smg: smg's own settings); "
        f"{SLOTS}: kimik3's own router (the servers' own reuse counts) in front of smg, as `fleet apply` starts it",
    )
    parser.add_argument(
        "--ctx-size", type=int, help="each replica's --ctx-size; default: short 8192, agent the sizing's"
    )
    parser.add_argument("--name", default="k3fc", help="the replicas' container names' prefix (two benches at once)")
    parser.add_argument("--image", default=DEMO_IMAGE)
    parser.add_argument("--json", type=Path, help="write every phase's figures here")
    parser.add_argument(
        "--rejoin",
        action="store_true",
        help="instead: a replica replaced mid-trace, its share of the requests in the minute after it rejoined",
    )
    args = parser.parse_args()
    if args.rejoin:
        return rejoin_main(args)
    policies = args.policies.split(",")
    trace, sizes = chosen_trace(args)
    chars = [len(json.dumps(s.messages(s.turns - 1))) for s in trace]
    print(
        f"trace: {args.trace}, {len(trace)} sessions of {len({s.agent for s in trace})} agents, {trace[0].turns} "
        f"turns each, last request {min(chars)}-{max(chars)} characters; {sizes['clients']} sessions at once; "
        f"replicas: {sizes['replicas']}; policies {', '.join(policies)}"
    )
    if "sizing" in sizes:
        print(f"sizing: {sizes['sizing']}")
    results: list[list[dict]] = []
    with tempfile.TemporaryDirectory(prefix="k3fc-") as folder:
        work = Path(folder)
        model = write_model(work / "model")
        with Replicas(model, image=args.image, prefix=args.name, **sizes["replicas"]) as replicas:
            for run in range(1, args.runs + 1):
                print(
                    f"\nrun {run}: {'policy':12} {'hits':>8} {'TTFT p50':>8} {'p95':>8} {'reqs':>5} {'fail':>4} "
                    f"{'time':>7}  prompt share per replica"
                )
                phases = []
                for policy in policies:
                    phase = measure_phase(
                        replicas, policy, trace, work, clients=sizes["clients"], deadline_s=args.deadline
                    )
                    print(f"       {_row(phase)}")
                    held = f"most {phase['held_max']}, at the end {phase['held_last']}"
                    print(f"       {'':12} prompts in each replica's host cache: {held}")
                    phases.append(phase)
                print(f"       replica 1's prompt cache: {phases[-1]['limits']}")
                results.append(phases)
    for line in summary(results, policies):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


TRACES = ("short", "agent")


def chosen_trace(args: argparse.Namespace) -> tuple[list[Session], dict]:
    """The trace `--trace` names, with its flags' overrides, and the replicas' sizes and sessions at once for it:
    the short trace's as before (2 slots, an 8192-token context, llama-server's default prompt cache); the agent
    trace's from `agent_trace.replica_sizing` (a Kimi-K3 host's conversations held, against those in flight)."""
    given = {k: v for k, v in (("sessions", args.sessions), ("agents", args.agents), ("turns", args.turns)) if v}
    if args.trace == "short":
        trace = agent_trace(**given)
        replicas = {"ctx_size": args.ctx_size or 8192}
        return trace, {"clients": args.clients or 12, "replicas": replicas}
    trace = coding_agent_trace(dataclasses.replace(AgentShape(), **given))
    sizing = replica_sizing(trace)
    replicas = {
        "parallel": sizing.parallel,
        "ctx_size": args.ctx_size or sizing.ctx_size,
        "cache_ram": sizing.cache_ram_mib,
    }
    return trace, {"clients": args.clients or sizing.clients, "replicas": replicas, "sizing": sizing}


def rejoin_main(args: argparse.Namespace) -> None:
    trace, sizes = chosen_trace(args)
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="k3fc-") as folder:
        work = Path(folder)
        model = write_model(work / "model")
        with Replicas(model, image=args.image, prefix=args.name, **sizes["replicas"]) as replicas:
            print(
                f"{'policy':22} {'share before':>12} {'after':>6} {'reqs after':>10} {'hits before':>11} {'after':>6}"
            )
            for _ in range(args.runs):
                for policy in args.policies.split(","):
                    r = rejoin_phase(replicas, policy, trace, work, clients=sizes["clients"], deadline_s=args.deadline)
                    results.setdefault(policy, []).append(r)
                    print(
                        f"{policy:22} {r['share_before']:12.2f} {r['share_after']:6.2f} {r['requests_after']:10.0f} "
                        f"{100 * (r['hit_rate_before'] or 0):10.1f}% {100 * (r['hit_rate_after'] or 0):5.1f}%"
                        f"  failed {r['failed']}"
                    )
    for policy, runs in results.items():
        print(
            f"{policy}: rejoined replica's share in the minute after: {_spread([r['share_after'] for r in runs], '.2f')}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
