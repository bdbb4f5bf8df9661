"""How tune launches and measures a candidate: the `CandidateRunner` interface, and its Docker
implementation (a real converge through the orchestrator, then `kimik3 bench`'s sweep). A runner for a native
llama-server (a GPU host without Docker, as tools/gpu_proof drives one) implements the same five methods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kimik3_reconciler.benchmark import converged_deployment, run_sweep
from kimik3_reconciler.benchmark.store import keep
from kimik3_reconciler.engines.llamacpp.placement import forecast
from kimik3_reconciler.model.bench import BenchRun, BenchSettings
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.records import load_key
from kimik3_reconciler.orchestrator import Orchestrator


class CandidateRunner(Protocol):
    def converge(self, loaded: LoadedProfile) -> None:
        """Make the server run `loaded` (replace, health, verify); a Kimik3Error marks the candidate failed."""
        ...

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        """A bench sweep of the converged candidate: the run, and the state key it is kept under."""
        ...

    def warm_up(self, loaded: LoadedProfile, settings: BenchSettings) -> None:
        """Requests sent to the converged candidate and thrown away (the first ones after a load run cold)."""
        ...

    def settle(self, loaded: LoadedProfile) -> None:
        """The search's last converge (the winner or the original), recorded as the last good profile."""
        ...

    def load_seconds(self, loaded: LoadedProfile, observed: Observed) -> float:
        """The predicted time of one load of this candidate (for the search's predicted time)."""
        ...


class DockerRunner:
    """Candidates as `kimik3 apply` runs them: the orchestrator converges the container, verify checks it."""

    def __init__(self, orchestrator: Orchestrator):
        self.orchestrator = orchestrator

    def converge(self, loaded: LoadedProfile) -> None:
        """apply_or_revert without its last-good record and its revert: a candidate is never the profile to
        come back to, and a failed one is a result (the search goes on to the next candidate)."""
        self.orchestrator.apply_checked(loaded, self._check(loaded))

    def _check(self, loaded: LoadedProfile) -> Callable[[], None]:
        # lazy, as before: verify stays off the import path
        from kimik3_reconciler.verify import verification

        return verification(self.orchestrator, loaded)

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        observed = converged_deployment(self.orchestrator, loaded)
        run = run_sweep(self.orchestrator, loaded, settings, observed)
        return run, keep(self.orchestrator.ports.state, run)

    def warm_up(self, loaded: LoadedProfile, settings: BenchSettings) -> None:
        run_sweep(self.orchestrator, loaded, settings, converged_deployment(self.orchestrator, loaded))  # not kept

    def settle(self, loaded: LoadedProfile) -> None:
        self.orchestrator.apply_or_revert(loaded, self._check(loaded))

    def load_seconds(self, loaded: LoadedProfile, observed: Observed) -> float:
        """The placement forecast's load time; without one (a vLLM/SGLang checkpoint has no GGUF layout, a GPU
        host's facts may be unknown), what this host's last load of the container took (the health wait's
        record, the exporter's kimik3_model_load_seconds), scaled to this model's bytes when the record's were
        another's (the profile's model changed under the same name); 0 when it never loaded one."""
        placement = forecast(loaded.profile, observed)
        if placement is not None:
            return placement.load_seconds
        last = self.orchestrator.ports.state.read(load_key(loaded.profile.name)) or {}
        seconds, then = float(last.get("seconds") or 0.0), last.get("bytes")
        now = observed.model.total_bytes
        return seconds * now / then if then and now and then != now else seconds
