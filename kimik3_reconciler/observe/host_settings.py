"""The host settings kimik3 persists (host.prepare): its sysctl.d file, each setting's live value, and the sysctl.d
files a boot loads after it, read where systemd runs (the units port: its install root and command prefix)."""

from __future__ import annotations

from kimik3_reconciler.model.facts import HostSettingsFact
from kimik3_reconciler.model.host_settings import SEED_SETTINGS, SYSCTL_CONF_LINK, SYSCTL_DIRS, SYSCTL_FILE, read_after
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.ports import UnitsPort


def collect_host_settings(profile: Profile, units: UnitsPort | None) -> HostSettingsFact | None:
    """None without `host.prepare` (nothing is read: a plain profile costs nothing) or without the units port."""
    if not profile.host.prepare or units is None:
        return None
    return HostSettingsFact(
        file_text=units.read_file(SYSCTL_FILE),
        live={key: units.sysctl_value(key) for key, _ in SEED_SETTINGS},
        overridden_by=read_after(SYSCTL_FILE.rsplit("/", 1)[1], _boot_files(units)),
    )


def _boot_files(units: UnitsPort) -> dict[str, str]:
    """path -> text of every sysctl.d file a boot reads, one per file name (the first directory's)."""
    files: dict[str, str] = {}
    seen: set[str] = set()
    for path in [SYSCTL_CONF_LINK] + [p for d in SYSCTL_DIRS for p in units.list_files(d, ".conf")]:
        name = path.rsplit("/", 1)[1]
        text = units.read_file(path) if name not in seen else None
        if text is not None:
            seen.add(name)
            files[path] = text
    return files
