"""A free TCP port on loopback for a test's server, chosen where nothing else takes one.

A port the kernel hands out for `bind(0)` comes from the ephemeral range (`net.ipv4.ip_local_port_range`, 32768-60999
here), the same range every outgoing connection takes its source port from: between the test closing the probe and
its server binding the port, a client elsewhere on the machine (a bench, another test's HTTP traffic) can take it,
and the server then fails to bind (seen: the exporter of test_helper_swap.py exiting before it answered, while a
bench ran beside the suite). So the port comes from above that range, where nothing picks ports on its own."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_TOP = 65535


def _first_above_ephemeral() -> int:
    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[1])
    except (OSError, IndexError, ValueError):  # not Linux, or no procfs: Linux's default range's end
        high = 60999
    # a range reaching the top leaves nothing above it: fall back to the kernel's choice, as before
    return high + 1 if high < _TOP - 64 else 0


def free_port() -> int:
    """A port no socket holds on 127.0.0.1 now, above the ephemeral range (module docstring)."""
    low = _first_above_ephemeral()
    for _ in range(200) if low else ():
        port = random.randint(low, _TOP)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # taken: try another
                continue
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
