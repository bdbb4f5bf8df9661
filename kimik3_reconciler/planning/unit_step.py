"""Plan the systemd unit (seed 000 step 7): render the unit and its env file; install, restore, start or remove.

The service runs the container kimik3 launched in the foreground (`docker start --attach`), so a
restart never downloads or builds anything; systemd, not dockerd, restarts it (the container's
restart policy is "no" when the profile has a `systemd:` section, planning/launch.py).
"""

from __future__ import annotations

import re
from dataclasses import replace

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import Observed, SystemdFacts, UnitFact, UnitFileFact
from kimik3_reconciler.model.plan import Action, DiffItem, Step, flat_diff
from kimik3_reconciler.model.profile import Profile, handover
from kimik3_reconciler.model.specs import UnitInstall, UnitRemoval
from kimik3_reconciler.model.unit_files import (
    env_path,
    exporter_unit,
    front_unit,
    runs_exporter_unit,
    runs_front_unit,
    runs_helper_unit,
    split_header,
    unit_path,
    with_header,
)
from kimik3_reconciler.planning.conflict_step import why_conflicting
from kimik3_reconciler.planning.container_step import container_changes
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.launch import Launch

STOP_TIMEOUT_S = 120  # docker stop's grace: llama-server exits 0 on SIGTERM after freeing GPU memory
TIMEOUT_STOP_S = STOP_TIMEOUT_S + 30  # systemd's own limit must outlast ExecStop's wait
RESTART_S = 10  # a crash loop restarts every 10 s: never trips systemd's default 5-starts-in-10-s limit
_BARE = re.compile(r"[A-Za-z0-9_./:@+,=-]*")  # needs no quoting in an EnvironmentFile
ABSOLUTE = re.compile(r"/[A-Za-z0-9_./+-]+")
_UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*\.service")
_DOUBLE_QUOTE_ESCAPES = str.maketrans({c: "\\" + c for c in '\\"$`'})
_ON_DEMAND = "on-demand (not enabled at boot)"


def env_value(name: str, value: str) -> str:
    """A bare value, or one double-quoted with systemd's escapes. Never followed by a comment: systemd
    folds an inline `# comment` into the value (seed 000 step 7's trap)."""
    # rule: env-file-bare-values
    if _BARE.fullmatch(value):
        return value
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        # A newline would end the assignment (and start another): refuse rather than escape.
        raise PlanError(f"env file value {name}: control characters cannot go into a systemd EnvironmentFile")
    return '"' + value.translate(_DOUBLE_QUOTE_ESCAPES) + '"'


def render_env_file(values: dict[str, str], profile: str) -> str:
    """The env file: kimik3 header, one `NAME=value` per line, bare or quoted, no comment after a value."""
    lines = [
        f"# Rendered by kimik3 from profile {profile}; `kimik3 apply` restores any edit.",
        *(f"{name}={env_value(name, value)}" for name, value in values.items()),
    ]
    return with_header("\n".join(lines) + "\n", profile)


def render_unit(*, profile: str, server: str, docker_cli: str, env_file: str, conflicts: tuple[str, ...]) -> str:
    """The unit: argv words only (the container name comes from the env file as one word, `${...}`); `server`: the
    engine's server, as its Description names it."""
    if not ABSOLUTE.fullmatch(docker_cli):
        raise PlanError(f"docker CLI path {docker_cli!r}: a unit needs an absolute path without spaces or quotes")
    lines = [
        f"# Rendered by kimik3 from profile {profile}; `kimik3 apply` restores any edit.",
        "[Unit]",
        f"Description=Kimi-K3 {server} (kimik3 profile {profile})",
        # rule: units-conflict-ordered
        # Ordered after the conflicting units too: Conflicts= alone stops the other *while* this one
        # starts (both on the GPUs or the port); with an ordering, systemd finishes the stop first.
        f"After={' '.join(('docker.service', *conflicts))}",
        "Requires=docker.service",
        *([f"Conflicts={' '.join(conflicts)}"] if conflicts else []),
        "",
        "[Service]",
        "Type=simple",
        f"EnvironmentFile={env_file}",
        f"ExecStart={docker_cli} start --attach ${{KIMIK3_CONTAINER}}",
        f"ExecStop={docker_cli} stop --time {STOP_TIMEOUT_S} ${{KIMIK3_CONTAINER}}",
        "Restart=on-failure",
        f"RestartSec={RESTART_S}",
        f"TimeoutStopSec={TIMEOUT_STOP_S}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return with_header("\n".join(lines) + "\n", profile)


def unit_conflicts(profile: Profile, observed: Observed) -> tuple[str, ...]:
    """`systemd.conflicts`, plus the kimik3 units of other profiles whose containers share GPUs or the port."""
    assert profile.systemd is not None
    names = {f"{u}.service" for u in profile.systemd.conflicts}
    for unit in observed.systemd.units if observed.systemd else ():
        if unit.profile in (None, profile.name) or not _UNIT_NAME.fullmatch(unit.name):
            continue  # a file name that is no unit name never reaches a unit line
        if unit.unit_file is not None and runs_helper_unit(unit.unit_file.body):
            continue  # another profile's exporter or front holds no GPU and not this server's port: it may run on
        theirs = (c for c in observed.others if c.profile == unit.profile)
        if any(why_conflicting(profile, c, profile.serve.port) for c in theirs):
            names.add(unit.name)
    return tuple(sorted(names))


def render_install(profile: Profile, observed: Observed, launch: Launch, docker_cli: str) -> UnitInstall:
    unit = f"{profile.unit_name}.service"
    values = {
        "KIMIK3_PROFILE": profile.name,
        "KIMIK3_CONTAINER": launch.spec.name,
        "KIMIK3_IMAGE": launch.spec.image,
        "KIMIK3_MODEL": f"{profile.model.repo}@{profile.model.revision}/{profile.model.quant}",
        "KIMIK3_MODEL_CACHE": observed.model.cache_dir,
        "KIMIK3_HEALTH_URL": launch.health_url,
    }
    text = render_unit(
        profile=profile.name,
        server=engine_for(profile.engine).server,
        docker_cli=docker_cli,
        env_file=env_path(unit),
        conflicts=unit_conflicts(profile, observed),
    )
    return install_of(profile, unit, text, values)


def install_of(profile: Profile, unit: str, text: str, values: dict[str, str]) -> UnitInstall:
    """Install `unit` (its text) and its env file (`values`), enabled at boot as `systemd.enable` says: every file
    written, systemd reloaded (the planner turns off what need not happen)."""
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


def _settings(body: str) -> dict[str, str]:
    """`Key=value` lines by (section-qualified) key; comments and blank lines skipped."""
    found: dict[str, str] = {}
    section = ""
    for raw in body.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1] + "."
            continue
        key, _, value = line.partition("=")
        key = section + key.strip()
        found[key] = f"{found[key]}; {value}" if key in found else value
    return found


def file_change(
    label: str, path: str, found: UnitFileFact | None, text: str
) -> tuple[str | None, tuple[DiffItem, ...]]:
    """(why the file must be written, or None; the settings that differ)."""
    fingerprint, _, body = split_header(text)
    if found is None:
        return f"{label} file {path} is missing: write it", ()
    diff = flat_diff(_settings(found.body), _settings(body), prefix=f"{label} ")
    if found.fingerprint is None:
        return f"{label} file {path} lost its kimik3 header (edited by hand): restore it", diff
    if found.edited:
        return f"{label} file {path} was edited by hand (body ≠ its kimik3 header): restore it", diff
    if found.fingerprint != fingerprint:
        return (
            f"the profile renders another {label} file (fingerprint {found.fingerprint} → {fingerprint}): rewrite it",
            diff,
        )
    return None, ()


def docker_cli_or_refuse(profile: Profile, facts: SystemdFacts | None, current: UnitFact | None, unit: str) -> str:
    """The docker CLI the unit will run, or PlanError: kimik3 never half-installs a unit."""
    # rule: unit-owned
    # kimik3 installs a unit only where it can own and run it: systemd is PID 1, the name is an instance, no
    # package's, operator's or other profile's unit is overwritten, docker.service and a docker CLI exist.
    if facts is None or not facts.booted:
        state = facts.state if facts else "not observed"
        raise PlanError(
            f"systemd.unit {unit}: systemd is not PID 1 on this host (`systemctl is-system-running`: "
            f"{state}), so kimik3 cannot install or supervise the unit; run on a systemd host, or remove "
            "the profile's `systemd:` section to run the container alone"
        )
    if unit.endswith("@.service"):
        raise PlanError(f"systemd.unit {unit}: a template cannot run by itself; name an instance (name@x)")
    if (
        current is not None
        and current.unit_file is None
        and current.load_state == "loaded"
        and current.fragment_path not in ("", unit_path(unit))
    ):
        # e.g. systemd.unit: docker — a file in /etc would silently override the package's unit.
        raise PlanError(
            f"systemd.unit {unit} already exists ({current.fragment_path}); set systemd.unit to another name"
        )
    if current is not None and current.unit_file_state.startswith("masked"):
        raise PlanError(f"systemd.unit {unit} is masked; `systemctl unmask {unit}` to let kimik3 manage it")
    if current is not None and current.unit_file is not None and current.unit_file.fingerprint is None:
        # Never overwrite what an operator or a package installed (destroy would not remove it either).
        raise PlanError(
            f"systemd.unit {unit}: {current.unit_file.path} exists and was not installed by kimik3 "
            "(no `# kimik3:` header); move it away or set systemd.unit to another name"
        )
    if current is not None and current.profile not in (None, profile.name):
        raise PlanError(
            f"systemd.unit {unit} belongs to kimik3 profile {current.profile}; set systemd.unit to another name"
        )
    if facts.docker_service == "not-found":
        raise PlanError(
            f"systemd.unit {unit}: systemd here has no docker.service, which the unit requires "
            "(After=/Requires=docker.service); run Docker as that systemd unit"
        )
    if facts.docker_cli is None:
        raise PlanError(
            f"systemd.unit {unit}: no docker CLI on the PATH where systemd runs units "
            "(the unit runs `docker start --attach`)"
        )
    return facts.docker_cli


def _state_changes(install: UnitInstall, current: UnitFact, relaunched: bool) -> tuple[list[str], list[DiffItem]]:
    reasons: list[str] = []
    diff: list[DiffItem] = []
    enabled = current.unit_file_state == "enabled"
    if install.enable != enabled:
        reasons.append("enable it at boot" if install.enable else f"disable it: the profile says {_ON_DEMAND}")
        diff.append(
            DiffItem("enabled", current.unit_file_state or "(unknown)", "enabled" if install.enable else "disabled")
        )
    if current.active_state == "failed":
        reasons.append(f"unit failed (result {current.result}): reset it and start it")
    elif current.active_state != "active":
        reasons.append(f"unit {current.active_state}: start it (it attaches to the container kimik3 launched)")
    elif relaunched:
        reasons.append("the container is (re)launched under the running unit: start the unit again if it stopped")
    if current.active_state != "active":
        diff.append(DiffItem("active", current.active_state, "active"))
    return reasons, diff


def plan_stale_units(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Units kimik3 installed for this profile that it no longer names (section removed, unit renamed).

    They go before the container step: their ExecStop stops the container, so they must not run
    after a relaunch.
    """
    profile = desired.profile
    keep = f"{profile.unit_name}.service" if profile.systemd is not None else None
    # The exporter's unit (planning/exporter_unit.py) stays while the profile has `metrics:` too, the front's
    # (planning/front_unit.py) while it has `metrics.handover`.
    helpers = (
        exporter_unit(keep) if keep and profile.metrics is not None else None,
        front_unit(keep) if keep and handover(profile) is not None else None,
    )
    return _removals(profile, observed.systemd, keep=keep, why="stale", also_keep=helpers)


def plan_unit(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """The profile's unit step, after health; () without a `systemd:` section."""
    profile, launch = desired.profile, desired.launch
    relaunched = container_changes(planned)
    if profile.systemd is None:
        return ()
    facts = observed.systemd
    wanted = f"{profile.unit_name}.service"
    current = next((u for u in facts.units if u.name == wanted), None) if facts else None
    install = render_install(profile, observed, launch, docker_cli_or_refuse(profile, facts, current, wanted))
    if current is None or current.unit_file is None:
        mode = "enable it at boot" if install.enable else _ON_DEMAND
        why = f"no unit: install it and {install.env_path}, daemon-reload, {mode}, start it"
        return (Step("unit", wanted, Action.CREATE, why, spec=install),)
    unit_why, unit_diff = file_change("unit", install.unit_path, current.unit_file, install.unit_text)
    env_why, env_diff = file_change("env", install.env_path, current.env_file, install.env_text)
    state_why, state_diff = _state_changes(install, current, relaunched)
    reasons = [r for r in (unit_why, env_why) if r] + state_why
    spec = replace(
        install,
        write_unit=unit_why is not None,
        write_env=env_why is not None,
        reload=unit_why is not None or current.load_state != "loaded",
    )
    if not reasons:
        boot = "enabled at boot" if install.enable else _ON_DEMAND
        why = f"installed (fingerprint {current.unit_file.fingerprint}), {boot}, active"
        return (Step("unit", wanted, Action.NOOP, why, spec=spec),)
    return (
        Step("unit", wanted, Action.UPDATE, "; ".join(reasons), diff=(*unit_diff, *env_diff, *state_diff), spec=spec),
    )


def _removals(
    profile: Profile, facts: SystemdFacts | None, keep: str | None, why: str, also_keep: tuple[str | None, ...] = ()
) -> tuple[Step, ...]:
    steps = []
    for unit in facts.units if facts else ():
        if unit.profile != profile.name or unit.name in (keep, *also_keep) or unit.unit_file is None:
            continue
        env = unit.env_file
        removal = UnitRemoval(
            unit=unit.name,
            unit_path=unit.unit_file.path,
            env_path=env.path if env and env.profile == profile.name else None,
            systemctl=facts.booted,
        )
        reason = {
            "stale": "the profile no longer names this unit"
            + (f" (systemd.unit is {keep})" if keep else " (no `systemd:` section)"),
            "destroy": "installed by kimik3 for this profile",
        }[why]
        if why == "stale" and keep and profile.metrics is None and runs_exporter_unit(unit.unit_file.body):
            reason = "the metrics exporter's unit, and the profile has no `metrics:` section"
        if why == "stale" and keep and handover(profile) is None and runs_front_unit(unit.unit_file.body):
            reason = "the front's unit, and the profile has no `metrics.handover`"
        how = (
            "stop, disable and remove it and its env file"
            if facts.booted
            else "systemd is not running: remove its files only"
        )
        steps.append(Step("unit", unit.name, Action.DELETE, f"{reason}: {how}", spec=removal))
    return tuple(steps)


def plan_unit_teardown(profile: Profile, observed: Observed) -> tuple[Step, ...]:
    """destroy: stop, disable and remove every unit kimik3 installed for this profile, nothing else."""
    steps = _removals(profile, observed.systemd, keep=None, why="destroy")
    if steps or profile.systemd is None:
        return steps
    return (Step("unit", f"{profile.unit_name}.service", Action.NOOP, "no unit installed by kimik3"),)
