"""A Slurm cluster on one machine (shared/TESTING.md §12): munge, slurmctld on the fleet rig's bridge, and one
`slurmd -N NAME` per rig host, started inside that host's network namespace, so a job pinned to a node runs there:
its `kimik3` converges that host's Docker and its server listens on that host's address, as on a real node.

GPUs are `Gres=gpu:8` backed by character devices made here (`mknod c 195 N`: Slurm refuses a gpu gres without
`File=`). What a node's jobs see of their node (DOCKER_HOST, KIMIK3_STATE_DIR, KIMIK3_HOST_LOCK, HF_HOME: the rig
host's, as its sshd's `SetEnv` gives them) comes from the cluster's TaskProlog, Slurm's own way of giving a node's
tasks their environment. Everything runs from one folder under /tmp, and is stopped by pid at the end (munged,
slurmctld, every slurmd), also when a step in between failed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.fleet_hosts import GATEWAY, Rig, _kill_pidfile, _wait

GPUS_PER_NODE = 8
CTLD_PORT = 16817  # slurmctld's port on the bridge; each slurmd listens on 6818 in its own namespace
PARTITION = "k3gpu"


@dataclass(frozen=True)
class SlurmCluster:
    root: Path
    conf: Path
    nodes: tuple[str, ...]

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's clients (sbatch, squeue, scancel, srun) need to find this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())


def _gpu_devices(root: Path) -> str:
    """GPUS_PER_NODE character devices (nvidia's major, 195) under `root`: what gres.conf's `File=` names."""
    dev = root / "dev"
    dev.mkdir()
    for index in range(GPUS_PER_NODE):
        os.mknod(dev / f"nvidia{index}", 0o600 | 0o020000, os.makedev(195, index))
    return f"{dev}/nvidia[0-{GPUS_PER_NODE - 1}]"


def _task_prolog(root: Path, rig: Rig) -> Path:
    """A node's environment for its tasks: Slurm reads `export NAME=VALUE` lines from the TaskProlog's stdout."""
    lines = ["#!/bin/sh", 'case "$SLURMD_NODENAME" in']
    for host in rig.hosts:
        lines.append(f"{host.name})")
        for name, value in (
            ("DOCKER_HOST", host.docker_host),
            ("KIMIK3_STATE_DIR", host.state_dir),
            ("KIMIK3_HOST_LOCK", host.root / "kimik3.lock"),
            ("HF_HOME", host.root / "hf-home"),
            ("KIMIK3_DOCKERD_RESTART_TEST", "0"),
        ):
            lines.append(f"  echo export {name}={value}")
        lines.append("  ;;")
    lines += ["esac", ""]
    path = root / "task-prolog.sh"
    path.write_text("\n".join(lines))
    path.chmod(0o755)
    return path


def _config(root: Path, rig: Rig, munge_socket: Path) -> Path:
    devices = _gpu_devices(root)
    prolog = _task_prolog(root, rig)
    cpus = os.cpu_count() or 1
    nodes = [
        f"NodeName={h.name} NodeAddr={h.address} CPUs={cpus} RealMemory=1024 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        for h in rig.hosts
    ]
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=kimik3test",
                f"SlurmctldHost={socket.gethostname()}({GATEWAY})",
                f"SlurmctldPort={CTLD_PORT}",
                "SlurmdPort=6818",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={munge_socket}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"StateSaveLocation={root / 'ctld'}",
                f"SlurmdSpoolDir={root / 'spool-%n'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
                f"SlurmctldLogFile={root / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'slurmd-%n.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "GresTypes=gpu",
                "ReturnToService=2",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "JobCompType=jobcomp/none",
                "AccountingStorageType=accounting_storage/none",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=bf_interval=2",  # heterogeneous jobs start from the backfill pass only
                "SlurmctldTimeout=30",
                "SlurmdTimeout=60",
                "KillWait=30",  # scancel's SIGTERM, then SIGKILL after this: a replica's step stops its server
                f"TaskProlog={prolog}",
                *nodes,
                f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
                "",
            ]
        )
    )
    (root / "gres.conf").write_text(f"Name=gpu File={devices}\n")
    return conf


@contextmanager
def slurm_cluster(rig: Rig) -> Iterator[SlurmCluster]:
    """munged, slurmctld on the bridge, a slurmd per rig host in its namespace; all nodes idle before it yields."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"the Slurm rig needs {tool}: apt-get install -y slurm-wlm munge")
    root = rig.root / "slurm"
    root.mkdir()
    (root / "ctld").mkdir()
    with ExitStack() as cleanup:
        munge = root / "munge"
        munge.mkdir(mode=0o755)  # munged wants its socket folder searchable by all
        key = munge / "munge.key"
        shutil.copy("/etc/munge/munge.key", key)
        key.chmod(0o400)
        socket_path = munge / "munge.sock"
        cleanup.callback(_kill_pidfile, munge / "munged.pid")
        subprocess.run(
            [
                "munged",
                "--force",  # as root, munged refuses to start without it
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={munge / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            check=True,
            capture_output=True,
        )
        conf = _config(root, rig, socket_path)
        env = {**os.environ, "SLURM_CONF": str(conf)}
        for host in rig.hosts:
            (root / f"spool-{host.name}").mkdir()
        cleanup.callback(_kill_pidfile, root / "slurmctld.pid")
        subprocess.Popen(
            ["slurmctld", "-D", "-i", "-f", str(conf)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(root / "slurmctld.err", "wb"),  # noqa: SIM115 - the daemon's stderr for its life
            start_new_session=True,
        )
        for host in rig.hosts:
            cleanup.callback(_kill_pidfile, root / f"slurmd-{host.name}.pid")
            subprocess.Popen(
                ["nsenter", f"--net={host.netns}", "slurmd", "-D", "-N", host.name, "-f", str(conf)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(root / f"slurmd-{host.name}.err", "wb"),  # noqa: SIM115
                start_new_session=True,
            )
        cluster = SlurmCluster(root, conf, tuple(h.name for h in rig.hosts))

        def idle() -> bool:
            done = cluster.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            return len(states) == len(rig.hosts) and all(s == "idle" for s in states.values())

        try:
            _wait("slurm nodes idle", idle, timeout=90)
        except RuntimeError as exc:
            logs = sorted(root.glob("*.log")) + sorted(root.glob("*.err")) + [munge / "munged.log"]
            tails = "".join(
                f"\n--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-15:]) for p in logs if p.exists()
            )
            raise RuntimeError(f"{exc}:{tails}") from None
        try:
            yield cluster
        finally:
            # A job's server a cancelled step left behind goes with the rig's daemons (fleet_rig's teardown).
            cluster.run("scancel", "--full", "--partition", PARTITION, check=False)
            # Each job's slurmstepd reports its end to slurmctld: stopped first, it would retry on past this rig.
            try:
                _wait("slurm jobs ended", lambda: not cluster.run("squeue", "-h", check=False).stdout.strip(), 90)
            except RuntimeError:
                pass  # the daemons are stopped all the same
