"""Ensure unit: write the unit and env file atomically, daemon-reload, enable or disable, start; or remove it.

`start` runs `docker start --attach` of the container kimik3 already launched and found healthy:
docker attaches to the running container, so nothing restarts. apply means "run this profile
now", so the unit is started whether it is boot-enabled or on-demand; `enable` decides boot only.
"""

from __future__ import annotations

from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.specs import StopUnit, UnitInstall, UnitRemoval
from kimik3_reconciler.observe.unit import parse_show
from kimik3_reconciler.ports import Ports, UnitsPort
from kimik3_reconciler.steps.report import Reporter

# What systemctl says for a unit it has not loaded (systemd unloads a disabled unit nothing references after
# daemon-reload) or does not know: there is nothing failed to reset. Any other failure is a real one.
_NOT_LOADED = ("not loaded", "not found", "no such unit")
START_CHECK_S = 1.5  # a unit whose ExecStart fails at once (no such container) shows it within this
_POLL_S = 0.2


def _units(ports: Ports) -> UnitsPort:
    if ports.units is None:
        raise PermanentError("this kimik3 has no systemd adapter wired (ports.units)")
    return ports.units


def install_unit(spec: UnitInstall, ports: Ports, reporter: Reporter) -> None:
    units = _units(ports)
    if spec.write_env:  # first: the unit names it, and a start in between must find the new values
        units.write_file(spec.env_path, spec.env_text)
        reporter.event("wrote", file=spec.env_path)
    if spec.write_unit:
        units.write_file(spec.unit_path, spec.unit_text)
        reporter.event("wrote", file=spec.unit_path)
    if spec.reload:
        units.systemctl("daemon-reload")
    units.systemctl("enable" if spec.enable else "disable", spec.unit)
    _reset_failed(units, spec.unit)  # a failed unit refuses nothing, but its Result would linger
    units.systemctl("restart" if spec.restart else "start", spec.unit)
    _check_started(spec.unit, ports, units)
    reporter.event("unit-active", unit=spec.unit, enabled=spec.enable)


def _check_started(unit: str, ports: Ports, units: UnitsPort) -> None:
    """Type=simple returns at fork: watch the unit briefly so a failing ExecStart fails this step, not the next plan."""
    waited = 0.0
    while True:
        state = parse_show(units.show([unit], ["Id", "ActiveState", "SubState", "Result"])).get(unit, {})
        if state.get("ActiveState") == "active" and waited >= START_CHECK_S:
            return
        if state.get("ActiveState") == "failed" or state.get("SubState") == "auto-restart":
            raise PermanentError(
                f"unit {unit} did not stay up (ActiveState={state.get('ActiveState')}, "
                f"Result={state.get('Result')}); see `journalctl -u {unit}`"
            )
        if waited >= START_CHECK_S and (state.get("ActiveState") != "activating" or waited > 10 * START_CHECK_S):
            raise PermanentError(
                f"unit {unit} is {state.get('ActiveState')} after `systemctl start`; see `journalctl -u {unit}`"
            )
        ports.clock.sleep(_POLL_S)
        waited += _POLL_S


def stop_unit(spec: StopUnit, ports: Ports, reporter: Reporter) -> None:
    """Stop the unit that supervises a conflicting container; the container is kept."""
    _units(ports).systemctl("stop", spec.unit)
    reporter.event("stopped", unit=spec.unit)


def remove_unit(spec: UnitRemoval, ports: Ports, reporter: Reporter) -> None:
    units = _units(ports)
    if spec.systemctl:
        # ExecStop runs `docker stop -t 120`: the container exits cleanly and is kept (destroy removes it next).
        units.systemctl("stop", spec.unit)
        units.systemctl("disable", spec.unit)
    units.remove_file(spec.unit_path)
    if spec.env_path:
        units.remove_file(spec.env_path)
    if spec.systemctl:
        units.systemctl("daemon-reload")
        _reset_failed(units, spec.unit)
    reporter.event("removed", what="unit", ref=spec.unit)


def _reset_failed(units: UnitsPort, unit: str) -> None:
    """`systemctl reset-failed UNIT`; "Unit … not loaded" / "not found" means nothing to reset. Any other
    failure (no bus, access denied, a timeout) is raised: swallowing it would hide a broken systemd."""
    try:
        units.systemctl("reset-failed", unit)
    except PermanentError as exc:
        if not any(marker in str(exc).lower() for marker in _NOT_LOADED):
            raise
