"""smg's health checks and breaker as a fleet's router runs them (kimik3's choice for rollouts, not smg's defaults of
a long-lived pool: a health check every 60 s, a breaker open after 10 failures for 60 s): a worker put back is
probed within 2 s, a dead one leaves rotation after 2 failed probes, a breaker half-opens after 5 s. One source for
the router `fleet apply` starts (adapters/router_smg.py) and the one `fleet render --target kubernetes` renders; the
cache-aware policy's settings (CACHE_AWARE, why each value below); and how a rollout holds a host out of rotation
without losing what smg's tree says it holds (HOLD, `back_in_step`)."""

PROBE_TIMEOUT_S = 2  # --health-check-timeout-secs below; what a held worker's probes get back on release

# smg's own flag names (`smg launch --help`); the values are kimik3's.
HEALTH = (
    "--health-check-interval-secs",
    "2",
    "--health-failure-threshold",
    "2",
    "--health-success-threshold",
    "1",
    "--health-check-timeout-secs",
    str(PROBE_TIMEOUT_S),
    "--health-check-endpoint",
    "/health",
    "--cb-failure-threshold",
    "5",
    "--cb-success-threshold",
    "1",
    "--cb-timeout-duration-secs",
    "5",
    "--retry-max-retries",
    "3",
)
# smg's cache-aware policy (`--policy cache_aware`, the fleet file's default), kimik3's values (smg 1.13's in
# brackets). A request goes to the worker whose approximate prefix tree (what smg sent there) matches most of it
# when that share is at least --cache-threshold, else to the worker with the smallest tree; a matched worker is
# skipped for the least-loaded one when its requests in flight exceed the fleet's mean by --balance-abs-threshold
# AND --balance-rel-threshold times. Why these values:
# - --balance-abs-threshold 2 [64]: a replica that rejoins after an update holds no prefix, so every conversation
#   stays pinned to the others and it gets only what spills over; at 64 (capped by smg at the in-flight count's
#   swing, at least 4) a llama.cpp fleet, whose replicas serve a few slots each, hardly spills: a replaced replica
#   got none of the requests in its first minute back, 2 draws (bench/fleet_cache.py --rejoin; 0.36 and 0.17 of
#   them with these values, fair 0.33). At 2 a replica 2 requests above the mean (a slot's worth of queueing) hands the request to the
#   idlest one, whose tree then holds that conversation: its next turns stay there.
# - --cache-threshold 0.5 [0.3]: an agent's system prompt and tool schemas are most of a first request and every
#   replica holds them, so at 0.3 a new conversation follows the shared prompt to the busiest trees; at 0.5 it goes
#   to the smallest tree (the rejoined replica first) unless it shares most of its text with one replica, and a
#   later turn (its conversation so far: most of the request) still finds its own replica.
# - eviction and --max-tree-size left at smg's (60 s, 64 Mi characters over all workers): the tree forgets only
#   under that bound; a replica's own cache forgets sooner, which costs a partial miss, never a wrong answer.
CACHE_AWARE = (
    "--cache-threshold",
    "0.5",
    "--balance-abs-threshold",
    "2",
    "--balance-rel-threshold",
    "1.5",
)


def policy_settings(policy: str) -> tuple[str, ...]:
    """kimik3's flags for the fleet file's policy: CACHE_AWARE for cache_aware; smg's defaults for the others."""
    return CACHE_AWARE if policy == "cache_aware" else ()


# Holding a host out for a rollout. smg 1.13 has no call that takes a worker out of rotation and keeps its prefix
# tree: `DELETE /workers/{id}` purges the worker from the cache-aware tree (smg's model_gateway/src/policies/
# cache_aware.rs, `remove_worker_by_url`: `remove_tenant_all` on every model's tree; smg-project/smg, the version
# indexed beside 1.13), so a host removed and added back holds nothing there: its conversations and every new session
# (whose shared system prompt the other trees hold) match the others' trees. Seen with smg 1.13 and three stub
# workers: once none of the 4 conversations it served and none of 6 new sessions went back to it; in another trace all
# 5 did (a match under --cache-threshold goes to the least-loaded worker, and a re-added one wins ties): a draw. A worker whose health probes fail is
# kept, tree and all (status not_ready, then failed; removed only under --remove-unhealthy-workers, off without
# service discovery), and its probes are smg's per-worker settings (`PATCH /workers/{id}` `health`): a probe timeout
# of 0 s fails every probe at once (reqwest's TimedOut), so it leaves rotation within one probe interval (1.5-2.2 s
# seen) and takes no new request while its server finishes the ones it has; probes are not requests, so its breaker
# stays closed. Restoring the timeout puts it back at its next probe, with the tree it had: seen after a 70 s outage,
# the 3 of its 4 conversations that had no turn while it was out went back to it (the 4th stays where its turn went,
# whose cache now holds it) and so did 2 of 6 new sessions. A label says the hold is kimik3's (`fleet status`, and
# `router: in` knows to release it).
# NOT SAFE FOR A ROLLOUT, so `router: out` does not hold (cli/fleet_apply.py `_take_out(hold=False)`): seen with a real
# llama-server (tests/integration/test_fleet_drain_docker.py's set-up, 5 replies running), smg took the held worker
# out of rotation and, once those replies completed, put it back `ready` (its liveness code promotes a demoted worker
# on a successful contact), label still `out`, while its server was about to be replaced: new requests could reach a
# server being stopped. Only bench/fleet_cache_rollout.py `--out hold` uses it, to measure what the kept tree does.
HOLD_LABEL = "kimik3.rollout"
HOLD = {"health": {"timeout_secs": 0}, "labels": {HOLD_LABEL: "out"}}
RELEASE = {"health": {"timeout_secs": PROBE_TIMEOUT_S}, "labels": {HOLD_LABEL: "in"}}
# A hold takes effect after the health check's failure threshold (2 probes, 2 s apart); past this the smg does not
# fail a 0 s probe (another version) and the rollout falls back to smg's own drain (DELETE), tree lost.
HOLD_TAKES_S = 10.0


def is_held(labels: dict[str, str]) -> bool:
    """Whether a worker's labels say a rollout holds it out (HOLD)."""
    return labels.get(HOLD_LABEL) == "out"


def back_in_step(listed: bool, held: bool) -> str:
    """How `router: in` puts a host back: "add" when smg does not list it (a first rollout, a host smg's own drain
    removed), "release" when a rollout holds it (its tree kept: its conversations come back to it), "wait" when it
    is listed and not held (its own health checks decide: nothing to undo)."""
    if not listed:
        return "add"
    return "release" if held else "wait"
