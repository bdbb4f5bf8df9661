"""`fleet apply`'s router step (cli/fleet_router.py) on real smg and kimik3's router, no server needed: a fleet whose
smg a `fleet apply` of an earlier release started alone on the router's port (its record without a layout) is
converged to the default layout (kimik3's router on the port, smg behind it on port + 2), `fleet plan`'s router line
said so before; a second run changes nothing; a fleet file that names an smg policy gets smg alone back. Ports
19481-19483 (router, smg metrics, smg behind)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kimik3_reconciler.adapters.router_smg import SmgRouter, start_smg
from kimik3_reconciler.cli.fleet_router import ensure_router, proxy_answers, record_path, router_change, stop_router
from kimik3_reconciler.fleet.values import RouterPlacement

pytestmark = pytest.mark.fleet_rollout  # the fleet extra (smg): CI's fleet stage

PORT, NAME = 19481, "k3rc"


def fleet(policy: str) -> SimpleNamespace:
    """What the router step reads of a fleet: its name and router placement (the fleet file's)."""
    return SimpleNamespace(name=NAME, router=RouterPlacement("smg", "1.13.0", "localhost", PORT, policy))


def test_an_smg_of_an_earlier_release_is_replaced_by_kimik3s_router_and_back(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = record_path(state, NAME)
    old = start_smg("127.0.0.1", PORT, PORT + 1, "cache_aware", path.parent / "router.log")
    path.write_text(json.dumps({"pid": old.pid, "url": old.url, "metrics_url": old.metrics_url}))  # the old record
    try:
        planned = router_change(fleet("slots"), state)
        assert planned["now"] == "smg" and planned["change"].startswith("replaces smg")
        ensure_router(fleet("slots"), state, {}, lambda _url: False)
        assert proxy_answers(f"http://127.0.0.1:{PORT}")
        behind = SmgRouter(f"http://127.0.0.1:{PORT + 2}")
        assert behind.answers()
        behind.close()
        record = json.loads(path.read_text())
        assert record["pid"] != old.pid and record["layout"]["proxy"]
        assert router_change(fleet("slots"), state)["change"] is None  # converged: the plan says no change
        ensure_router(fleet("slots"), state, {}, lambda _url: False)
        assert json.loads(path.read_text()) == record  # nothing restarted
        ensure_router(fleet("round_robin"), state, {}, lambda _url: False)  # the file names one of smg's
        assert not proxy_answers(f"http://127.0.0.1:{PORT}")
        alone = SmgRouter(f"http://127.0.0.1:{PORT}")
        assert alone.answers()
        alone.close()
    finally:
        stop_router(state, NAME)
