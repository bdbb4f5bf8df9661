"""smg's health checks and breaker as a fleet's router runs them (kimik3's choice for rollouts, not smg's defaults of
a long-lived pool: a health check every 60 s, a breaker open after 10 failures for 60 s): a worker put back is
probed within 2 s, a dead one leaves rotation after 2 failed probes, a breaker half-opens after 5 s. One source for
the router `fleet apply` starts (adapters/router_smg.py) and the one `fleet render --target kubernetes` renders; the
cache-aware policy's settings (CACHE_AWARE, why each value below)."""

# --health-check-timeout-secs and the thresholds below (bench/router_hold.py's release restores them).
PROBE_TIMEOUT_S = 2
FAILURE_THRESHOLD = 2
SUCCESS_THRESHOLD = 1

# smg's own flag names (`smg launch --help`); the values are kimik3's.
HEALTH = (
    "--health-check-interval-secs",
    "2",
    "--health-failure-threshold",
    str(FAILURE_THRESHOLD),
    "--health-success-threshold",
    str(SUCCESS_THRESHOLD),
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
