"""Fleet file text -> a validated Fleet, every problem located `file:line: field: message` (as a profile's).

The YAML is read by the profile's reader (YAML 1.2, no anchors, every key's line) and checked by the fleet schema;
then what no field knows alone: the groups the rollout names, the policy against the host count, the router's host,
and each host's effective profile (the profile with its overrides), validated as a profile is. Reads the profile
through `read_text` (the CLI's bounded reader); nothing else is read, nothing is run."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from kimik3_reconciler.errors import InputError, ProfileError, ProfileProblem
from kimik3_reconciler.fleet.effective import override_paths, with_absolute_paths, with_overrides
from kimik3_reconciler.fleet.groups import cluster_of, conflicts
from kimik3_reconciler.fleet.host_vars import secret_vars
from kimik3_reconciler.fleet.hot_prompts import parse_hot_prompts
from kimik3_reconciler.fleet.inventory import Inventory, read_inventory
from kimik3_reconciler.fleet.listeners import clashes, unreachable
from kimik3_reconciler.fleet.router_layout import DEFAULT_POLICY
from kimik3_reconciler.fleet.schema import OVERRIDABLE, FleetFile
from kimik3_reconciler.fleet.values import Fleet, FleetHost, RolloutPolicy, RouterPlacement
from kimik3_reconciler.model.durations import parse_duration
from kimik3_reconciler.model.loaded_profile import LoadedProfile, line_for, render_path
from kimik3_reconciler.model.pinning import unpinned, unpinned_message
from kimik3_reconciler.model.profile_rules import FieldPath
from kimik3_reconciler.model.profile_schema import Profile as ProfileSchema
from kimik3_reconciler.model.profile_source import load_yaml, parse_profile, validation_problems

MAX_FLEET_CHARS = 256 * 1024
_FLEET_FILE = (
    'a fleet file names its profile in `profile:` (docs/profile.md "The fleet file", profiles/fleet-demo.yaml)'
)


class _Problems:
    def __init__(self, source: str, lines: Mapping[FieldPath, int]):
        self.source, self.lines, self.found = source, lines, []

    def add(self, path: FieldPath, message: str, near: FieldPath = ()) -> None:
        """A problem of `path`, at its line; unwritten (a default), at the line of `near` (what is written)."""
        line = line_for(path, self.lines) or line_for(near, self.lines) or 1
        self.found.append(ProfileProblem(self.source, line, render_path(path), message))


def parse_fleet(text: str, source: str, read_text: Callable[[str], str]) -> Fleet:
    """Validate fleet YAML text (its profile read through `read_text`); ProfileError listing every problem."""
    if len(text) > MAX_FLEET_CHARS:
        raise ProfileError([ProfileProblem(source, None, "", f"{len(text) // 1024} KiB: a fleet file is a few KiB")])
    written: dict[FieldPath, str] = {}
    data, lines, found = load_yaml(text, written)
    problems = _Problems(source, lines)
    problems.found += [ProfileProblem(source, line, render_path(path), _fleet_words(m)) for line, path, m in found]
    if data is None:
        raise ProfileError(problems.found)
    if isinstance(data, dict) and "kind" not in data and "model" in data:
        # A profile given where a fleet file goes: one line saying so, not a required key and an unknown key each.
        problems.add(("kind",), f"no kind: Fleet: a profile, not a fleet file: {_FLEET_FILE}")
        raise ProfileError(problems.found)
    data = _fixed_overrides(data, problems)
    data = _secret_values(data, problems)
    try:
        spec = FleetFile.model_validate(data)
    except ValidationError as exc:
        found = validation_problems(exc, source, lines, written, FleetFile)
        raise ProfileError(_sorted(problems.found + found)) from None
    for path, message in secret_vars(data["inventory"]):
        problems.add(path, message)
    if problems.found:
        raise ProfileError(_sorted(problems.found))
    inventory = read_inventory(data["inventory"])
    rollout = _rollout(spec, inventory, problems)
    _check_router(spec, inventory, problems)
    _check_target(spec, problems)
    for name in spec.overrides:
        if rollout is not None and name not in rollout.hosts:
            problems.add(
                ("overrides", name),
                f"{name!r} is not a host of the rollout's group "
                f"{spec.rollout.hosts!r}: hosts are named as the inventory names them",
            )
    base = _base_profile(spec, source, read_text, problems)
    warm = _warm_prompts(spec, source, read_text, problems)
    if problems.found or rollout is None or base is None:
        raise ProfileError(_sorted(problems.found))
    hosts, broken = [], set()
    for name in rollout.hosts:
        before = len(problems.found)
        hosts.append(_host(spec, inventory, name, base, problems))
        if len(problems.found) > before:
            broken.add(name)
    # A host whose effective profile was refused is judged no further: its base profile's values would be reported
    # as its own (a refused serve.port override then read as the profile's loopback bind).
    checked = tuple(h for h in hosts if h.name not in broken)
    entries = {h.name: ("inventory", *h.path) for h in inventory.hosts}
    router_policy = spec.router.policy or DEFAULT_POLICY
    for clash in (
        *unreachable(checked, spec.router.host, entries),
        *clashes(checked, spec.router.host, spec.router.port, router_policy, entries, data["inventory"]),
    ):
        problems.add(clash.path, clash.message, near=clash.near)
    for host in checked if spec.target == "slurm" else ():
        if host.profile.gpus == "all":
            # A job asks for a number of GPUs (--gres=gpu:N); "all" of a node Slurm shares is no number.
            problems.add(
                ("overrides", host.name, "gpus"),
                f"host {host.name}: gpus: all cannot be asked of Slurm: list the GPUs the replica's job takes "
                "(the job asks --gres for that many)",
                near=("target",),
            )
    for host in checked if spec.target == "slurm" else ():
        cluster = cluster_of(host.profile)
        if cluster is not None:
            # The Slurm target runs a group as one heterogeneous job whose components are rpc-server workers
            # (fleet/targets/slurm.py); a cluster's nodes are converged through their own Docker, not by Slurm.
            field = (cluster[0], "cluster")
            message = (
                f"host {host.name}: {cluster[0]}.cluster (a replica over several hosts) does not run on target: "
                "slurm yet (its job would hold the head's node only, while the nodes' members run outside Slurm): "
                "use target: ansible, or `kimik3 fleet render --target kubernetes`"
            )
            if any(field[: len(o)] == o for o in override_paths(host.overrides)):
                problems.add(("overrides", host.name, *field), message, near=("overrides", host.name))
            else:
                problems.add(("target",), f"{message} (the profile's {cluster[0]}.cluster: every host's)")
    if not problems.found:
        _check_groups(checked, base, problems)
    if problems.found:
        raise ProfileError(_sorted(problems.found))
    r = spec.router
    return Fleet(
        spec.name,
        source,
        Path(base.source).resolve(),
        tuple(hosts),
        replace(rollout, warm_prompts=warm[0], hot_prompts=warm[1]),  # type: ignore[type-var]
        RouterPlacement(r.kind, r.version, r.host, r.port, r.policy or DEFAULT_POLICY, r.policy is not None),
        data["inventory"],
        lines,
        spec.kubernetes,
        target=spec.target,
        slurm=spec.slurm if spec.target == "slurm" else None,
    )


def _fleet_words(message: str) -> str:
    """The YAML reader's words (it reads profiles too) said of a fleet file."""
    if message == "the profile is empty":
        return "the fleet file is empty"
    return message.replace("(apiVersion, name, model, ...)", "(apiVersion, kind, name, profile, inventory, ...)")


def _fixed_overrides(data: Any, problems: _Problems) -> Any:
    """`data` without the override keys that name a field hosts may not set differently (each refused by name):
    the schema would only say "unknown key" of them."""
    if not isinstance(data, dict) or not isinstance(data.get("overrides"), dict):
        return data
    profile_fields = {f.alias or n: f for n, f in ProfileSchema.model_fields.items()}
    allowed = "hosts may differ only in " + ", ".join(OVERRIDABLE)
    kept: dict[str, Any] = {}
    for host, tree in data["overrides"].items():
        if not isinstance(tree, dict):
            kept[host] = tree
            continue
        kept[host] = {}
        for key, value in tree.items():
            nested = isinstance(value, dict) and key in ("serve", "model", "rpc", "vllm", "sglang")
            inner = {k: v for k, v in value.items() if f"{key}.{k}" in OVERRIDABLE} if nested else value
            for k in value if nested else {}:
                if f"{key}.{k}" not in OVERRIDABLE:
                    problems.add(
                        ("overrides", host, key, k),
                        f"{key}.{k} cannot differ between hosts: every host serves the profile's value ({allowed})",
                    )
            if key == "gpus" or nested:
                kept[host][key] = inner
            elif key in profile_fields:
                problems.add(
                    ("overrides", host, key),
                    f"{key} cannot differ between hosts: every host serves the profile's value ({allowed})",
                )
            else:
                kept[host][key] = value  # not a profile field: the schema says "unknown key" with a suggestion
    return {**data, "overrides": kept}


def _secret_values(data: Any, problems: _Problems) -> Any:
    """`data` without a value written where kubernetes.secrets names a Secret (refused by name): the schema would
    quote it in its message ("expected a mapping, got 'hf_...'"), and a secret is never printed."""
    section = data.get("kubernetes") if isinstance(data, dict) else None
    secrets = section.get("secrets") if isinstance(section, dict) else None
    if not isinstance(secrets, dict) or all(isinstance(v, dict) or v is None for v in secrets.values()):
        return data
    kept = {}
    for key, value in secrets.items():
        if isinstance(value, dict) or value is None:
            kept[key] = value
        else:
            problems.add(
                ("kubernetes", "secrets", key),
                "must name a Secret of the namespace, {name: SECRET, key: KEY}: a fleet file never holds a "
                "secret's value (what is written here is not shown)",
            )
    return {**data, "kubernetes": {**section, "secrets": kept}}


def _rollout(spec: FleetFile, inventory: Inventory, problems: _Problems) -> RolloutPolicy | None:
    r = spec.rollout
    hosts = inventory.members(r.hosts)
    if hosts is None:
        groups = ", ".join(sorted(inventory.groups))
        problems.add(("rollout", "hosts"), f"no group or host {r.hosts!r} in the inventory (groups: {groups})")
        return None
    if not hosts:
        problems.add(("rollout", "hosts"), f"group {r.hosts!r} has no hosts: a fleet serves from at least one")
        return None
    canary: tuple[str, ...] = hosts[:1]
    if r.canary is not None:
        named = inventory.members(r.canary)
        if named is None:
            problems.add(
                ("rollout", "canary"),
                f"no group or host {r.canary!r} in the inventory (groups: {', '.join(sorted(inventory.groups))})",
            )
            return None
        outside = [h for h in named if h not in hosts]
        if outside:
            problems.add(
                ("rollout", "canary"), f"{outside[0]!r} is in the canary but not in the rollout's hosts ({r.hosts!r})"
            )
            return None
        canary = tuple(h for h in hosts if h in named)
        if len(canary) == len(hosts) and len(hosts) > 1:
            # A canary is the few hosts a bad change reaches first; all of them leaves nothing it protects.
            problems.add(
                ("rollout", "canary"),
                f"{r.canary!r} is every host of the rollout: a canary is the "
                "first few hosts, so a bad change stops before it reaches the rest",
            )
            return None
    if r.max_unavailable >= len(hosts):
        # Out of the router at once = every host: the fleet would serve nothing for a batch.
        problems.add(
            ("rollout", "max_unavailable"),
            f"{r.max_unavailable} of {len(hosts)} host(s) out at once "
            "would take every host down: at most "
            + (
                f"{len(hosts) - 1}, so one keeps serving"
                if len(hosts) > 1
                else "0 are possible with one host: add a host (a fleet rolls behind a router without downtime)"
            ),
            near=("rollout", "hosts") if ("rollout", "hosts") in problems.lines else ("inventory",),
        )
        return None
    return RolloutPolicy(hosts, canary, r.max_unavailable, r.on_failure, parse_duration(str(r.drain_timeout)))


def _check_router(spec: FleetFile, inventory: Inventory, problems: _Problems) -> None:
    """router.host is the address `fleet apply` binds the router to on the controller (cli/fleet_router.py): it starts
    the router there and nowhere else, so an inventory host's name (once accepted, then bound on the controller,
    where it is no address of its own) is refused with what it can be."""
    import ipaddress

    where = spec.router.host
    try:
        ipaddress.ip_address(where)
    except ValueError:
        pass
    else:
        return
    if where == "localhost":
        return
    what = "an inventory host" if inventory.members(where) == (where,) else "neither localhost nor an IP address"
    problems.add(
        ("router", "host"),
        f"{where!r} is {what}: the router runs on the controller (the machine running kimik3 fleet), bound to "
        "router.host there: localhost, or an IP address of the controller (0.0.0.0 or :: for every interface); "
        "a router on an inventory host is not built",
    )


def _check_target(spec: FleetFile, problems: _Problems) -> None:
    if spec.slurm is not None and spec.target != "slurm":
        # A section the target does not read would be silently ignored: the operator meant one of the two.
        problems.add(
            ("slurm",), f"a slurm: section is read by target: slurm only (this fleet's target is {spec.target})"
        )


def _base_profile(
    spec: FleetFile, source: str, read_text: Callable[[str], str], problems: _Problems
) -> LoadedProfile | None:
    path = Path(source).resolve().parent / spec.profile
    try:
        loaded = parse_profile(read_text(str(path)), source=str(path))
        # rule: pinned-to-serve
        # Every host must serve the same bytes: a branch or tag resolved by each host at its own time would not be
        # one deployment. Each host's plan refuses it too; refused here before any host is asked.
        problems.found += [
            ProfileProblem(
                loaded.source,
                line_for(pin.field, loaded.lines) or 1,
                render_path(pin.field),
                unpinned_message(pin, loaded.source),
            )
            for pin in unpinned(loaded.profile)
        ]
        return loaded
    except InputError as exc:
        problems.add(("profile",), f"{exc} (the profile is relative to the fleet file)")
    except ProfileError as exc:
        problems.found += list(exc.problems)  # the profile's own problems, in its own file and lines
    return None


def _warm_prompts(
    spec: FleetFile, source: str, read_text: Callable[[str], str], problems: _Problems
) -> tuple[str | None, tuple[dict[str, Any], ...]]:
    """(the hot prompts file, its prompts as chat request bodies); each problem at the field, or in that file."""
    if spec.rollout.warm_prompts is None:
        return None, ()
    path = Path(source).resolve().parent / spec.rollout.warm_prompts
    try:
        return str(path), parse_hot_prompts(read_text(str(path)), str(path))
    except InputError as exc:
        problems.add(("rollout", "warm_prompts"), f"{exc} (the file is relative to the fleet file)")
    except ProfileError as exc:
        problems.found += list(exc.problems)  # in the prompts file, at their own lines
    return None, ()


def _host(spec: FleetFile, inventory: Inventory, name: str, base: LoadedProfile, problems: _Problems) -> FleetHost:
    entry = next(h for h in inventory.hosts if h.name == name)
    overrides = spec.overrides[name].model_dump(exclude_none=True) if name in spec.overrides else {}
    variables = dict(entry.vars)
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        try:
            shlex.split(str(variables.get(var) or ""))
        except ValueError as exc:  # an unclosed quote: ssh would never be run with it
            problems.add(
                ("inventory", *entry.path, var),
                f"{exc}: write the ssh options as a shell would read them",
                near=("inventory", *entry.path),
            )
    folder = variables.get("kimik3_profile_dir") or str(PurePosixPath(Path(base.source).parent))
    command = variables.get("kimik3_command") or "kimik3"
    text = with_overrides(base.text, overrides) if overrides else base.text
    loaded = base
    try:
        if overrides:
            loaded = parse_profile(text, source=f"{base.source} (host {name})")
        text = with_absolute_paths(text, loaded.profile, folder)
        loaded = parse_profile(text, source=f"{base.source} (host {name})")
    except ProfileError as exc:
        for problem in exc.problems:
            _host_problem(name, overrides, problem, problems)
    return FleetHost(
        name,
        str(variables.get("ansible_host") or name),
        variables.get("ansible_user"),
        variables.get("ansible_port"),
        entry.groups,
        variables,
        overrides,
        text,
        loaded.profile,
        (command,) if isinstance(command, str) else tuple(command),
        folder,
    )


def _field_path(rendered: str) -> FieldPath:
    return tuple(int(p[1]) if p[1] else p[0] for p in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", rendered))


def _host_problem(name: str, overrides: Mapping[str, Any], problem: ProfileProblem, problems: _Problems) -> None:
    """A problem of a host's effective profile: at the override that caused it when one did, else as the profile
    reads (the host named)."""
    path = _field_path(problem.field)
    if any(path[: len(o)] == o for o in override_paths(overrides)):
        problems.add(("overrides", name, *path), f"{problem.message} (host {name}'s effective profile)")
    else:
        problems.found.append(ProfileProblem(problem.source, problem.line, problem.field, problem.message))


def _check_groups(hosts: tuple[FleetHost, ...], base: LoadedProfile, problems: _Problems) -> None:
    """A member's host (an RPC worker's, a cluster node's) is one group's only (fleet/groups.py): each conflict at
    the member's `docker`, in the fleet file when the host's overrides name its members, else in the profile (every
    host then shares them)."""
    for found in conflicts(hosts):
        where: FieldPath = found.field
        host = next(h for h in hosts if h.name == found.host)
        if any(where[: len(o)] == o for o in override_paths(host.overrides)):
            problems.add(("overrides", found.host, *where), found.message, near=("overrides", found.host))
        else:
            problems.found.append(
                ProfileProblem(
                    base.source,
                    line_for(where, base.lines) or 1,
                    render_path(where),
                    f"{found.message} (host {found.host}: the profile's workers are every host's)",
                )
            )


def _sorted(items: list[ProfileProblem]) -> list[ProfileProblem]:
    return sorted(items, key=lambda p: (p.source, p.line if p.line is not None else 0))
