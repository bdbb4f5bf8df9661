"""The kernel settings seed 000 requires of its host (pure), and the sysctl.d file kimik3 persists them in when a
profile asks (`host.prepare`, issue 27 item 5)."""

from __future__ import annotations

# Seed 000 step 5: numa_balancing=0 is "required, not optional": with it on, a single request stalled 20+ minutes.
SEED_SETTINGS: tuple[tuple[str, str], ...] = (("kernel.numa_balancing", "0"),)

# Read at boot by systemd-sysctl with every other sysctl.d file, in name order: a later file (99-*.conf, or
# /etc/sysctl.conf through Debian's 99-sysctl.conf link) that sets the same key wins there; the plan then finds
# the live value moved and loads this file again.
SYSCTL_FILE = "/etc/sysctl.d/90-kimik3.conf"


# Where systemd-sysctl reads sysctl.d files, first wins for one file name (an /etc file masks a packaged one).
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
# Debian's and Ubuntu's procps link /etc/sysctl.conf in as this name: a symlink, read by name.
SYSCTL_CONF_LINK = "/etc/sysctl.d/99-sysctl.conf"


def parse_sysctl(text: str) -> dict[str, str]:
    """`key = value` lines of a sysctl.d file as systemd-sysctl reads them: '#' and ';' comments skipped, a leading
    '-' (ignore errors) dropped, '/' in a key read as '.'; a later line for one key wins."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";")) and "=" in line:
            key, value = line.split("=", 1)
            found[key.strip().lstrip("-").replace("/", ".")] = value.strip()
    return found


def read_after(
    name: str, files: dict[str, str], settings: tuple[tuple[str, str], ...] = SEED_SETTINGS
) -> tuple[tuple[str, str, str], ...]:
    """(path, key, value) of the settings a boot would load after the file `name` and set otherwise: systemd-sysctl
    loads every file in name order, and the last value of a key wins. `files`: path -> text, one path a name."""
    wanted = dict(settings)
    later = sorted((path for path in files if path.rsplit("/", 1)[1] > name), key=lambda p: p.rsplit("/", 1)[1])
    return tuple(
        (path, key, value)
        for path in later
        for key, value in parse_sysctl(files[path]).items()
        if key in wanted and value != wanted[key]
    )


def sysctl_text(settings: tuple[tuple[str, str], ...] = SEED_SETTINGS) -> str:
    """The file's whole text: a header saying whose it is, one `key = value` line per setting."""
    lines = [
        "# kimik3: host.prepare: the kernel settings seed 000 requires. Written by kimik3 (edits are overwritten;",
        "# remove host.prepare from the profile to manage them yourself).",
        *(f"{key} = {value}" for key, value in settings),
    ]
    return "\n".join(lines) + "\n"
