"""The router in front of a fleet: smg (the SGLang model gateway, PyPI `smg`, the `fleet` extra), started and
stopped here, its workers added and removed at run time through its control API (`POST /workers`, `DELETE
/workers/{id}`, `GET /workers`) and its breakers read from its Prometheus listener.

A rollout removes a host (DELETE: smg purges its part of the cache-aware tree; bench/router_hold.py: the hold that
keeps it, measured and not safe to ship).

What smg does that a rollout relies on (seen with smg 1.13 here): `DELETE /workers/{id}` does not wait for the
requests smg sent there (it keeps the worker listed as `draining` for a fixed 5 s, "Draining 1 worker(s) for 5s
before removal", then drops it; a reply that runs longer is still on the server). So "wait for its in-flight
requests" is: until the worker is no longer listed, then until the server's own count of running and queued
requests is 0 (cli/fleet_apply.py).

Its defaults are set for a long-lived pool, not for a rollout (`smg launch --help`): a health check every 60 s
and a breaker that opens after 10 failures for 60 s. `HEALTH` (model/router_health.py) replaces them: a worker a rollout put back is
probed within 2 s, a dead one leaves rotation after 2 failed probes (4 s), and a breaker half-opens after 5 s, so
a breaker opened by a killed server cannot keep a healthy host out for a minute. A rollout never opens a breaker
itself: a host leaves the router before its server stops and comes back only once kimik3 has verified it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kimik3_reconciler.errors import TransientError
from kimik3_reconciler.model.router_health import HEALTH, policy_settings  # kimik3's settings (module docstring)

T = TypeVar("T")
BREAKER_STATES = {0: "closed", 1: "open", 2: "half-open"}
POLL_S = 0.2  # how often a wait asks smg again


def polled(look: Callable[[], T], done: Callable[[T], bool], timeout_s: float) -> tuple[T, bool]:
    """`look()` asked every POLL_S until `done` holds for what it saw or `timeout_s` has passed (at least once): what
    it saw last, and whether `done` held. The one loop behind the waits below."""
    from tenacity import Retrying, retry_if_not_result, stop_after_delay, wait_fixed

    seen = Retrying(
        retry=retry_if_not_result(done),
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(POLL_S),
        retry_error_callback=lambda state: state.outcome.result(),  # the timeout: what was seen last, not an error
    )(look)
    return seen, done(seen)


class RouterError(TransientError):
    """The router did not answer, or did not do what was asked in time."""


@dataclass(frozen=True)
class RouterWorker:
    """One worker as the router sees it: `in_rotation` when it is ready and healthy (new requests may go to it)."""

    id: str
    url: str
    status: str  # ready | draining | pending | ...
    healthy: bool
    breaker: str  # closed | open | half-open | unknown

    @property
    def in_rotation(self) -> bool:
        return self.status == "ready" and self.healthy and self.breaker != "open"


SMG_MISSING = "smg is not installed: pip install 'kimik3[fleet]'"


def smg_binary() -> str | None:
    """The smg next to this interpreter (the venv kimik3 runs from), else on PATH; None where there is none."""
    return shutil.which("smg", path=str(Path(sys.executable).parent)) or shutil.which("smg")


def smg_argv(
    host: str,
    port: int,
    metrics_port: int,
    policy: str,
    settings: tuple[str, ...] | None = None,
    metrics_host: str | None = None,
) -> list[str]:
    """The router's command line: bound to `host` (loopback unless the fleet file says otherwise), its metrics
    listener on `metrics_host` (None: the same address; smg's default is 0.0.0.0:29000), smg's regular HTTP router (its default backend:
    llama-server, vLLM and SGLang register as OpenAI-compatible workers and the policy chooses among them). Not
    `--backend openai`: that mode is smg's proxy to OpenAI-style providers, which sends every request for a model
    to one worker whatever the policy (seen with smg 1.13: 3 llama-server workers, round_robin, all 6 requests on
    the first). `settings`: the policy's flags (None: kimik3's, `policy_settings`; a bench passes () for smg's
    own)."""
    binary = smg_binary()
    if binary is None:
        raise RouterError(SMG_MISSING)
    return [
        binary,
        "launch",
        "--host",
        host,
        "--port",
        str(port),
        "--prometheus-host",
        metrics_host or host,
        "--prometheus-port",
        str(metrics_port),
        "--policy",
        policy,
        *(policy_settings(policy) if settings is None else settings),
        *HEALTH,
        # A worker whose probes fail stays listed (with its part of the tree; bench/router_hold.py relies on it): smg's
        # default without service discovery; said here so no default change drops one.
        "--no-remove-unhealthy-workers",
    ]


class SmgRouter:
    """smg's control API at `url` (http://HOST:PORT) and its metrics at `metrics_url`."""

    def __init__(self, url: str, metrics_url: str | None = None, timeout_s: float = 10.0) -> None:
        import httpx

        self.url, self.metrics_url = url.rstrip("/"), metrics_url
        self._client = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, **kwargs: object) -> dict:
        import httpx

        try:
            answer = self._client.request(method, f"{self.url}{path}", **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            raise RouterError(f"router {self.url}: {method} {path}: {exc}") from exc
        if answer.status_code >= 400:
            raise RouterError(f"router {self.url}: {method} {path}: HTTP {answer.status_code}: {answer.text[:200]}")
        return answer.json()

    def answers(self) -> bool:
        try:
            self._call("GET", "/workers")
        except RouterError:
            return False
        return True

    def workers(self) -> list[RouterWorker]:
        breakers = self._breakers()
        return [
            RouterWorker(
                w["id"],
                w["url"],
                w.get("status", ""),
                bool(w.get("is_healthy")),
                breakers.get(w["url"], "unknown"),
            )
            for w in self._call("GET", "/workers").get("workers", [])
        ]

    def find(self, url: str) -> RouterWorker | None:
        return next((w for w in self.workers() if w.url == url.rstrip("/")), None)

    def add(self, url: str) -> str:
        """Register `url` (http://HOST:PORT); its id. smg adds it in the background: `wait_in_rotation` after."""
        return str(self._call("POST", "/workers", json={"url": url.rstrip("/")})["worker_id"])

    def remove(self, worker_id: str) -> None:
        """Take the worker out of rotation now; the requests it holds keep running (smg does not wait for them)."""
        self._call("DELETE", f"/workers/{worker_id}")

    def wait_in_rotation(self, url: str, timeout_s: float) -> RouterWorker:
        worker, ready = polled(lambda: self.find(url), lambda seen: seen is not None and seen.in_rotation, timeout_s)
        if not ready:
            raise RouterError(
                f"{url} is not in the router's rotation after {timeout_s:.0f} s (router sees it as {worker})"
            )
        return worker

    def wait_gone(self, worker_id: str, timeout_s: float) -> bool:
        """True once the router no longer lists the worker (its drain period ended); False at the timeout."""
        return polled(self.workers, lambda listed: all(w.id != worker_id for w in listed), timeout_s)[1]

    def _breakers(self) -> dict[str, str]:
        """Each worker's breaker from `smg_worker_cb_state{worker="URL"}` (0 closed, 1 open, 2 half-open)."""
        if not self.metrics_url:
            return {}
        import httpx

        try:
            text = self._client.get(f"{self.metrics_url.rstrip('/')}/metrics").text
        except httpx.HTTPError:
            return {}
        states = {}
        for line in text.splitlines():
            if line.startswith('smg_worker_cb_state{worker="'):
                url = line.split('"', 2)[1]
                states[url] = BREAKER_STATES.get(int(float(line.rsplit(" ", 1)[1])), "unknown")
        return states


@dataclass(frozen=True)
class RunningRouter:
    pid: int
    url: str
    metrics_url: str
    log: Path


def start_smg(
    host: str,
    port: int,
    metrics_port: int,
    policy: str,
    log: Path,
    timeout_s: float = 60.0,
    settings: tuple[str, ...] | None = None,
    metrics_host: str | None = None,
    start: Callable[[list[str], Path, Callable[[], bool], float], int] | None = None,
) -> RunningRouter:
    """smg started by `start` (None: `start_detached`, its own session, its output in `log`; `fleet apply` passes
    its supervisor's, adapters/router_keep.py); returned once its control API answers."""
    url = f"http://{_host(host)}:{port}"
    router = SmgRouter(url)
    argv = smg_argv(host, port, metrics_port, policy, settings, metrics_host)
    try:
        pid = (start or start_detached)(argv, log, router.answers, timeout_s)
    finally:
        router.close()
    return RunningRouter(pid, url, f"http://{_host(metrics_host or host)}:{metrics_port}", log)


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def start_detached(argv: list[str], log: Path, answers: Callable[[], bool], timeout_s: float) -> int:
    """`argv` started detached (its own session, its output appended to `log`); its pid once `answers()` holds.
    RouterError (the process stopped) when it exits or does not answer within `timeout_s`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + timeout_s
    while not answers():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_pid(process.pid)
            raise RouterError(f"{Path(argv[0]).name} did not answer (log: {log})")
        time.sleep(0.2)
    return process.pid


def stop_smg(running: RunningRouter, timeout_s: float = 10.0) -> None:
    """SIGTERM (smg drains), SIGKILL after `timeout_s`; by pid."""
    stop_pid(running.pid, timeout_s)


def stop_pid(pid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM (smg and kimik3's router drain), SIGKILL after `timeout_s`."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:  # not our child (started by another kimik3): poll it
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # ended between the last look and now
        return
