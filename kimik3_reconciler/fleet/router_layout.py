"""Where the fleet's router listens, PURE: what runs on the controller for the fleet file's `router:` section.

- `policy: slots` (the default): kimik3's router (adapters/slot_router.py, `kimik3 fleet route`) on `router.host`:
  `router.port`, the clients' address; smg behind it on loopback, port + SMG_OFFSET (round robin: it answers only
  what kimik3's router does not route, and keeps the rotation: health checks, breakers, the rollout's out/in; its
  control API adds and removes workers, so only the controller reaches it), its Prometheus listener on `router.host`,
  port + METRICS_OFFSET (read-only: a monitoring server elsewhere scrapes it).
- any other policy: smg alone on `router.host`:`router.port` with that policy, its Prometheus listener on
  port + METRICS_OFFSET (the layout before kimik3 had a router of its own).

The rollout's router steps, `fleet status`, `fleet recover` and kimik3's router talk to smg (`smg_url`) in both: all
of them run on the controller.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimik3_reconciler.fleet.values import RouterPlacement

DEFAULT_POLICY = "slots"  # issue 40: the only policy measured to give a rejoined replica its share back
METRICS_OFFSET = 1  # smg's Prometheus listener: the router's port + 1, on the router's address
SMG_OFFSET = 2  # smg's HTTP port behind kimik3's router: the router's port + 2
SMG_BEHIND = "round_robin"  # smg's policy behind kimik3's router: it routes only /v1/models, /health and the like


@dataclass(frozen=True)
class RouterLayout:
    """The router's processes and addresses. `proxy`: kimik3's router runs on `url` (slots); else smg does."""

    policy: str  # the fleet file's (in force)
    bind: str  # the address the clients' port and smg's metrics listen on
    url: str  # where clients send requests
    smg_url: str  # smg's HTTP port: its control API (workers), and its routing where it is alone
    smg_metrics_url: str
    smg_policy: str
    proxy: bool

    @property
    def smg_bind(self) -> str:
        """The address smg's HTTP port listens on: loopback behind kimik3's router, `bind` where smg is alone."""
        return self.smg_url.split("//", 1)[1].rsplit(":", 1)[0].strip("[]")

    @property
    def smg_port(self) -> int:
        return int(self.smg_url.rsplit(":", 1)[1])

    @property
    def smg_metrics_port(self) -> int:
        return int(self.smg_metrics_url.rsplit(":", 1)[1])

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def describe(self) -> str:
        """One line for `fleet plan` and `fleet status`."""
        if self.proxy:
            return (
                f"kimik3 router (policy slots) on {self.url} → smg ({self.smg_policy}: rotation, health, other paths) "
                f"on {self.smg_url}, smg metrics {self.smg_metrics_url}"
            )
        return f"smg (policy {self.policy}) on {self.url}, metrics {self.smg_metrics_url}"

    def record(self) -> dict:
        """What router.json keeps of the layout a `fleet apply` started (compared by the next one)."""
        return {"policy": self.policy, "url": self.url, "smg_url": self.smg_url, "proxy": self.proxy}


def _base(address: str) -> str:
    return f"http://{'[' + address + ']' if ':' in address else address}"


def loopback(bind: str) -> str:
    """The loopback address of `bind`'s family: an IPv6 router address gets ::1 (a host may have no IPv4 at all)."""
    return "::1" if ":" in bind else "127.0.0.1"


def router_layout(router: RouterPlacement) -> RouterLayout:
    bind = "127.0.0.1" if router.host in ("localhost", "loopback") else router.host
    proxy = router.policy == "slots"
    # Behind kimik3's router smg's control API (POST /workers, DELETE /workers/{id}) is for the controller alone:
    # on a routable router.host anybody on the network could add a worker (and be sent other users' prompts) or
    # empty the rotation. Alone, smg's port is the clients' and stays on router.host.
    smg_bind = loopback(bind) if proxy else bind
    smg_port = router.port + SMG_OFFSET if proxy else router.port
    return RouterLayout(
        router.policy,
        bind,
        f"{_base(bind)}:{router.port}",
        f"{_base(smg_bind)}:{smg_port}",
        f"{_base(bind)}:{router.port + METRICS_OFFSET}",
        SMG_BEHIND if proxy else router.policy,
        proxy,
    )
