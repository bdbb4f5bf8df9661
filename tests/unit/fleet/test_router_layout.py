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


def test_behind_kimik3s_router_smg_listens_on_loopback_whatever_router_host_says() -> None:
    """smg's control API (POST /workers, DELETE /workers/{id}) is the controller's: on a routable router.host anybody
    on the network could add a worker or empty the rotation. Its metrics (read-only) stay on router.host."""
    layout = router_layout(RouterPlacement("smg", "1.13.0", "0.0.0.0", 30000, "slots"))
    assert (layout.bind, layout.smg_bind) == ("0.0.0.0", "127.0.0.1")
    assert layout.url == "http://0.0.0.0:30000" and layout.smg_url == "http://127.0.0.1:30002"
    assert layout.smg_metrics_url == "http://0.0.0.0:30001"


def test_an_ipv6_router_host_puts_smg_on_ipv6_loopback() -> None:
    layout = router_layout(RouterPlacement("smg", "1.13.0", "::", 30000, "slots"))
    assert layout.smg_bind == "::1" and layout.smg_url == "http://[::1]:30002"
    assert layout.url == "http://[::]:30000" and layout.smg_metrics_url == "http://[::]:30001"


def test_smg_alone_stays_on_router_host_its_port_is_the_clients() -> None:
    layout = router_layout(RouterPlacement("smg", "1.13.0", "0.0.0.0", 30000, "round_robin"))
    assert layout.smg_bind == "0.0.0.0" and layout.smg_url == layout.url == "http://0.0.0.0:30000"
