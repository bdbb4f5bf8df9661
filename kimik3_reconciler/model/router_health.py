"""smg's health checks and breaker as a fleet's router runs them (kimik3's choice for rollouts, not smg's defaults of
a long-lived pool: a health check every 60 s, a breaker open after 10 failures for 60 s): a worker put back is
probed within 2 s, a dead one leaves rotation after 2 failed probes, a breaker half-opens after 5 s. One source for
the router `fleet apply` starts (adapters/router_smg.py) and the one `fleet render --target kubernetes` renders."""

# smg's own flag names (`smg launch --help`); the values are kimik3's.
HEALTH = (
    "--health-check-interval-secs",
    "2",
    "--health-failure-threshold",
    "2",
    "--health-success-threshold",
    "1",
    "--health-check-timeout-secs",
    "2",
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
