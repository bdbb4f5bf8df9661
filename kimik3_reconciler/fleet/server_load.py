"""Requests in flight on a host's server, read where the router reads it: the server's own /metrics at the address
it serves (its `serve.host` when that is an address, else the host's), the engine's running-requests gauge
(llama-server `llamacpp:requests_processing`, vLLM `vllm:num_requests_running`); PURE but for the `get` it is handed
(adapters/http.py's, wired by the CLI)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.fleet.values import FleetHost


def server_url(host: FleetHost) -> str:
    """http://ADDRESS:PORT of the host's server as seen from elsewhere (fleet validation refuses a loopback bind
    on a host the router cannot reach through its own loopback)."""
    bind = host.profile.serve.host
    address = host.address if bind in ("loopback", "tailscale") else bind
    try:
        if ipaddress.ip_address(address).version == 6:
            address = f"[{address}]"
    except ValueError:
        pass  # a host name
    return f"http://{address}:{host.profile.serve.port}"


def running_requests(text: str, series: str) -> int | None:
    """The gauge `series` summed over its label sets in a Prometheus text exposition; None when absent."""
    pattern = re.compile(rf"^{re.escape(series)}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+)", re.MULTILINE)
    values = [float(m.group(1)) for m in pattern.finditer(text)]
    return int(sum(values)) if values else None


def in_flight(host: FleetHost, get: Callable[[str], tuple[int, str]]) -> int | None:
    """Requests the host's server is working on now; None when its /metrics does not answer (down, or an API
    key the controller does not hold)."""
    status, body = get(f"{server_url(host)}/metrics")
    if status != 200:
        return None
    return running_requests(body, engine_for(host.profile.engine).series.running)
