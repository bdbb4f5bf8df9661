"""Plan a helper process (the exporter, the front: model/helpers.py) as a systemd unit, for a profile with
`systemd:`: `<unit>-<suffix>.service` runs this kimik3's interpreter (`python -m kimik3_reconciler <command> NAME`,
observed through ProcessPort.invocation) with Restart=on-failure, so the helper comes back after a crash or a reboot
without an apply. Its files are rendered, compared and removed like the server's unit (planning/unit_step.py: the
same header, env file and drift diff; the stale-unit planner keeps it; destroy removes it); the step waits for its
/healthz to answer the helper's fingerprint, like the detached helper's.
"""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ExporterFact, Observed, UnitFact
from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.helpers import Helper
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.plan import Action, DiffItem, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ExporterUnit, FrontUnit, UnitInstall
from kimik3_reconciler.model.unit_files import env_path, with_header
from kimik3_reconciler.planning.unit_step import ABSOLUTE, docker_cli_or_refuse, file_change, install_of

RESTART_S = 5  # a crashed helper is back within seconds (Prometheus' `up` shows the exporter's gap)
# The environment a helper may have from this kimik3's invocation: where its state is, where it imports from.
# Nothing else: no API key (a helper reads the key *file* named in its config record when it needs the key).
_ENV_NAMES = ("KIMIK3_STATE_DIR", "PYTHONPATH")


def running_helper(helper: Helper, observed: Observed) -> ExporterFact | None:
    """The helper's process as observed (Observed.exporter, Observed.front: the field is its name)."""
    return getattr(observed, helper.what)


def render_helper_unit_text(helper: Helper, profile: str, argv: tuple[str, ...], env_file: str, after: str) -> str:
    """A kimik3 helper's unit. ExecStart is argv words only: the interpreter path (checked absolute, no spaces) and
    fixed words; the profile name comes from the env file as one word (`${KIMIK3_PROFILE}`), never spliced into a
    shell string."""
    if (
        not argv
        or not ABSOLUTE.fullmatch(argv[0])
        or any(not ABSOLUTE.fullmatch(a) and not a.replace("_", "").replace("-", "").isalnum() for a in argv)
    ):
        raise PlanError(f"kimik3 interpreter {argv!r}: a unit needs an absolute path without spaces or quotes")
    lines = [
        f"# Rendered by kimik3 from profile {profile}; `kimik3 apply` restores any edit.",
        "[Unit]",
        f"Description={helper.title} (kimik3 profile {profile})",
        # The exporter after the server's unit, the front after the network alone (their callers say why).
        after,
        "",
        "[Service]",
        "Type=simple",
        f"EnvironmentFile={env_file}",
        f"ExecStart={' '.join(argv)} {helper.command} ${{KIMIK3_PROFILE}}",
        "Restart=on-failure",
        f"RestartSec={RESTART_S}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return with_header("\n".join(lines) + "\n", profile)


def helper_install(profile: Profile, observed: Observed, unit: str, text: str) -> UnitInstall:
    """A helper's unit and its env file (the profile's name, this kimik3's state dir and import path: nothing else)."""
    facts = observed.systemd
    assert facts is not None
    values = {"KIMIK3_PROFILE": profile.name, **{k: facts.kimik3_env[k] for k in _ENV_NAMES if facts.kimik3_env.get(k)}}
    return install_of(profile, unit, text, values)


def plan_unit_of(
    helper: Helper, profile: Profile, observed: Observed, wanted: ExporterConfig | FrontConfig, after: str, target: str
) -> tuple[Step, ...]:
    """The helper's unit step, its unit started `after` (a unit line): see plan_helper_unit."""
    unit = helper.unit_of(f"{profile.unit_name}.service")
    facts = observed.systemd
    current = next((u for u in facts.units if u.name == unit), None) if facts else None
    # The same ownership checks as the server's unit: systemd is PID 1, no foreign file of that name is overwritten.
    docker_cli_or_refuse(profile, facts, current, unit)
    assert facts is not None
    text = render_helper_unit_text(helper, profile.name, facts.kimik3_argv, env_path(unit), after)
    running = running_helper(helper, observed)
    detached = running.pid if running is not None and running.unit is None and running.alive else None
    spec = helper.unit(
        profile=profile.name,
        config=wanted.to_json(),
        fingerprint=wanted.fingerprint,
        health_url=wanted.health_url,
        install=helper_install(profile, observed, unit, text),
        stop_pid=detached,
    )
    config_diff = helper.config_diff(running.config if running is not None else None, wanted.to_json())
    return plan_helper_unit(helper, current, spec, running, wanted.fingerprint, config_diff, target)


def plan_helper_unit(
    helper: Helper,
    current: UnitFact | None,
    spec: ExporterUnit | FrontUnit,
    running: ExporterFact | None,
    fingerprint: str,
    config_diff: tuple[DiffItem, ...],
    target: str,
) -> tuple[Step, ...]:
    """A helper's unit step (the exporter's, the front's): install it, or update what moved (its files, its
    configuration's fingerprint, its enablement; a detached one beside it is stopped), or nothing."""
    kind, what = helper.step, helper.what
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
