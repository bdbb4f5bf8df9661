"""A helper process (the metrics exporter, the front: model/helpers.py) as it is: its state record, whether its pid
still runs `<command> <profile>`, and the fingerprint its /healthz answers."""

from __future__ import annotations

import json

from kimik3_reconciler.model.facts import ExporterFact
from kimik3_reconciler.model.helpers import Helper
from kimik3_reconciler.model.records import HANDS_OVER_SOCKETS
from kimik3_reconciler.ports import HttpPort, ProcessPort, StatePort


def collect_helper(
    helper: Helper, profile: str, state: StatePort, processes: ProcessPort | None, http: HttpPort
) -> ExporterFact | None:
    record = state.read(helper.record_key(profile))
    if record is None or processes is None:
        return None
    pid = int(record.get("pid") or 0)
    unit = record.get("unit")
    # Under systemd the unit's MainPID changes on every restart: there, only /healthz says it runs.
    alive = pid > 0 and helper.runs(processes.cmdline(pid), profile)
    serving = None
    if (alive or unit) and record.get("config"):
        status, body = http.get(helper.health_url(record["config"]), timeout_s=2.0)
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
