"""The router's command line (adapters/router_smg.py): smg's regular router (never `--backend openai`, its provider
proxy that sends every request for a model to one worker), the fleet file's policy, and kimik3's cache-aware
settings only with the cache-aware policy; under the default (slots, kimik3's router in front) smg runs behind it
with round robin."""

from __future__ import annotations

import pytest

from kimik3_reconciler.adapters import router_smg
from kimik3_reconciler.fleet.router_layout import DEFAULT_POLICY, router_layout
from kimik3_reconciler.fleet.schema import RouterSpec
from kimik3_reconciler.fleet.values import RouterPlacement
from kimik3_reconciler.model import router_health


@pytest.fixture(autouse=True)
def smg_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_smg.shutil, "which", lambda name, path=None: "/opt/smg/bin/smg")


def flags(argv: list[str]) -> dict[str, str]:
    return {argv[i]: argv[i + 1] for i in range(2, len(argv) - 1) if argv[i].startswith("--")}


def test_the_default_policy_puts_smg_behind_kimik3s_router_with_round_robin() -> None:
    spec = RouterSpec(version="1.13.0")
    assert spec.policy is None  # the fleet file's default: slots (fleet/router_layout.py)
    layout = router_layout(RouterPlacement("smg", spec.version, spec.host, spec.port, DEFAULT_POLICY, False))
    argv = router_smg.smg_argv(layout.bind, layout.smg_port, layout.smg_metrics_port, layout.smg_policy)
    assert flags(argv)["--policy"] == "round_robin" and flags(argv)["--port"] == "30002"
    assert not set(router_health.CACHE_AWARE[::2]) & set(argv) and "--backend" not in argv


def test_cache_aware_named_gets_kimik3s_settings() -> None:
    argv = router_smg.smg_argv("127.0.0.1", 30000, 30001, RouterSpec(version="1.13.0", policy="cache_aware").policy)
    got = flags(argv)
    assert got["--policy"] == "cache_aware"
    assert got["--balance-abs-threshold"] == "2" and got["--cache-threshold"] == "0.5"
    assert "--backend" not in argv


@pytest.mark.parametrize("policy", ["round_robin", "random", "power_of_two"])
def test_the_fleet_file_chooses_another_policy_without_the_cache_settings(policy: str) -> None:
    argv = router_smg.smg_argv("127.0.0.1", 30000, 30001, RouterSpec(version="1.13.0", policy=policy).policy)
    assert flags(argv)["--policy"] == policy
    assert not set(router_health.CACHE_AWARE[::2]) & set(argv) and "--backend" not in argv
