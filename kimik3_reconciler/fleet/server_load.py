"""What a host's server says of its load and its prefix cache, read where the router reads it: the server's own
/metrics where it listens (`server_url`): the engine's
running-requests gauge (llama-server `llamacpp:requests_processing`, vLLM `vllm:num_requests_running`) and its
prefix-cache counters (engines/base.py `ServerSeries.prefix_cache`); PURE but for the `get` it is handed
(adapters/http.py's, wired by the CLI)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import PrefixCacheTokens
from kimik3_reconciler.fleet.listeners import WILDCARD
from kimik3_reconciler.fleet.values import FleetHost


def server_url(host: FleetHost) -> str:
    """http://ADDRESS:PORT of the host's server where the router reaches it: the address it binds. A loopback bind is
    127.0.0.1 (planning/launch.py), reached from the router's machine only (fleet validation refuses it elsewhere);
    not the host's address, which may be `localhost` (::1 first) or another loopback address the server does not
    bind. A wildcard bind (0.0.0.0, ::) is no address to dial (http://0.0.0.0 reaches the dialler's own machine): the
    host's address, one of all it binds. serve.host: tailscale is refused in a fleet (fleet/listeners.py): only the
    host knows that address."""
    bind = host.profile.serve.host
    if bind == "loopback":
        address = "127.0.0.1"
    elif bind == "tailscale" or bind in WILDCARD:
        address = host.address
    else:
        address = bind
    try:
        if ipaddress.ip_address(address).version == 6:
            address = f"[{address}]"
    except ValueError:
        pass  # a host name
    return f"http://{address}:{host.profile.serve.port}"


def series_sum(text: str, series: str) -> float | None:
    """The series `series` summed over its label sets in a Prometheus text exposition; None when absent."""
    pattern = re.compile(rf"^{re.escape(series)}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+)", re.MULTILINE)
    values = [float(m.group(1)) for m in pattern.finditer(text)]
    return sum(values) if values else None


def running_requests(text: str, series: str) -> int | None:
    """The gauge `series` summed over its label sets in a Prometheus text exposition; None when absent."""
    value = series_sum(text, series)
    return None if value is None else int(value)


@dataclass(frozen=True)
class ServerReading:
    """One reading of a host's server: requests in flight, and its prefix-cache tokens since it started (None where
    the engine or the build has no such counter)."""

    in_flight: int | None
    prefix_cache: PrefixCacheTokens | None


def read_server(host: FleetHost, get: Callable[[str], tuple[int, str]]) -> ServerReading | None:
    """The host's server's reading from one /metrics; None when it does not answer (down, or an API key the
    controller does not hold)."""
    status, body = get(f"{server_url(host)}/metrics")
    if status != 200:
        return None
    series = engine_for(host.profile.engine).series
    return ServerReading(
        running_requests(body, series.running), series.prefix_cache(lambda name: series_sum(body, name))
    )
