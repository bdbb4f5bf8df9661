"""The host settings kimik3 persists (host.prepare): its sysctl.d file and each setting's live value, read where
systemd runs (the units port: its install root and command prefix)."""

from __future__ import annotations

from kimik3_reconciler.model.facts import HostSettingsFact
from kimik3_reconciler.model.host_settings import SEED_SETTINGS, SYSCTL_FILE
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.ports import UnitsPort


def collect_host_settings(profile: Profile, units: UnitsPort | None) -> HostSettingsFact | None:
    """None without `host.prepare` (nothing is read: a plain profile costs nothing) or without the units port."""
    if not profile.host.prepare or units is None:
        return None
    return HostSettingsFact(file_text=units.read_file(SYSCTL_FILE),
                            live={key: units.sysctl_value(key) for key, _ in SEED_SETTINGS})
