"""systemd facts: PID 1 or not, kimik3's unit and env files, `systemctl show` states. Pure parsers + collector."""

from __future__ import annotations

from kimik3_reconciler.model.facts import SystemdFacts, UnitFact, UnitFileFact
from kimik3_reconciler.model.profile import Profile, handover
from kimik3_reconciler.model.unit_files import (
    HEADER_PREFIX,
    UNIT_DIR,
    body_fingerprint,
    env_path,
    exporter_unit,
    front_unit,
    split_header,
    unit_path,
)
from kimik3_reconciler.ports import ProcessPort, UnitsPort

DOCKER_SERVICE = "docker.service"
SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "Result", "FragmentPath", "MainPID")
_FIELDS = {
    "LoadState": "load_state",
    "ActiveState": "active_state",
    "SubState": "sub_state",
    "UnitFileState": "unit_file_state",
    "Result": "result",
    "FragmentPath": "fragment_path",
}


def parse_show(text: str) -> dict[str, dict[str, str]]:
    """`systemctl show -p Id,... a b` -> {Id: {property: value}}; one blank-line-separated block per unit."""
    units: dict[str, dict[str, str]] = {}
    for block in text.strip().split("\n\n"):
        props = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def parse_unit_file(path: str, text: str) -> UnitFileFact:
    fingerprint, profile, body = split_header(text)
    return UnitFileFact(
        path=path, fingerprint=fingerprint, profile=profile, body=body, body_fingerprint=body_fingerprint(body)
    )


def _unit_fact(name: str, unit_file: UnitFileFact | None, units: UnitsPort, state: dict[str, str]) -> UnitFact:
    env_text = units.read_file(env_path(name)) if unit_file and unit_file.fingerprint else None
    env_file = parse_unit_file(env_path(name), env_text) if env_text is not None else None
    fields: dict[str, str | int] = {attr: state[key] for key, attr in _FIELDS.items() if key in state}
    pid = state.get("MainPID", "0")
    fields["main_pid"] = int(pid) if pid.isdigit() else 0
    return UnitFact(name=name, unit_file=unit_file, env_file=env_file, **fields)


def collect_systemd(
    profile: Profile, units: UnitsPort | None, processes: ProcessPort | None = None
) -> SystemdFacts | None:
    """kimik3's units (files with its header) and the profile's unit; None when neither exists and the
    profile has no `systemd:` section, so a plain profile costs a directory listing and no systemctl."""
    if units is None:
        return None
    files: dict[str, UnitFileFact] = {}
    for path in units.list_files(UNIT_DIR, ".service"):
        text = units.read_file(path)
        if text is not None and text.startswith(HEADER_PREFIX):
            files[path.rsplit("/", 1)[1]] = parse_unit_file(path, text)
    wanted = f"{profile.unit_name}.service" if profile.systemd is not None else None
    # The exporter's unit next to the server's (`metrics:` under `systemd:`).
    exporter = exporter_unit(wanted) if wanted and profile.metrics is not None else None
    front = front_unit(wanted) if wanted and handover(profile) is not None else None  # metrics.handover's front
    for name in (wanted, exporter, front):
        if name and name not in files:
            text = units.read_file(unit_path(name))  # someone else's unit of that name, or nothing
            if text is not None:
                files[name] = parse_unit_file(unit_path(name), text)
    if wanted is None and not files:
        return None
    booted = units.booted()
    names = sorted(set(files) | {n for n in (wanted, exporter, front) if n})
    argv, env = processes.invocation() if processes is not None and (exporter or front) else ((), {})
    # docker.service too: the units Require= it, and a host without it would fail every start.
    states = parse_show(units.show([*names, DOCKER_SERVICE], list(SHOW_PROPERTIES))) if booted else {}
    return SystemdFacts(
        booted=booted,
        state=units.system_state(),
        docker_cli=units.which("docker") if wanted and booted else None,
        docker_service=states.get(DOCKER_SERVICE, {}).get("LoadState", "unknown"),
        units=tuple(_unit_fact(n, files.get(n), units, states.get(n, {})) for n in names),
        kimik3_argv=argv,
        kimik3_env=env,
    )
