"""The profile's metrics exporter as it is: its state record, whether its pid still runs it, what /healthz says."""

from __future__ import annotations

import json

from kimik3_reconciler.model.facts import ExporterFact
from kimik3_reconciler.model.records import HANDS_OVER_SOCKETS, exporter_key
from kimik3_reconciler.ports import HttpPort, ProcessPort, StatePort

SERVE_COMMAND = "metrics-serve"


def runs_exporter(cmdline: tuple[str, ...] | None, profile: str) -> bool:
    """The pid runs `... kimik3_reconciler metrics-serve <profile>`: a recycled pid is not our exporter."""
    if not cmdline or SERVE_COMMAND not in cmdline:
        return False
    at = cmdline.index(SERVE_COMMAND)
    return cmdline[at + 1 : at + 2] == (profile,)


def collect_exporter(
    profile: str, state: StatePort, processes: ProcessPort | None, http: HttpPort
) -> ExporterFact | None:
    record = state.read(exporter_key(profile))
    if record is None or processes is None:
        return None
    pid = int(record.get("pid") or 0)
    unit = record.get("unit")
    # Under systemd the unit's MainPID changes on every restart: there, only /healthz says it runs.
    alive = pid > 0 and runs_exporter(processes.cmdline(pid), profile)
    serving = None
    if (alive or unit) and record.get("config"):
        from kimik3_reconciler.model.metrics import ExporterConfig  # only where an exporter was started

        status, body = http.get(ExporterConfig.from_json(record["config"]).health_url, timeout_s=2.0)
        if status == 200:
            try:
                serving = json.loads(body).get("fingerprint")
            except (ValueError, AttributeError):
                serving = None
    return ExporterFact(
        pid=0 if unit else pid,
        fingerprint=str(record.get("fingerprint", "")),
        config=record.get("config") or {},
        alive=serving is not None if unit else alive,
        serving=serving,
        unit=unit,
        hands_over_sockets=bool(record.get(HANDS_OVER_SOCKETS)),
    )
