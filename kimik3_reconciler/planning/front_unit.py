"""Plan the front (metrics.handover) as a systemd unit for a profile with `systemd:` (issue 38 item 12), as the
exporter is one (planning/exporter_unit.py): `<unit>-front.service` runs this kimik3's interpreter (`python -m
kimik3_reconciler front-serve NAME`) with Restart=on-failure, so the public port is served again after a crash or a
reboot without an apply. Its files are rendered, compared and removed like the exporter's (the same header, env file
and drift diff; the stale-unit planner keeps it while the profile has `metrics.handover`; destroy removes it).
A restart of the unit is systemd's stop, then start: the public port is closed for that second (no socket handover
between a unit's old and new process).
"""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.plan import Step, flat_diff
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import FrontUnit
from kimik3_reconciler.model.unit_files import env_path, front_unit
from kimik3_reconciler.planning.exporter_unit import helper_install, plan_helper_unit, render_helper_unit_text
from kimik3_reconciler.planning.unit_step import docker_cli_or_refuse


def render_front_unit_text(profile: str, argv: tuple[str, ...], env_file: str) -> str:
    # Not after the server's unit: the front holds the public port whatever runs behind it (a 502 while nothing does).
    return render_helper_unit_text(
        profile, argv, env_file, "After=network-online.target", "front-serve", "Kimi-K3 front"
    )


def plan_front_unit(profile: Profile, observed: Observed, wanted: FrontConfig) -> tuple[Step, ...]:
    unit = front_unit(f"{profile.unit_name}.service")
    facts = observed.systemd
    current = next((u for u in facts.units if u.name == unit), None) if facts else None
    docker_cli_or_refuse(profile, facts, current, unit)  # systemd is PID 1, no foreign file of that name
    assert facts is not None
    install = helper_install(
        profile, observed, unit, render_front_unit_text(profile.name, facts.kimik3_argv, env_path(unit))
    )
    running = observed.front
    detached = running.pid if running is not None and running.unit is None and running.alive else None
    spec = FrontUnit(
        profile=profile.name,
        config=wanted.to_json(),
        fingerprint=wanted.fingerprint,
        health_url=wanted.health_url,
        install=install,
        stop_pid=detached,
    )
    old = running.config if running is not None and running.config else {}
    return plan_helper_unit(
        "front",
        "front",
        current,
        spec,
        running,
        wanted.fingerprint,
        flat_diff(old, wanted.to_json()),
        wanted.control_url.split("/.kimik3")[0],
    )
