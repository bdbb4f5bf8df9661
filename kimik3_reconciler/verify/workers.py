"""verify's `rpc` check (issue 18), for a profile with workers: the main server really placed layers on
every worker's RPC device (its load log: `load_tensors: RPC0[10.0.0.2:50052] model buffer size = … MiB`),
and each worker's port is bound only at the address the profile names (its host's listening sockets)."""

from __future__ import annotations

import re

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.verify.report import Status

# llama-model.cpp load_tensors: "%s: %12s model buffer size = %8.2f MiB"; the RPC backend names its device
# RPC<n>[host:port] (ggml-rpc.cpp).
_BUFFER = re.compile(r"load_tensors:\s+(RPC\d+)\[([^\]]+)\] model buffer size =\s+([\d.]+) MiB")


def rpc_buffers(log: str) -> dict[str, float]:
    """endpoint -> MiB of model weights the server placed on that RPC device (the last load's)."""
    return {endpoint: float(mib) for _, endpoint, mib in _BUFFER.findall(log)}


def endpoint_of(bind: str, port: int) -> str:
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


def check_workers(profile: Profile, observed: Observed, server_log: str) -> tuple[Status, str]:
    buffers, problems, held = rpc_buffers(server_log), [], []
    for worker in profile.workers:
        endpoint = endpoint_of(worker.bind, worker.port)
        mib = buffers.get(endpoint, 0.0)
        if mib <= 0:
            problems.append(f"{worker.name}: the server's log shows no model buffer on RPC device {endpoint}")
        else:
            held.append(f"{worker.name} ({endpoint}) holds {mib:.2f} MiB of weights")
        fact = next((w for w in observed.workers if w.name == worker.name), None)
        if fact is None or fact.container is None or fact.container.state != "running":
            problems.append(f"{worker.name}: rpc-server is not running")
            continue
        # rule: rpc-bind-private
        # The profile names the one network the port may be on: any other listening address is a leak.
        stray = [a for a in fact.listeners if a != worker.bind]
        if stray or not fact.listeners:
            problems.append(
                f"{worker.name}: port {worker.port} is bound at {', '.join(fact.listeners) or 'no address'}"
                f", the profile names only {worker.bind}"
            )
        if fact.port_open is False:
            problems.append(f"{worker.name}: {endpoint} does not accept connections from the main host")
        elif held and fact.clients:
            held[-1] += f", serving {', '.join(fact.clients)}"
    if problems:
        return Status.FAILED, "; ".join(problems)
    return Status.OK, "; ".join(held) + "; each port bound only at its profile address"
