"""The fleet file's `slurm:` section (`target: slurm`): what a Slurm cluster needs beside the inventory; PURE.

The inventory's host names are the Slurm node names (each replica is a job pinned to its node); a replica's GPUs are
the profile's `gpus` (a list: that many of the node's gres); the section says where the jobs go and what the
cluster calls its GPUs."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# strict, as the rest of the fleet file: a number where a name belongs is a mistake worth naming.
_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True)
SlurmName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]


class SlurmSection(BaseModel):
    """Where `kimik3 fleet apply` submits the replicas' jobs (sbatch), and the name of the GPU gres."""

    model_config = _CONFIG
    partition: SlurmName | None = Field(None, description="sbatch --partition (default: the cluster's default)")
    account: SlurmName | None = Field(None, description="sbatch --account (default: the user's default)")
    gres: SlurmName = Field("gpu", description="the GPU gres name: a replica asks --gres=<gres>:<its profile's gpus>")
    job_prefix: SlurmName = Field("kimik3", description="job names are <job_prefix>-<fleet>-<host>")
