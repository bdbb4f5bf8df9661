"""FakeProcesses: kimik3's exporter processes; a spawn "starts" one whose /healthz (FakeHttp.pages) answers."""

from __future__ import annotations

import json

from support.fakes.http import FakeHttp
from support.fakes.state import MemoryState


class FakeProcesses:
    """Exporter processes: a spawn "starts" one whose /healthz (FakeHttp.pages) answers its config's fingerprint."""

    def __init__(self, state: MemoryState, http: FakeHttp):
        self.state, self.http = state, http
        self.running: dict[int, tuple[str, ...]] = {}
        self.next_pid = 4000
        self.answer = True  # False: a spawned exporter never answers /healthz (a port taken, say)

    def spawn(self, args: tuple[str, ...], log_key: str, reads: tuple[str, ...]) -> int:
        from kimik3_reconciler.model.metrics import ExporterConfig
        from kimik3_reconciler.model.records import exporter_config_key

        self.next_pid += 1
        command = ("python", "-m", "kimik3_reconciler", *args)
        # A helper of the same command and profile still running hands its sockets to this one and exits (a real one
        # once its clients moved over: adapters/socket_handover.py).
        for pid in [p for p, running in self.running.items() if running == command]:
            del self.running[pid]
        self.running[self.next_pid] = command
        config = ExporterConfig.from_json(self.state.read(exporter_config_key(args[1])) or {})
        if self.answer:
            self.http.pages[config.health_url] = (200, json.dumps({"fingerprint": config.fingerprint}))
        return self.next_pid

    def invocation(self) -> tuple[tuple[str, ...], dict[str, str]]:
        return ("/usr/bin/python3", "-m", "kimik3_reconciler"), {
            "KIMIK3_STATE_DIR": "/var/lib/kimik3",
            "PYTHONPATH": "/opt/kimik3",
        }

    def cmdline(self, pid: int) -> tuple[str, ...] | None:
        return self.running.get(pid)

    def terminate(self, pid: int, timeout_s: float) -> None:
        self.running.pop(pid, None)
