"""kimik3's one error tree; adapters translate SDK exceptions into it, the CLI maps it to exit codes.

Exit codes (the one table; README and `kimik3 --help` repeat it):

    0  ok: converged, valid, no changes
    1  a step failed, did not converge, or verify failed
    2  invalid input: profile, plan file or a file it names (nothing was touched)
    3  the host gate or the planner refused (nothing was touched)
    4  changes pending (`plan --detailed-exitcode`; bench and tune refuse a host that is not converged)
    5  locked: another kimik3 holds this host's lock (LockHeld)
    6  the hub: unreachable, or it refused a request (HubError; the URL is named)
    7  a saved plan is stale: the host or the profile moved since it was made (nothing was touched)

    Kimik3Error                       exit 1 unless a subclass says otherwise
    ├── ProfileError                  invalid profile (file:line problems)        exit 2
    ├── InputError                    a file the profile names is missing/bad      exit 2
    ├── PlanError                     the planner refuses (a rule needs host facts) exit 3
    ├── StalePlan                     apply PLAN: the host or profile moved        exit 7
    ├── ConvergenceError              rounds exhausted, names the unconverged steps
    ├── NotConverged                  bench/tune: the host is not converged (names the changes) exit 4
    ├── LockHeld                      another kimik3 holds the host lock (names it) exit 5
    └── StepError                     an effect failed
        ├── TransientError            retrying may help (tenacity retries these in adapters)
        └── PermanentError            retrying will not help
            ├── GpuProbeFailed        a container could not see the GPUs (the probe, first step) exit 3
            ├── LoadFailed            the container exited or timed out while loading
            ├── BuildFailed           docker build failed (failing step + last log lines)
            ├── SmokeFailed           a new image failed its tiny-model smoke test
            ├── GateFailed            a quant failed its PPL/KLD gate against the reference
            ├── VerifyFailed          the new deployment failed `kimik3 verify` after apply
            └── DownloadFailed        a fetched file failed verification, disk full
                └── HubError          hub unreachable or refusing (URL named)      exit 6
"""

from __future__ import annotations

from dataclasses import dataclass


class Kimik3Error(Exception):
    """Base of every error kimik3 raises on purpose."""

    exit_code = 1


@dataclass(frozen=True)
class ProfileProblem:
    """One thing wrong with a profile, located in its file."""

    source: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ProfileError(Kimik3Error):
    """The profile is invalid; nothing on the host was touched."""

    exit_code = 2

    def __init__(self, problems: tuple[ProfileProblem, ...] | list[ProfileProblem]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class InputError(Kimik3Error):
    """A local input the profile names (patch, archive, api key file) is missing or unreadable."""

    exit_code = 2


class PlanError(Kimik3Error):
    """The planner refuses the profile against these observed facts."""

    exit_code = 3


class ConvergenceError(Kimik3Error):
    """The engine ran out of rounds; `pending` names the steps that still want changes."""

    def __init__(self, message: str, pending: tuple[str, ...] = ()):
        self.pending = pending
        super().__init__(message)


class NotConverged(Kimik3Error):
    """`kimik3 bench`/`tune` refuse a host that is not converged to the profile: they would measure
    something the profile does not describe. `pending` names the plan's changes; nothing was sent."""

    exit_code = 4

    def __init__(self, message: str, pending: tuple[str, ...] = ()):
        self.pending = pending
        super().__init__(message)


class LockHeld(Kimik3Error):
    """Another kimik3 changes this host (the per-host lock); nothing was touched. `lock_id` is its lock."""

    exit_code = 5

    def __init__(self, message: str, lock_id: str | None = None):
        self.lock_id = lock_id
        super().__init__(message)


class StepError(Kimik3Error):
    """An effect (download, build, launch, wait) failed."""


class TransientError(StepError):
    """Retrying may help (connection reset, daemon restarting)."""


class PermanentError(StepError):
    """Retrying will not help."""


class GpuProbeFailed(PermanentError):
    """A real container could not see the profile's GPUs (seed 000 step 1's nvidia-smi check). The probe is
    the plan's first step, so nothing was touched: a refusal of the host, like the gate's (exit 3)."""

    exit_code = 3


class LoadFailed(PermanentError):
    """llama-server exited or timed out while loading; carries its last log lines."""

    def __init__(self, message: str, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(f"{message}\n--- last log lines ---\n{log_tail}" if log_tail else message)


class BuildFailed(PermanentError):
    """docker build failed; carries the failing step and the last log lines."""

    def __init__(self, message: str, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(f"{message}\n--- last build lines ---\n{log_tail}" if log_tail else message)


class SmokeFailed(LoadFailed):
    """A new image did not serve the tiny kimi-k3 model: it is never launched with the real one."""


class GateFailed(LoadFailed):
    """A quant failed (or could not run) its PPL/KLD gate: it is never served."""


class VerifyFailed(PermanentError):
    """The new deployment answered, but `kimik3 verify` found a check failing."""


class DownloadFailed(PermanentError):
    """A fetched file failed verification (sha256), or could not be written (disk full)."""


class HubError(DownloadFailed):
    """The hub (or mirror) is unreachable, or refused a request (unknown repo/revision/path, 401/403,
    5xx after retries); the message names its URL. Distinct from the host gate's refusal (3)."""

    exit_code = 6


class StalePlan(Kimik3Error):
    """`kimik3 apply PLAN`: the host or the profile moved since the plan was made; nothing was executed."""

    exit_code = 7

    def __init__(self, message: str, moved: tuple[str, ...] = ()):
        self.moved = moved
        super().__init__(message)
