"""The fleet rollout's set-up on the fleet rig (fleet_hosts.py), shared by tests/integration/
test_fleet_rollout_docker.py and bench/fleet.py: its names and ports, the fleet file, the first
`fleet apply --install`. `fleet_cmd`, `demo_image` and `fleet_document`
serve tests/integration/test_fleet_rpc_rig.py too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_demo.prepare import DEMO_REPO, DEMO_REVISION, demo_repos
from kimik3_reconciler.adapters.router_smg import SmgRouter
from support.closed_loop import ClosedLoop
from support.fleet_hosts import GATEWAY, Rig, publish_image
from support.realparts import KIMIK3, REPO_ROOT, converged_demo, demo_profile, docker, require_docker_and_demo_hub

NAME, PORT = "k3fr-serve", 19361
BUILD_NAME, BUILD_PORT = "k3fr-build", 19362
ROUTER_PORT = 19363  # the clients' port (kimik3's router under slots, the default); smg's metrics on 19364
FLEET = "k3fr"


@contextmanager
def rig_hub() -> Iterator[FixtureHub]:
    """The demo's first quant (its repo at its revision) from a fixture hub on the rig's bridge address, where
    every rig host reaches it."""
    repos = demo_repos(require_docker_and_demo_hub())
    with FixtureHub([FixtureRepo(DEMO_REPO, DEMO_REVISION, repos[0].files)], host=GATEWAY) as running:
        yield running


def fleet_cmd(work: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    """`kimik3 fleet ARGS` in the fleet's folder `work`, with the controller's state under it."""
    env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "controller-state")}
    return subprocess.run([*KIMIK3, "fleet", *args], capture_output=True, text=True, env=env, cwd=work, timeout=timeout)


def fleet_router(policy: str | None = None) -> SmgRouter:
    """The rollout's smg, through kimik3's adapter, where the fleet file's router `policy` puts it (None: the
    default, slots: behind kimik3's router; fleet/router_layout.py)."""
    from kimik3_reconciler.fleet.router_layout import DEFAULT_POLICY, router_layout
    from kimik3_reconciler.fleet.values import RouterPlacement

    layout = router_layout(RouterPlacement("smg", "1.13.0", "localhost", ROUTER_PORT, policy or DEFAULT_POLICY))
    return SmgRouter(layout.smg_url, layout.smg_metrics_url)


def router_load(workers: int = 4) -> ClosedLoop:
    """A closed-loop client through the fleet's router (half streaming, every other request offering a tool)."""
    return ClosedLoop(f"http://127.0.0.1:{ROUTER_PORT}", workers=workers, model=NAME, tools=True)


def demo_image(work: Path, name: str, port: int) -> str:
    """The llama.cpp CPU image's tag, built here by a converged demo (cached by layer) in `work`, its container
    removed after."""
    with contextmanager(converged_demo)(work, name, port):
        return docker("inspect", "-f", "{{.Config.Image}}", name)


def image_on_first_host(rig: Rig, work: Path) -> None:
    """The demo image on the first host (rolled first): built here, pushed to the bridge registry, pulled by digest
    by that host's daemon. The other hosts get it from `fleet apply --registry`: none builds."""
    rig.hosts[0].docker("pull", publish_image(rig, demo_image(work, BUILD_NAME, BUILD_PORT)), timeout=1800)


def fleet_document(
    name: str, inventory: dict, overrides: dict, rollout: dict, router_port: int, policy: str | None = None
) -> dict:
    """A Fleet file over the rig's hosts (profile.yaml beside it), the router on loopback in front, with the fleet
    file's default policy (slots: kimik3's router, smg behind it) unless `policy` names another."""
    return {
        "apiVersion": "kimik3/v1",
        "kind": "Fleet",
        "name": name,
        "profile": "profile.yaml",
        "inventory": inventory,
        "overrides": overrides,
        "rollout": {"hosts": "serving", **rollout},
        "router": {
            "version": "1.13.0",
            "host": "localhost",
            "port": router_port,
            **({"policy": policy} if policy else {}),
        },
    }


def host_overrides(rig: Rig, count: int | None = None) -> dict:
    """Each host (the first `count`) serving on its bridge address, its model cache in its own folder."""
    return {
        h.name: {"serve": {"host": h.address}, "model": {"cache_dir": str(h.root / "hf-cache")}}
        for h in rig.hosts[:count]
    }


def write_fleet(
    work: Path,
    rig: Rig,
    hub: FixtureHub,
    quant: str,
    canary: int | None = None,
    serve: dict | None = None,
    rollout: dict | None = None,
    policy: str | None = None,
) -> None:
    """profile.yaml (the demo profile at `quant`, `serve` merged into its serve section) and fleet.yaml over the
    rig's three hosts in `work` (`rollout` merged into its rollout, the router's `policy`); the host `canary` (an
    index), when given, rolled first as the rollout's canary group."""
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["model"]["quant"] = quant
    profile["serve"].update(serve or {})
    (work / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    inventory = rig.inventory("serving")
    for host in rig.hosts:  # where the first `fleet apply --install` puts kimik3 on each host, and what runs it
        venv = host.root / "kimik3-venv"
        inventory["all"]["children"]["serving"]["hosts"][host.name].update(
            kimik3_venv=str(venv), kimik3_command=[str(venv / "bin" / "kimik3")]
        )
    policy_of_rollout = {
        "max_unavailable": 1,
        "drain_timeout": "60s",
        **({"canary": "canary"} if canary is not None else {}),
        **(rollout or {}),
    }
    document = fleet_document(FLEET, inventory, host_overrides(rig), policy_of_rollout, ROUTER_PORT, policy)
    if canary is not None:
        inventory["all"]["children"]["canary"] = {"hosts": {rig.hosts[canary].name: {}}}
    (work / "fleet.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def served_quant(rig: Rig, index: int) -> str:
    """The model file the host `index`'s server was started with."""
    argv = json.loads(rig.hosts[index].docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    return argv[argv.index("-m") + 1]


def install_and_deploy(work: Path, rig: Rig) -> subprocess.CompletedProcess[str]:
    """The first `fleet apply --install` of the fleet file in `work`: kimik3 (a wheel of this checkout and its
    dependencies) installed on every host, each rolled, gated and put in the router; the image once per site."""
    wheelhouse = work / "wheelhouse"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", str(REPO_ROOT), "-w", str(wheelhouse)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return fleet_cmd(
        work, "apply", "--install", str(wheelhouse), "--registry", rig.registry, "--traffic-timeout", "2", "fleet.yaml"
    )
