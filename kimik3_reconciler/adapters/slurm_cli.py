"""A Slurm cluster through its own clients (sbatch, scancel, squeue --json, srun, scontrol), as argv lists: Slurm
22.05's `squeue --json` is its stable machine-readable answer (pyslurm follows each Slurm release; the CLI ships with
the cluster). `SLURM_CONF` and the rest of the environment are the caller's, as for any Slurm client."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from kimik3_reconciler.errors import StepError


def _run(argv: Sequence[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise StepError(f"{argv[0]}: not found: the Slurm target runs Slurm's clients (slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise StepError(f"{argv[0]} did not answer within {timeout_s:.0f} s") from None


class SlurmCli:
    """fleet/targets/slurm.SlurmJobs over Slurm's command-line clients."""

    def submit(self, argv: Sequence[str]) -> str:
        done = _run(["sbatch", *argv])
        if done.returncode:
            raise StepError(f"sbatch exited {done.returncode}: {done.stderr.strip()}")
        # --parsable: "JOBID" or "JOBID;CLUSTER"
        return done.stdout.strip().split(";")[0]

    def cancel(self, job: str) -> None:
        done = _run(["scancel", job])
        if done.returncode:
            raise StepError(f"scancel {job} exited {done.returncode}: {done.stderr.strip()}")

    def jobs(self) -> Sequence[Mapping[str, Any]]:
        done = _run(["squeue", "--all", "--json"])
        if done.returncode:
            raise StepError(f"squeue exited {done.returncode}: {done.stderr.strip()}")
        return json.loads(done.stdout).get("jobs") or []

    def in_job(
        self, job: str, node: str, argv: Sequence[str], timeout_s: float, heterogeneous: bool = False
    ) -> tuple[int, str, str]:
        """`argv` as a step of the running job `job` on `node`, beside its batch step (--overlap); in a heterogeneous
        job, on its first component (the main node's)."""
        # srun refuses a step of a heterogeneous job that names no component ("No directives to start application
        # on any available hetjob components", 22.05), and refuses --het-group on a plain job the same way.
        component = ["--het-group=0"] if heterogeneous else []
        try:
            done = _run(
                ["srun", "--jobid", job, *component, "--overlap", "--nodelist", node, "--nodes", "1", "--ntasks", "1"]
                + list(argv),
                timeout_s,
            )
        except StepError as exc:
            return 124, "", str(exc)
        return done.returncode, done.stdout, done.stderr


def set_comment(job: str, comment: str) -> None:
    """The running job's comment (its owner may set it): how a job's step says what it did."""
    done = _run(["scontrol", "update", f"JobId={job}", f"Comment={comment}"])
    if done.returncode:
        raise StepError(f"scontrol update JobId={job} exited {done.returncode}: {done.stderr.strip()}")


def run_step(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    """`srun ARGV` started from a job's batch step (a heterogeneous job's worker components, say)."""
    return subprocess.Popen(["srun", *argv])
