"""smg's hold, for bench/fleet_cache_rollout.py `--out hold` only: a host taken out of smg's rotation with its part of
the cache-aware tree kept, and put back. Not kimik3's: `router: out` removes a host (cli/fleet_apply.py `_take_out`).

smg 1.13 has no call that takes a worker out of rotation and keeps its prefix tree: `DELETE /workers/{id}` purges the
worker from the cache-aware tree (smg's model_gateway/src/policies/cache_aware.rs, `remove_worker_by_url`:
`remove_tenant_all` on every model's tree; smg-project/smg, the version indexed beside 1.13), so a host removed and
added back holds nothing there: its conversations and every new session (whose shared system prompt the other trees
hold) match the others' trees. Seen with smg 1.13 and three stub workers: once none of the 4 conversations it served
and none of 6 new sessions went back to it; in another trace all 5 did (a match under --cache-threshold goes to the
least-loaded worker, and a re-added one wins ties): a draw. A worker whose health probes fail is kept, tree and all
(status not_ready, then failed; removed only under --remove-unhealthy-workers, off in kimik3's `smg_argv`), and its
probes are smg's per-worker settings (`PATCH /workers/{id}` `health`): a probe timeout of 0 s fails most probes at
once (reqwest's TimedOut; HOLD says why not all), and with a failure threshold of 1 it leaves rotation at the first
failed one (1.5-2.2 s seen) and takes no new request
while its server finishes the ones it has; probes are not requests, so its breaker stays closed. Restoring the timeout
and thresholds puts it back at its next probe, with the tree it had: seen after a 70 s outage, the 3 of its 4 conversations that had
no turn while it was out went back to it (the 4th stays where its turn went, whose cache now holds it) and so did 2
of 6 new sessions (tests/integration/test_router_hold_smg.py). A label marks the hold.

NOT SAFE FOR A ROLLOUT, so kimik3 does not hold: seen with a real llama-server (tests/integration/
test_fleet_drain_docker.py's set-up, 5 replies running), smg took the held worker out of rotation and, once those
replies completed, put it back `ready` (its liveness code promotes a demoted worker on a successful contact), label
still `out`, while its server was about to be replaced: new requests could reach a server being stopped
(docs/operations.md, "Warm rollout").
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from kimik3_reconciler.adapters.router_smg import RouterError, SmgRouter, polled
from kimik3_reconciler.cli.fleet_apply import _drained, _leaving, _put_back
from kimik3_reconciler.model.router_health import FAILURE_THRESHOLD, PROBE_TIMEOUT_S, SUCCESS_THRESHOLD

LABEL = "kimik3.rollout"
# A 0 s probe timeout fails a probe only when the answer takes longer than the tokio timer's next tick (1 ms): a
# server on loopback sometimes answers first, so probes of a held worker pass now and then (seen in CI: 3 of 5 in
# a row passed, and at smg's threshold of 2 failures in a row the hold never took in 10 s). Hence one failed probe
# takes it out of rotation and only SUCCESSES_TO_RETURN passes in a row (over 30 min at a probe every 2 s) would put
# it back before the release.
SUCCESSES_TO_RETURN = 1000
HOLD = {
    "health": {"timeout_secs": 0, "failure_threshold": 1, "success_threshold": SUCCESSES_TO_RETURN},
    "labels": {LABEL: "out"},
}
RELEASE = {  # kimik3's probe settings back (model/router_health.py)
    "health": {
        "timeout_secs": PROBE_TIMEOUT_S,
        "failure_threshold": FAILURE_THRESHOLD,
        "success_threshold": SUCCESS_THRESHOLD,
    },
    "labels": {LABEL: "in"},
}
# A hold takes effect at the first failed probe (one every 2 s, most of them fail); past this the smg does not fail
# a 0 s probe (another version, or a server answering within the tick every time) and the host is removed instead
# (smg's own drain, tree lost).
TAKES_S = 10.0


def is_held(labels: dict[str, str]) -> bool:
    """Whether a worker's labels say it is held out (HOLD)."""
    return labels.get(LABEL) == "out"


def _patch(router: SmgRouter, worker_id: str, body: dict) -> None:
    try:
        answer = httpx.patch(f"{router.url}/workers/{worker_id}", json=body, timeout=10)
    except httpx.HTTPError as exc:
        raise RouterError(f"router {router.url}: PATCH /workers/{worker_id}: {exc}") from exc
    if answer.status_code >= 400:
        raise RouterError(f"router {router.url}: PATCH /workers/{worker_id}: HTTP {answer.status_code}")


def hold(router: SmgRouter, worker_id: str) -> None:
    """Its probes fail from now (a 0 s timeout): within one probe interval smg routes it nothing new; it stays listed
    with its part of the cache-aware tree. `wait_out_of_rotation` after."""
    _patch(router, worker_id, HOLD)


def release(router: SmgRouter, worker_id: str) -> None:
    """Undo `hold`: its probes get kimik3's timeout back and pass once its server answers. `wait_in_rotation` after."""
    _patch(router, worker_id, RELEASE)


def held(router: SmgRouter, url: str) -> bool:
    """Whether smg lists the worker at `url` with the hold's label."""
    listed = httpx.get(f"{router.url}/workers", timeout=10).json().get("workers", [])
    return any(w["url"] == url.rstrip("/") and is_held(w.get("labels") or {}) for w in listed)


def wait_out_of_rotation(router: SmgRouter, url: str, timeout_s: float) -> bool:
    """True once smg routes `url` nothing new (listed out of rotation, or not listed); False at the timeout."""
    return polled(lambda: router.find(url), lambda worker: worker is None or not worker.in_rotation, timeout_s)[1]


def hold_out(  # noqa: PLR0913 - `_take_out`'s arguments
    router: SmgRouter,
    host_name: str,
    worker: str,
    drain_timeout: float,
    min_serving: int,
    in_flight: Callable[[], int | None],
) -> None:
    """`router: out` (`_take_out`) with a hold in place of the removal: out once the others keep the floor, held,
    then until its server runs no request; removed where the hold does not take in TAKES_S."""
    deadline = time.monotonic() + drain_timeout
    listed = _leaving(router, host_name, worker, min_serving, drain_timeout)
    if listed is None:
        return
    hold(router, listed.id)
    if not wait_out_of_rotation(router, listed.url, min(TAKES_S, max(0.0, deadline - time.monotonic()))):
        # Still in rotation: an smg that does not fail a 0 s probe. Removal still drains it, at the cost of its tree.
        release(router, listed.id)
        print(f"{host_name}: the router did not hold it out in {TAKES_S:.0f} s; removed instead (its tree lost)")
        router.remove(listed.id)
        router.wait_gone(listed.id, max(0.0, deadline - time.monotonic()))
    _drained(host_name, in_flight, deadline)


def put_back_held(
    router: SmgRouter, host_name: str, worker: str, traffic_timeout: float, warm: Callable[[], None] | None = None
) -> str:
    """`router: in` (`_put_back`) for a host `hold_out` took out: warmed (`warm`), then released where it is still
    held (its part of the tree back with it), then as the step goes on: in rotation, sent traffic. A host the hold
    did not take is added back, as the step does."""

    def warmed_then_released() -> None:
        if warm is not None:
            warm()
        listed = router.find(worker)
        if listed is not None and held(router, worker):
            release(router, listed.id)

    return _put_back(router, host_name, worker, traffic_timeout, warmed_then_released)
