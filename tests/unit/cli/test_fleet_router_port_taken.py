"""`fleet apply`'s router step (cli/fleet_router.py) where the clients' port is held by a process no `fleet apply` of
this fleet recorded (an smg a user started by hand before kimik3 had a router, anything else): refused before
anything starts (exit 3, router.port named), not smg started behind and left running unrecorded while kimik3's
router fails to bind; `fleet plan` says so first."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.ports import free_port

from kimik3_reconciler.adapters.router_smg import SmgRouter
from kimik3_reconciler.cli.fleet_router import ensure_router, port_taken, record_path, router_change
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.fleet.values import RouterPlacement


def test_a_port_held_by_another_process_is_refused_before_anything_starts(tmp_path: Path) -> None:
    port = free_port()
    fleet = SimpleNamespace(name="k3pt", router=RouterPlacement("smg", "1.13.0", "localhost", port, "slots"))
    with ThreadingHTTPServer(("127.0.0.1", port), BaseHTTPRequestHandler) as holder:  # 501 to every request
        threading.Thread(target=holder.serve_forever, daemon=True).start()
        assert port_taken("127.0.0.1", port)
        planned = router_change(fleet, tmp_path)  # `fleet plan` says what `fleet apply` then does
        assert planned["now"] == "another process" and "`fleet apply` refuses" in planned["change"]
        with pytest.raises(PlanError) as refused:
            ensure_router(fleet, tmp_path, {}, lambda _url: False)
        assert refused.value.exit_code == 3 and refused.value.fields == (("router", "port"),)
        assert f"port {port}" in str(refused.value) and "nothing was started" in str(refused.value)
        holder.shutdown()
    behind = SmgRouter(f"http://127.0.0.1:{port + 2}", timeout_s=1)
    try:
        assert not behind.answers()  # no smg started behind
    finally:
        behind.close()
    assert not record_path(tmp_path, "k3pt").exists()
    assert not port_taken("127.0.0.1", port)
