"""kimik3's one error tree; adapters translate SDK exceptions into it, the CLI maps it to exit codes.

Exit codes (the one table; README and `kimik3 --help` repeat it):

    0  ok: converged, valid, no changes
    1  a step failed, did not converge, or verify failed
    2  invalid input: profile, plan file or a file it names (nothing was touched)
    3  the host gate or the planner refused (nothing was touched)
    4  changes pending (`plan --detailed-exitcode`; bench and tune refuse a host that is not converged)
    5  locked: another kimik3 holds this host's lock (LockHeld)
    6  the hub: unreachable, or it refused a request (HubError; the URL is named)
    7  a saved plan is stale: the host or the profile moved since it was made, or the file was edited (nothing was
       touched)
    8  a local file or directory kimik3 needs could not be used: no space left, read-only, permission denied,
       missing (LocalFileError; the path is named)
  130, 143  interrupted by Ctrl-C (SIGINT) or SIGTERM (cli.Terminated): not a Kimik3Error; the next apply converges

    Kimik3Error                       exit 1 unless a subclass says otherwise
    ├── ProfileError                  invalid profile (file:line problems)        exit 2
    ├── InputError                    a file the profile names is missing/bad      exit 2
    ├── PlanError                     the planner refuses (a rule needs host facts) exit 3
    │   └── LoopConflict              reconcile: would stop another profile's reconcile loop's container
    ├── StalePlan                     apply PLAN: the host or profile moved, or the file was edited  exit 7
    ├── ConvergenceError              rounds exhausted, names the unconverged steps
    ├── NotConverged                  bench/tune: the host is not converged (names the changes) exit 4
    ├── NothingMeasured               tune: every candidate it launched failed (host back on FILE) exit 1
    ├── BudgetTooShort                tune: --budget fits fewer than three launches (nothing launched) exit 2
    ├── LockHeld                      another kimik3 holds the host lock (names it) exit 5
    ├── LocalFileError                an OSError on a local path (ENOSPC, EROFS...) exit 8
    └── StepError                     an effect failed
        ├── TransientError            retrying may help (tenacity retries these in adapters)
        └── PermanentError            retrying will not help
            ├── GpuProbeFailed        a container could not see the GPUs (the probe, first step) exit 3
            ├── LoadFailed            the container exited or timed out while loading
            ├── BuildFailed           docker build failed (failing step + last log lines)
            ├── SmokeFailed           a new image failed its tiny-model smoke test
            ├── GateFailed            a quant failed its PPL/KLD gate against the reference
            ├── VerifyFailed          the new deployment failed `kimik3 verify` after apply
            └── DownloadFailed        a fetched file failed verification (a full disk: LocalFileError)
                └── HubError          hub unreachable or refusing (URL named)      exit 6
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Self


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

    # Shown in the message; `problems` keeps every one (--json lists them all). A pasted or generated file of
    # thousands of bad keys printed 27k lines, burying the first, which is the one to fix.
    SHOWN = 50

    def __init__(self, problems: tuple[ProfileProblem, ...] | list[ProfileProblem]):
        self.problems = tuple(problems)
        lines = [str(p) for p in self.problems[: self.SHOWN]]
        if len(self.problems) > self.SHOWN:
            lines.append(f"... and {len(self.problems) - self.SHOWN} more problems (all of them: --json)")
        super().__init__("\n".join(lines))


class InputError(Kimik3Error):
    """A local input the profile names (patch, archive, api key file) is missing or unreadable. `fields`: the
    profile fields that name it; the orchestrator, which has the profile's file, adds their file:line (as PlanError)."""

    exit_code = 2

    def __init__(self, message: str, fields: tuple[tuple[str | int, ...], ...] = ()):
        super().__init__(message)
        self.fields = fields


class PlanError(Kimik3Error):
    """The planner refuses the profile against these observed facts. `fields`: the profile fields refused
    (paths such as ("build", "patches")); the orchestrator, which has the profile's file, adds their file:line."""

    exit_code = 3

    def __init__(self, message: str, fields: tuple[tuple[str | int, ...], ...] = ()):
        super().__init__(message)
        self.fields = fields


class FieldRefusal(str):
    """A host-gate refusal (a plain string to the gate) that also says which profile field it refuses."""

    field: tuple[str | int, ...]

    def __new__(cls, field: tuple[str | int, ...], message: str) -> Self:
        refusal = super().__new__(cls, message)
        refusal.field = field
        return refusal


class ConvergenceError(Kimik3Error):
    """The orchestrator ran out of rounds; `pending` names the steps that still want changes."""

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


class NothingMeasured(Kimik3Error):
    """`kimik3 tune` launched candidates and every one failed (load, verify or bench): the search found
    nothing, which is not a success even though the host is back on the profile as written; `bench --compare`
    with no kept run of the profile."""


class BudgetTooShort(Kimik3Error):
    """`kimik3 tune --budget` fits fewer launches at this host's load time than a search can compare: it is refused
    before the first draw (the message names the budget needed); nothing was launched."""

    exit_code = 2


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


class LoopConflict(PlanError):
    """`kimik3 reconcile`: this pass would stop a container another profile's reconcile loop keeps running; the
    two would stop each other forever, so nothing is done and the message names the other loop."""


class StalePlan(Kimik3Error):
    """`kimik3 apply PLAN`: the host or the profile moved since the plan was made, or the plan file was edited
    since kimik3 wrote it; nothing was executed."""

    exit_code = 7

    def __init__(self, message: str, moved: tuple[str, ...] = ()):
        self.moved = moved
        super().__init__(message)


# What to do about each local file system failure; the path comes from the OSError itself.
_LOCAL_ADVICE = {
    errno.ENOSPC: "no space left on the device: free space on that file system and run again (a download's partial, "
    "where one was written, is kept and resumed)",
    errno.EDQUOT: "disk quota exceeded: free space or raise the quota and run again",
    errno.EROFS: "read-only file system: point KIMIK3_STATE_DIR (or model.cache_dir) at a writable place",
    errno.EACCES: "permission denied: run as a user that may use it, or point KIMIK3_STATE_DIR elsewhere",
    errno.EPERM: "operation not permitted: run as a user that may use it, or point KIMIK3_STATE_DIR elsewhere",
    errno.ENOENT: "no such file or directory: create it, or check KIMIK3_STATE_DIR and the profile's paths",
    errno.ENOTDIR: "a path component is not a directory: check KIMIK3_STATE_DIR and the profile's paths",
    errno.EIO: "input/output error: the disk or the file system is failing",
}


class LocalFileError(Kimik3Error):
    """An OSError on a local path kimik3 needed (state dir, model cache, a file the step writes); the CLI turns any
    OSError that reaches it into one, never a traceback."""

    exit_code = 8

    @classmethod
    def from_os_error(cls, exc: OSError) -> LocalFileError:
        where = " → ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
        advice = _LOCAL_ADVICE.get(exc.errno or -1) or exc.strerror or str(exc) or type(exc).__name__
        code = f" [errno {errno.errorcode[exc.errno]}]" if exc.errno in errno.errorcode else ""
        return cls(f"{where or type(exc).__name__}: {advice}{code}")
