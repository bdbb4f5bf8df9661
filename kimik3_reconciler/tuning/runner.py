"""How tune launches and measures a candidate: the `CandidateRunner` interface, and its Docker
implementation (a real converge through the engine, then `kimik3 bench`'s sweep). A runner for a native
llama-server (a GPU host without Docker, as tools/gpu_proof drives one) implements the same four methods."""

from __future__ import annotations

from typing import Protocol

from kimik3_reconciler.benchmark import converged_deployment, run_sweep
from kimik3_reconciler.benchmark.store import keep
from kimik3_reconciler.engine import Engine
from kimik3_reconciler.errors import VerifyFailed
from kimik3_reconciler.model.bench import BenchRun, BenchSettings
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile_source import LoadedProfile
from kimik3_reconciler.planning.placement import forecast


class CandidateRunner(Protocol):
    def converge(self, loaded: LoadedProfile) -> None:
        """Make the server run `loaded` (replace, health, verify); a Kimik3Error marks the candidate failed."""
        ...

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        """A bench sweep of the converged candidate: the run, and the state key it is kept under."""
        ...

    def settle(self, loaded: LoadedProfile) -> None:
        """The search's last converge (the winner or the original), recorded as the last good profile."""
        ...

    def load_seconds(self, loaded: LoadedProfile, observed: Observed) -> float:
        """The predicted time of one load of this candidate (for the search's predicted time)."""
        ...


class DockerRunner:
    """Candidates as `kimik3 apply` runs them: the engine converges the container, verify checks it."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def converge(self, loaded: LoadedProfile) -> None:
        from kimik3_reconciler.verify import verify

        result = self.engine.apply(loaded)  # not apply_or_revert: a candidate is never the last good profile
        if result.changed:
            report = verify(self.engine, loaded)
            if not report.ok:
                raise VerifyFailed(report.failure_text())

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        observed = converged_deployment(self.engine, loaded)
        run = run_sweep(self.engine, loaded, settings, observed)
        return run, keep(self.engine.ports.state, run)

    def settle(self, loaded: LoadedProfile) -> None:
        from kimik3_reconciler.verify import verify

        def check() -> None:
            report = verify(self.engine, loaded)
            if not report.ok:
                raise VerifyFailed(report.failure_text())

        self.engine.apply_or_revert(loaded, check)

    def load_seconds(self, loaded: LoadedProfile, observed: Observed) -> float:
        placement = forecast(loaded.profile, observed)
        return placement.load_seconds if placement is not None else 0.0
