"""The kernel settings seed 000 requires of its host (pure), and the sysctl.d file kimik3 persists them in when a
profile asks (`host.prepare`, issue 27 item 5)."""

from __future__ import annotations

# Seed 000 step 5: numa_balancing=0 is "required, not optional": with it on, a single request stalled 20+ minutes.
SEED_SETTINGS: tuple[tuple[str, str], ...] = (("kernel.numa_balancing", "0"),)

# Read at boot by systemd-sysctl with every other sysctl.d file, in name order: a later file (99-*.conf, or
# /etc/sysctl.conf through Debian's 99-sysctl.conf link) that sets the same key wins there; the plan then finds
# the live value moved and loads this file again.
SYSCTL_FILE = "/etc/sysctl.d/90-kimik3.conf"


def sysctl_text(settings: tuple[tuple[str, str], ...] = SEED_SETTINGS) -> str:
    """The file's whole text: a header saying whose it is, one `key = value` line per setting."""
    lines = ["# kimik3: host.prepare: the kernel settings seed 000 requires. Written by kimik3 (edits are overwritten;",
             "# remove host.prepare from the profile to manage them yourself).",
             *(f"{key} = {value}" for key, value in settings)]
    return "\n".join(lines) + "\n"
