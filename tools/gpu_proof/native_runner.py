"""A `CandidateRunner` for a host without Docker: each candidate is kimik3's rendered llama-server argv run
as a local process (as the GPU proofs run it on the lent H200), then `kimik3 bench`'s own sweep.

It implements tuning/runner.py's five methods, so `Search` drives it exactly as it drives DockerRunner:
- converge: render the candidate's argv (planning/launch.py), stop the running server, start the new one,
  wait for /health, then verify with a short completion (a server that is up but cannot generate is a
  failed candidate). A candidate whose argv is the one already running is not reloaded (no load).
- measure: benchmark.sweep_levels against the process, kept in state like a `kimik3 bench` run; the
  fingerprint is the argv's digest (there is no container fingerprint here).
Kept under tools/gpu_proof: it runs the argv that kimik3 renders for its container on the host itself,
which the product does not do (no mounts, no image); the layers of the product stay as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from kimik3_reconciler.adapters.bench_client import HttpLoad
from kimik3_reconciler.benchmark import sweep_levels
from kimik3_reconciler.benchmark.store import keep
from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.llamacpp.placement import forecast
from kimik3_reconciler.errors import PermanentError, VerifyFailed
from kimik3_reconciler.model.bench import BenchRun, BenchSettings
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile_source import LoadedProfile
from kimik3_reconciler.planning.launch import render_launch
from kimik3_reconciler.ports import StatePort
from kimik3_reconciler.verify.checks import Server


def stop_process(process: subprocess.Popen, timeout_s: float) -> None:
    """A local server stopped: SIGTERM, then SIGKILL if it has not exited within `timeout_s`; reaped either way
    (nothing to do when it has exited already). load_probe.py and bench/load.py stop theirs with it too."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class NativeRunner:
    def __init__(
        self, bindir: Path, observed: Observed, state: StatePort, logdir: Path, ready_timeout_s: float = 300.0
    ):
        self.bindir, self.observed, self.state, self.logdir = bindir, observed, state, logdir
        self.ready_timeout_s = ready_timeout_s
        self.process: subprocess.Popen | None = None
        self.argv: list[str] | None = None
        self.loads: list[dict] = []  # one record per real load: argv, seconds to healthy

    def argv_for(self, loaded: LoadedProfile) -> list[str]:
        return list(render_launch(loaded.profile, self.observed, "native", "native").spec.command)

    def base_url(self, loaded: LoadedProfile) -> str:
        return f"http://127.0.0.1:{loaded.profile.serve.port}"

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 30)
        self.process, self.argv = None, None

    def converge(self, loaded: LoadedProfile) -> None:
        argv = self.argv_for(loaded)
        if self.process is not None and self.process.poll() is None and argv == self.argv:
            return  # already serving exactly this candidate: no load
        self.stop()
        started = time.monotonic()
        log = open(self.logdir / f"server-{len(self.loads):02d}.log", "w")
        env = {**os.environ, "LD_LIBRARY_PATH": f"{self.bindir}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
        self.process = subprocess.Popen(
            [str(self.bindir / "llama-server"), *argv], cwd=self.bindir, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        self.argv = argv
        url = self.base_url(loaded)
        while not _healthy(url):
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process, self.argv = None, None
                raise PermanentError(f"llama-server exited with {code} while loading (log {log.name})")
            if time.monotonic() - started > self.ready_timeout_s:
                self.stop()
                raise PermanentError(f"llama-server not healthy after {self.ready_timeout_s:.0f} s")
            time.sleep(0.1)
        healthy = time.monotonic() - started
        _verify(url)
        self.loads.append(
            {"argv": argv, "healthy_s": round(healthy, 2), "verified_s": round(time.monotonic() - started, 2)}
        )

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        assert self.argv is not None, "measure after converge"
        levels = sweep_levels(
            HttpLoad(), Server(self.base_url(loaded), None), settings, engine_for(loaded.profile.engine).series
        )
        fingerprint = hashlib.sha256(json.dumps(self.argv).encode()).hexdigest()[:16]
        serve = loaded.profile.serve
        knobs = {"serve.n_cpu_moe": serve.n_cpu_moe, "serve.ubatch": serve.ubatch, "serve.parallel": serve.parallel}
        date = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        run = BenchRun(loaded.profile.name, fingerprint, date, settings, levels, knobs)
        return run, keep(self.state, run)

    def warm_up(self, loaded: LoadedProfile, settings: BenchSettings) -> None:
        assert self.argv is not None, "warm up after converge"
        sweep_levels(
            HttpLoad(), Server(self.base_url(loaded), None), settings, engine_for(loaded.profile.engine).series
        )  # thrown away

    def settle(self, loaded: LoadedProfile) -> None:
        self.converge(loaded)

    def load_seconds(self, loaded: LoadedProfile, observed: Observed) -> float:
        placement = forecast(loaded.profile, observed)
        return placement.load_seconds if placement is not None else 0.0


def _healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/health", timeout=2).status == 200
    except Exception:  # noqa: BLE001 - refused, 503 while loading, reset: not yet
        return False


def _verify(url: str) -> None:
    body = json.dumps({"prompt": "The reconciler", "n_predict": 4, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{url}/completion", body, {"Content-Type": "application/json"})
    try:
        reply = json.loads(urllib.request.urlopen(request, timeout=120).read())
    except Exception as exc:  # noqa: BLE001
        raise VerifyFailed(f"{url}/completion: {exc}") from None
    if int(reply.get("tokens_predicted") or 0) < 1:
        raise VerifyFailed(f"{url}/completion generated nothing")
