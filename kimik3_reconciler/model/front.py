"""The front (issue 29): kimik3's proxy as a process of its own (`kimik3 front-serve NAME`) that owns serve.port
while llama-server listens on loopback behind it, so a replacement of the server never closes the public port.

Pure values: what the front is started with (its fingerprint is its identity: it does NOT include the container's,
so a relaunch of the server leaves the front running), and what an apply asks of it when it replaces the server
(a `HoldOrder`). The control token is a state record of its own (model/records.py `front_token_key`): never in
this config, in argv, or in a plan.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kimik3_reconciler.model.helper_config import HelperConfig

# Bump when the front's behaviour changes: an upgrade then replaces it (the new one takes its listening socket,
# adapters/socket_handover.py; one an older kimik3 started is stopped first: the public port closes for a second).
FRONT_VERSION = 1
# The front answers its control requests under this path on its own port; every other path goes to the server.
CONTROL_PREFIX = "/.kimik3/front"
TOKEN_HEADER = "X-Kimik3-Front-Token"


@dataclass(frozen=True)
class FrontConfig(HelperConfig):
    profile: str
    bind: str  # serve.host as an address: the front binds (bind, port)
    port: int  # serve.port
    server_url: str  # llama-server behind it, on loopback (metrics.server_port)
    api_key_file: str | None = None  # host path: the front reads /slots with the key while it drains
    version: int = FRONT_VERSION

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FrontConfig:
        return cls(**data)

    @property
    def control_url(self) -> str:
        """Where this host reaches the front's control paths (a wildcard bind is asked on loopback)."""
        return self.local_url(CONTROL_PREFIX)

    @property
    def health_url(self) -> str:
        return f"{self.control_url}/healthz"


@dataclass(frozen=True)
class HoldOrder:
    """What an apply asks the front before it takes the server down: stop sending new requests to it, let those in
    flight finish for up to `drain_s`, hold new ones (at most `queue`, each for at most `wait_s`; past either a
    503 with Retry-After `retry_after_s`) until released. An apply that dies never releases: the front lets go by
    itself after `lease_s`."""

    drain_s: float
    queue: int
    wait_s: float
    lease_s: float
    retry_after_s: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HoldOrder:
        return cls(
            drain_s=float(data["drain_s"]),
            queue=int(data["queue"]),
            wait_s=float(data["wait_s"]),
            lease_s=float(data["lease_s"]),
            retry_after_s=int(data["retry_after_s"]),
        )
