"""fleet/router_layout.py: what runs on the controller for the fleet file's router section (kimik3's router on the
clients' port with smg behind it under slots, the default; smg alone on that port under one of smg's policies)."""

from __future__ import annotations

from kimik3_reconciler.fleet.router_layout import router_layout
from kimik3_reconciler.fleet.values import RouterPlacement


def test_slots_puts_kimik3s_router_on_the_clients_port_and_smg_behind_it() -> None:
    layout = router_layout(RouterPlacement("smg", "1.13.0", "localhost", 30000, "slots", False))
    assert layout.proxy and layout.url == "http://127.0.0.1:30000"
    assert (layout.smg_url, layout.smg_metrics_url) == ("http://127.0.0.1:30002", "http://127.0.0.1:30001")
    assert layout.smg_policy == "round_robin" and "kimik3 router (policy slots)" in layout.describe()


def test_an_smg_policy_keeps_smg_alone_on_the_clients_port() -> None:
    layout = router_layout(RouterPlacement("smg", "1.13.0", "10.0.0.5", 30000, "cache_aware"))
    assert not layout.proxy and layout.url == layout.smg_url == "http://10.0.0.5:30000"
    assert layout.smg_policy == "cache_aware" and layout.smg_metrics_url == "http://10.0.0.5:30001"


def test_a_changed_policy_changes_the_recorded_layout() -> None:
    """What `fleet apply` compares with router.json to replace a router started for another policy."""
    before = router_layout(RouterPlacement("smg", "1.13.0", "localhost", 30000, "cache_aware")).record()
    after = router_layout(RouterPlacement("smg", "1.13.0", "localhost", 30000, "slots")).record()
    assert before != after and after["proxy"] and not before["proxy"]
