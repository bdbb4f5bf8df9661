"""Host settings (host.prepare, issue 27 item 5): write the sysctl.d file, load it with systemd-sysctl as boot
does, and check that each setting is live."""

from __future__ import annotations

from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.specs import HostSettings
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def apply_host_settings(spec: HostSettings, ports: Ports, reporter: Reporter) -> None:
    if spec.write:
        ports.units.write_file(spec.path, spec.text)  # atomic: systemd-sysctl at boot never reads half a file
    ports.units.sysctl_load(spec.path)
    # The load can succeed and leave another value live (a kernel without the knob, a read-only /proc/sys in a
    # container): a server started now would stall as seed 000 measured, so the step fails instead.
    live = {key: ports.units.sysctl_value(key) for key, _ in spec.settings}
    wrong = {key: live[key] for key, value in spec.settings if live[key] != value}
    if wrong:
        raise PermanentError(
            f"after systemd-sysctl {spec.path}: "
            + ", ".join(
                f"{key} is {now if now is not None else 'absent'} (wanted {dict(spec.settings)[key]})"
                for key, now in wrong.items()
            )
        )
    reporter.event(
        "host-settings", file=spec.path, written=spec.write, settings=", ".join(f"{k} = {v}" for k, v in spec.settings)
    )
