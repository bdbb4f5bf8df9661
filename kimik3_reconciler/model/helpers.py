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
from kimik3_reconciler.model.plan import DiffItem, flat_diff
from kimik3_reconciler.model.specs import ExporterRun, ExporterStop, ExporterUnit, FrontRun, FrontStop, FrontUnit


@dataclass(frozen=True)
class Helper:
    what: str  # its name in events, errors and plan reasons, and its field of Observed: "exporter", "front"
    title: str  # its unit's Description
    step: str  # its plan step's kind, an error's prefix, its folder in the state dir, its unit's suffix
    command: str  # the CLI command its process runs: `kimik3 metrics-serve NAME`
    reads: tuple[str, ...]  # the environment it gets from the apply's (model/helper_env.py)
    config: type[ExporterConfig] | type[FrontConfig]
    flat: Callable[[dict[str, Any]], dict[str, Any]]  # a config record named as a replacement's diff reads best
    run: type[ExporterRun] | type[FrontRun]
    stop: type[ExporterStop] | type[FrontStop]
    unit: type[ExporterUnit] | type[FrontUnit]

    def record_key(self, profile: str) -> str:
        """{"pid" or "unit", "fingerprint", "config", "date", "hands_over_sockets"}: the process kimik3 started
        (model/records.py exporter_key, front_key)."""
        return f"{self.step}/{profile}/process.json"

    def config_key(self, profile: str) -> str:
        """Its configuration, which its process reads at start (model/records.py exporter_config_key, ...)."""
        return f"{self.step}/{profile}/config.json"

    def log_key(self, profile: str) -> str:
        return f"{self.step}/{profile}/{self.what}.log"

    def unit_of(self, server_unit: str) -> str:
        """`kimi-k3.service` -> kimi-k3-metrics.service: its unit next to the server's (model/unit_files.py)."""
        return f"{server_unit.removesuffix('.service')}-{self.step}.service"

    def runs(self, cmdline: tuple[str, ...] | list[str] | None, profile: str) -> bool:
        """The pid runs `... kimik3_reconciler <command> <profile>`: a recycled pid is not our helper."""
        if not cmdline or self.command not in cmdline:
            return False
        at = list(cmdline).index(self.command)
        return tuple(cmdline[at + 1 : at + 2]) == (profile,)

    def health_url(self, config: dict[str, Any]) -> str:
        """Where the helper started with `config` (a record's) answers its fingerprint."""
        return self.config.from_json(config).health_url

    def config_diff(self, running: dict[str, Any] | None, wanted: dict[str, Any]) -> tuple[DiffItem, ...]:
        """What moves from the running helper's config record (None or empty: none) to the wanted one."""
        return flat_diff(self.flat(running) if running else {}, self.flat(wanted))


EXPORTER = Helper(
    what="exporter",
    title="Kimi-K3 metrics exporter",
    step="metrics",
    command="metrics-serve",
    reads=EXPORTER_READS,
    config=ExporterConfig,
    flat=lambda config: ExporterConfig.from_json(config).flat(),  # `metrics.port`, `labels.fingerprint`
    run=ExporterRun,
    stop=ExporterStop,
    unit=ExporterUnit,
)
# The front reads only its records and the key file; it holds the public port (serve.port) with metrics.handover.
FRONT = Helper(
    what="front",
    title="Kimi-K3 front",
    step="front",
    command="front-serve",
    reads=FRONT_READS,
    config=FrontConfig,
    flat=dict,  # flat already; kept as recorded (a field an older front had still shows)
    run=FrontRun,
    stop=FrontStop,
    unit=FrontUnit,
)
