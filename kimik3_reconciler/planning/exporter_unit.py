"""Plan the metrics exporter as a systemd unit (issue 17: "a systemd unit next to it"), for a profile with both
`metrics:` and `systemd:`: `<unit>-metrics.service` runs this kimik3's interpreter (`python -m kimik3_reconciler
metrics-serve NAME`, observed through ProcessPort.invocation) with Restart=on-failure, so the exporter comes back
after a crash or a reboot without an apply. Its files are rendered, compared and removed like the server's unit
(planning/unit_step.py: the same header, env file and drift diff; the stale-unit planner keeps it; destroy
removes it); the step waits for /healthz to answer the exporter's fingerprint, like the detached exporter's.
"""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ExporterFact, Observed, UnitFact
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.plan import Action, DiffItem, Step, flat_diff
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ExporterUnit, FrontUnit, UnitInstall
from kimik3_reconciler.model.unit_files import env_path, exporter_unit, unit_path, with_header
from kimik3_reconciler.planning.unit_step import ABSOLUTE, docker_cli_or_refuse, file_change, render_env_file

RESTART_S = 5  # a crashed exporter is back within seconds (Prometheus' `up` shows the gap)
# The environment an exporter may have from this kimik3's invocation: where its state is, where it imports from.
# Nothing else: no API key (the exporter reads the key *file* named in its config record at scrape time).
_ENV_NAMES = ("KIMIK3_STATE_DIR", "PYTHONPATH")


def render_exporter_unit_text(profile: str, argv: tuple[str, ...], env_file: str, server_unit: str) -> str:
    return render_helper_unit_text(
        profile,
        argv,
        env_file,
        f"After=network-online.target {server_unit}",
        "metrics-serve",
        "Kimi-K3 metrics exporter",
    )


def render_helper_unit_text(
    profile: str, argv: tuple[str, ...], env_file: str, after: str, command: str, what: str
) -> str:
    """A kimik3 helper's unit (`command`: metrics-serve, front-serve). ExecStart is argv words only: the interpreter
    path (checked absolute, no spaces) and fixed words; the profile name comes from the env file as one word
    (`${KIMIK3_PROFILE}`), never spliced into a shell string."""
    if (
        not argv
        or not ABSOLUTE.fullmatch(argv[0])
        or any(not ABSOLUTE.fullmatch(a) and not a.replace("_", "").replace("-", "").isalnum() for a in argv)
    ):
        raise PlanError(f"kimik3 interpreter {argv!r}: a unit needs an absolute path without spaces or quotes")
    lines = [
        f"# Rendered by kimik3 from profile {profile}; `kimik3 apply` restores any edit.",
        "[Unit]",
        f"Description={what} (kimik3 profile {profile})",
        # The exporter: after the server's unit (on boot its first scrape finds the container starting, not absent).
        after,
        "",
        "[Service]",
        "Type=simple",
        f"EnvironmentFile={env_file}",
        f"ExecStart={' '.join(argv)} {command} ${{KIMIK3_PROFILE}}",
        "Restart=on-failure",
        f"RestartSec={RESTART_S}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return with_header("\n".join(lines) + "\n", profile)


def render_exporter_install(profile: Profile, observed: Observed, docker_cli: str) -> UnitInstall:
    del docker_cli  # checked by the caller (the server's unit needs it); the exporter runs kimik3 only
    facts = observed.systemd
    assert facts is not None and profile.unit_name is not None
    server = f"{profile.unit_name}.service"
    unit = exporter_unit(server)
    return helper_install(
        profile, observed, unit, render_exporter_unit_text(profile.name, facts.kimik3_argv, env_path(unit), server)
    )


def helper_install(profile: Profile, observed: Observed, unit: str, text: str) -> UnitInstall:
    """A helper's unit and its env file (the profile's name, this kimik3's state dir and import path: nothing else)."""
    facts = observed.systemd
    assert facts is not None
    values = {"KIMIK3_PROFILE": profile.name, **{k: facts.kimik3_env[k] for k in _ENV_NAMES if facts.kimik3_env.get(k)}}
    return UnitInstall(
        unit=unit,
        profile=profile.name,
        unit_path=unit_path(unit),
        unit_text=text,
        env_path=env_path(unit),
        env_text=render_env_file(values, profile.name),
        enable=bool(profile.systemd and profile.systemd.enable),
        write_unit=True,
        write_env=True,
        reload=True,
    )


def plan_exporter_unit(profile: Profile, observed: Observed, wanted: ExporterConfig) -> tuple[Step, ...]:
    unit = exporter_unit(f"{profile.unit_name}.service")
    facts = observed.systemd
    current = next((u for u in facts.units if u.name == unit), None) if facts else None
    # The same ownership checks as the server's unit: systemd is PID 1, no foreign file of that name is overwritten.
    install = render_exporter_install(profile, observed, docker_cli_or_refuse(profile, facts, current, unit))
    running = observed.exporter
    detached = running.pid if running is not None and running.unit is None and running.alive else None
    spec = ExporterUnit(
        profile=profile.name,
        config=wanted.to_json(),
        fingerprint=wanted.fingerprint,
        health_url=wanted.health_url,
        install=install,
        stop_pid=detached,
    )
    old = ExporterConfig.from_json(running.config).flat() if running is not None and running.config else {}
    return plan_helper_unit(
        "metrics",
        "exporter",
        current,
        spec,
        running,
        wanted.fingerprint,
        flat_diff(old, wanted.flat()),
        wanted.health_url.removesuffix("/healthz") + "/metrics",
    )


def plan_helper_unit(
    kind: str,
    what: str,
    current: UnitFact | None,
    spec: ExporterUnit | FrontUnit,
    running: ExporterFact | None,
    fingerprint: str,
    config_diff: tuple[DiffItem, ...],
    target: str,
) -> tuple[Step, ...]:
    """A helper's unit step (the exporter's, the front's): install it, or update what moved (its files, its
    configuration's fingerprint, its enablement; a detached one beside it is stopped), or nothing."""
    install, unit, detached = spec.install, spec.install.unit, spec.stop_pid
    if current is None or current.unit_file is None:
        why = f"no {what} unit: install {unit}, start it"
        if detached:
            why += f" (the detached {what} pid {detached} stops first)"
        return (Step(kind, unit, Action.CREATE, why, spec=spec),)
    unit_why, unit_diff = file_change("unit", install.unit_path, current.unit_file, install.unit_text)
    env_why, env_diff = file_change("env", install.env_path, current.env_file, install.env_text)
    reasons = [r for r in (unit_why, env_why) if r]
    diff: list[DiffItem] = [*unit_diff, *env_diff]
    if detached:
        reasons.append(f"a detached {what} (pid {detached}) runs beside it: stop it")
    if running is None or running.fingerprint != fingerprint:
        was = running.fingerprint if running is not None else "none"
        reasons.append(f"{what} fingerprint {was} → {fingerprint}: restart it")
        diff += config_diff
    elif running.serving != fingerprint:
        reasons.append(f"unit {current.active_state}, /healthz does not answer its fingerprint: restart it")
    if (current.unit_file_state == "enabled") != install.enable:
        reasons.append("enable it at boot" if install.enable else "disable it (on-demand)")
    restart = bool(reasons)
    spec = replace(
        spec,
        install=replace(
            install,
            write_unit=unit_why is not None,
            write_env=env_why is not None,
            reload=unit_why is not None or current.load_state != "loaded",
            restart=restart,
        ),
    )
    if not reasons:
        return (Step(kind, target, Action.NOOP, f"unit {unit} serves fingerprint {fingerprint}", spec=spec),)
    return (Step(kind, unit, Action.UPDATE, "; ".join(reasons), diff=tuple(diff), spec=spec),)
