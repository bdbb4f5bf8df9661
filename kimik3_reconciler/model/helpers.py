"""kimik3's helper processes, the metrics exporter and the front, as one kind of thing: a `python -m kimik3_reconciler
<command> <profile>` process on the host beside the server, started, replaced (handing its listening sockets over),
stopped or run as a systemd unit the same way. `Helper` names what differs between the two: the command, the plan
step, the records and log in the state directory, the unit, the environment it reads, its configuration and payload
types. The lifecycle that uses it is one module per floor: planning/helper_step.py, observe/helper.py,
steps/helper.py (pure values here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.helper_env import EXPORTER_READS, FRONT_READS
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.records import exporter_config_key, exporter_key, front_config_key, front_key
from kimik3_reconciler.model.specs import ExporterRun, ExporterStop, ExporterUnit, FrontRun, FrontStop, FrontUnit
from kimik3_reconciler.model.unit_files import exporter_unit, front_unit


@dataclass(frozen=True)
class Helper:
    what: str  # its name in events, errors and plan reasons: "exporter", "front"
    step: str  # its plan step's kind, an error's prefix: "metrics", "front"
    command: str  # the CLI command its process runs: `kimik3 metrics-serve NAME`
    reads: tuple[str, ...]  # the environment it gets from the apply's (model/helper_env.py)
    record_key: Callable[[str], str]  # its process record (model/records.py), by profile name
    config_key: Callable[[str], str]  # its configuration record, which its process reads at start
    log_folder: str  # its log: the state directory's <log_folder>/<profile>/<what>.log
    unit_of: Callable[[str], str]  # its unit's name, from the server's unit's
    config: type[ExporterConfig] | type[FrontConfig]
    run: type[ExporterRun] | type[FrontRun]
    stop: type[ExporterStop] | type[FrontStop]
    unit: type[ExporterUnit] | type[FrontUnit]

    def log_key(self, profile: str) -> str:
        return f"{self.log_folder}/{profile}/{self.what}.log"

    def runs(self, cmdline: tuple[str, ...] | list[str] | None, profile: str) -> bool:
        """The pid runs `... kimik3_reconciler <command> <profile>`: a recycled pid is not our helper."""
        if not cmdline or self.command not in cmdline:
            return False
        at = list(cmdline).index(self.command)
        return tuple(cmdline[at + 1 : at + 2]) == (profile,)

    def health_url(self, config: dict[str, Any]) -> str:
        """Where the helper started with `config` (a record's) answers its fingerprint."""
        return self.config.from_json(config).health_url


EXPORTER = Helper(
    what="exporter",
    step="metrics",
    command="metrics-serve",
    reads=EXPORTER_READS,
    record_key=exporter_key,
    config_key=exporter_config_key,
    log_folder="metrics",
    unit_of=exporter_unit,
    config=ExporterConfig,
    run=ExporterRun,
    stop=ExporterStop,
    unit=ExporterUnit,
)
# The front reads only its records and the key file; it holds the public port (serve.port) with metrics.handover.
FRONT = Helper(
    what="front",
    step="front",
    command="front-serve",
    reads=FRONT_READS,
    record_key=front_key,
    config_key=front_config_key,
    log_folder="front",
    unit_of=front_unit,
    config=FrontConfig,
    run=FrontRun,
    stop=FrontStop,
    unit=FrontUnit,
)
