"""`kimik3 fleet apply`'s rollout as an Ansible playbook and inventory: data (dicts dumped as YAML/JSON), never a
shell string; every command is an `argv` list, and the profile text reaches each host on the command's stdin from
a file on the controller (`lookup('file')`: its result is not templated again, so a `{{` in a profile stays text).

One play, `serial` = the policy's batch sizes (the canary batch first), `order: inventory` over an inventory
written in batch order, `any_errors_fatal` + `max_fail_percentage: 0`: a host that fails halts the rollout after
its rescue. Per host:

  router: out       (controller) the host leaves the router; then until its server's own in-flight count (its
                    /metrics) is 0, up to the drain timeout; refused when fewer than the policy's floor would stay
                    in rotation; then its busiest slots saved where model and context stay (cli/fleet_warm.py)
  gate: apply       `kimik3 apply` there (its own health wait and verify; a failure reverts to the last good
                    profile and exits non-zero)
  gate: converged   `kimik3 plan --detailed-exitcode` there exits 0: the server runs the fleet profile's fingerprint
  gate: verify      `kimik3 verify` there
  router: in        (controller) warmed (its slots restored, or the declared hot prompts prefilled), back in
                    rotation, then until the router sends it traffic
rescue (a gate failed): router: in again (the reverted server), the failure recorded, then `fail` naming host and
gate: the playbook stops.
With `Install`, a first play installs kimik3 on every host (all at once: nothing is out of the router yet). Then
every host of the site serves its verified model files (`mirror_play`), and each host's apply asks the others
(`kimik3_peers`, in rollout order) before the hub; `mirror_stop_playbook` ends them after the rollout.
Pure: no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kimik3_reconciler.fleet.host_vars import MIRROR_PORT

ROLLOUT_GROUP = "kimik3_rollout"
SITE_GROUP = "kimik3_site"  # every host of the fleet: each serves its verified model files to the others
MIRROR_LIFETIME_S = 6 * 3600  # a mirror ends itself after this long (a controller killed midway never stops it)
GATES = ("apply", "converged", "verify")


@dataclass(frozen=True)
class RolloutHost:
    """A host as the playbook needs it: its inventory name and connection vars, the argv that runs kimik3 there,
    the URL the router reaches its server at, and the controller file holding its effective profile."""

    name: str
    connection: dict  # ansible_host, ansible_user, ansible_port, ansible_ssh_* ... (and kimik3_venv): as they are
    kimik3_command: tuple[str, ...]
    worker_url: str
    profile_file: str
    in_flight_series: tuple[str, ...] = ()  # the server's gauges of requests it runs and queues (its /metrics)
    mirror_port: int = MIRROR_PORT
    peers: tuple[str, ...] = ()  # the other hosts' mirrors, in rollout order: asked for model files before the hub


@dataclass(frozen=True)
class RouterStep:
    """The controller-side command (argv prefix) the playbook runs for router steps, and their settings."""

    argv: tuple[str, ...]  # e.g. (python, -m, kimik3_reconciler, --state-dir, D, fleet, router-step)
    router_url: str
    metrics_url: str
    drain_timeout_s: float
    min_serving: int
    traffic_timeout_s: float = 30.0
    warm_prompts: str | None = (
        None  # the fleet's hot prompts file (controller path): prefilled where slots are not kept
    )


def inventory(hosts: Sequence[RolloutHost], batches: Sequence[Sequence[str]]) -> dict:
    """Every host of the fleet in the site group (with its vars: each serves its files to the others during the
    rollout, a host rolled before included), the rolled ones in the rollout group; both in batch order (the play's
    `order: inventory` then follows the batches), the hosts not rolled now (done by a run that was stopped) last."""
    by_name = {h.name: h for h in hosts}
    rolled = [name for batch in batches for name in batch]
    ordered = [by_name[name] for name in rolled] + [h for h in hosts if h.name not in rolled]
    return {
        "all": {
            "children": {
                SITE_GROUP: {
                    "hosts": {
                        h.name: {
                            **h.connection,
                            "kimik3_command": list(h.kimik3_command),
                            "kimik3_worker_url": h.worker_url,
                            "kimik3_profile_file": h.profile_file,
                            "kimik3_in_flight_series": ",".join(h.in_flight_series),
                            "kimik3_mirror_port": h.mirror_port,
                            "kimik3_peers": ",".join(h.peers),
                        }
                        for h in ordered
                    }
                },
                ROLLOUT_GROUP: {"hosts": {name: {} for name in rolled}},
            }
        }
    }


def _controller(step: RouterStep, *words: str) -> dict:
    return {
        "ansible.builtin.command": {
            "argv": [
                *step.argv,
                *words,
                "--router",
                step.router_url,
                "--metrics",
                step.metrics_url,
                "--host",
                "{{ inventory_hostname }}",
                "--worker",
                "{{ kimik3_worker_url }}",
            ]
        },
        "delegate_to": "localhost",
        "changed_when": True,
    }


def _kimik3(*words: str) -> dict:
    """kimik3 on the host with `words`, the host's effective profile on stdin."""
    return {
        "ansible.builtin.command": {
            "argv": "{{ kimik3_command + " + repr(list(words)) + " }}",
            "stdin": "{{ lookup('ansible.builtin.file', kimik3_profile_file) }}",
        }
    }


def _on_host(gate: str, *words: str) -> dict:
    task = {"name": f"gate: {gate}", **_kimik3(*words), "changed_when": gate == "apply"}
    if gate == "apply":  # the model files from the site's hosts first (KIMIK3_PEERS: adapters/hf_hub.py), the hub after
        task["environment"] = {"KIMIK3_PEERS": "{{ kimik3_peers }}"}
    return task


def mirror_play(lifetime_s: int = MIRROR_LIFETIME_S) -> dict:
    """Every host serves its verified model files to the site (cli/fleet_mirror.py) before any host is rolled: the
    first host rolled fetches from the hub, the next ones from it. Hosts outside the rollout (rolled by an earlier,
    stopped run) serve too. A host whose mirror does not start only costs hub bytes: the rollout goes on."""
    return {
        "name": "model mirrors",
        "hosts": SITE_GROUP,
        "gather_facts": False,
        "tasks": [
            {
                "name": "mirror: start",
                "ansible.builtin.command": {
                    # The port is a host var: an expression inside the argv's, never a nested "{{ }}" (Ansible
                    # does not template a template's result again: it would reach kimik3 as that text).
                    "argv": "{{ kimik3_command + ['fleet', 'mirror', 'start', '--port', kimik3_mirror_port | string, "
                    f"'--lifetime', '{lifetime_s}', '/dev/stdin'] }}}}",
                    "stdin": "{{ lookup('ansible.builtin.file', kimik3_profile_file) }}",
                },
                "ignore_errors": True,
                "ignore_unreachable": True,
                "changed_when": True,
            }
        ],
    }


def mirror_stop_playbook() -> list[dict]:
    """Run by `fleet apply` after the rollout, whatever its outcome: every host's mirror stopped."""
    return [
        {
            "name": "model mirrors: stop",
            "hosts": SITE_GROUP,
            "gather_facts": False,
            "tasks": [
                {
                    "name": "mirror: stop",
                    "ansible.builtin.command": {"argv": "{{ kimik3_command + ['fleet', 'mirror', 'stop'] }}"},
                    "ignore_errors": True,
                    "ignore_unreachable": True,
                    "changed_when": True,
                }
            ],
        }
    ]


@dataclass(frozen=True)
class Install:
    """kimik3 installed on every host before the rollout: a wheelhouse (kimik3's wheel and its dependencies:
    `pip wheel . -w DIR`), packed by the controller into one tar file (one transfer per host: Ansible copies a
    folder file by file, minutes for ~70 files on the rig), unpacked to `<kimik3_venv>.wheels/` there; a venv at
    the host var `kimik3_venv`; the dependencies from the copy (`--no-index`: the host needs no package index);
    then kimik3's own wheel forced over whatever was there (one pinned build: the same version number with other
    code reinstalls)."""

    archive: str  # controller path of the wheelhouse's tar
    wheel: str  # kimik3's wheel file name in it


def install_play(install: Install) -> dict:
    wheels = "{{ kimik3_venv }}.wheels"
    pip = "{{ kimik3_venv }}/bin/pip"
    return {
        "name": f"install {install.wheel}",
        "hosts": SITE_GROUP,
        "gather_facts": False,
        "any_errors_fatal": True,
        "tasks": [
            {"name": "kimik3: wheels folder", "ansible.builtin.file": {"path": wheels, "state": "directory"}},
            {"name": "kimik3: wheels", "ansible.builtin.unarchive": {"src": install.archive, "dest": wheels}},
            {
                "name": "kimik3: venv",
                "ansible.builtin.command": {
                    "argv": ["python3", "-m", "venv", "{{ kimik3_venv }}"],
                    "creates": "{{ kimik3_venv }}/bin/python",
                },
            },
            {
                "name": "kimik3: dependencies",
                "ansible.builtin.command": {
                    "argv": [pip, "install", "-q", "--no-index", "--find-links", wheels, f"{wheels}/{install.wheel}"]
                },
                "changed_when": True,
            },
            {
                "name": "kimik3: this build",
                "ansible.builtin.command": {
                    "argv": [
                        pip,
                        "install",
                        "-q",
                        "--no-index",
                        "--no-deps",
                        "--force-reinstall",
                        f"{wheels}/{install.wheel}",
                    ]
                },
                "changed_when": True,
            },
        ],
    }


def image_tasks(first: str, registry: str) -> tuple[list[dict], list[dict]]:
    """Images once per site (cli/fleet_image.py): (before `router: out`, after `router: in`). The first host rolled
    pushes the image its server runs (once it passed every gate) to `registry`; every later host pulls that
    reference, by digest, while it still serves, so its apply finds the image and builds nothing. A host rolled in
    the same batch as the first one has no reference yet: it builds (or finds) its own."""
    published = f"hostvars[{first!r}]['kimik3_image']"
    pull = {
        "name": "image: pull",
        "ansible.builtin.command": {"argv": "{{ kimik3_command + ['fleet', 'image', 'pull', " + published + "] }}"},
        "when": f"inventory_hostname != {first!r} and {published} is defined",
        "changed_when": True,
    }
    push = {
        "name": "image: push",
        **_kimik3("fleet", "image", "push", "--registry", registry, "/dev/stdin"),
        "when": f"inventory_hostname == {first!r}",
        "register": "kimik3_pushed",
        "changed_when": True,
    }
    share = {
        "name": "image: the reference the others pull",
        "ansible.builtin.set_fact": {"kimik3_image": "{{ (kimik3_pushed.stdout | from_json).ref }}"},
        "when": f"inventory_hostname == {first!r}",
    }
    return [pull], [push, share]


def playbook(
    name: str,
    batches: Sequence[Sequence[str]],
    step: RouterStep,
    install: Install | None = None,
    registry: str | None = None,
) -> list[dict]:
    """The rollout play (module docstring), after the install play when kimik3 is installed by this run; with
    `registry` (the site's), the image is pushed once and pulled by digest (`image_tasks`)."""
    drain = [
        "--drain-timeout",
        f"{step.drain_timeout_s:g}",
        "--min-serving",
        str(step.min_serving),
        "--in-flight-series",
        "{{ kimik3_in_flight_series }}",
    ]
    # The warm step (cli/fleet_warm.py): the host's new profile decides what is kept of its server's prompt cache.
    warm = ["--profile", "{{ kimik3_profile_file }}"]
    warm += ["--warm-prompts", step.warm_prompts] if step.warm_prompts else []
    drain += warm
    back = ["--traffic-timeout", f"{step.traffic_timeout_s:g}", *warm]
    before, after = image_tasks(batches[0][0], registry) if registry and batches else ([], [])
    return ([install_play(install)] if install else []) + [
        mirror_play(),
        {
            "name": f"kimik3 fleet apply {name}",
            "hosts": ROLLOUT_GROUP,
            "gather_facts": False,
            "order": "inventory",
            "serial": [len(batch) for batch in batches],
            "any_errors_fatal": True,
            "max_fail_percentage": 0,
            "tasks": [
                *before,
                {"name": "router: out", **_controller(step, "out", *drain)},
                {
                    "block": [
                        _on_host("apply", "apply", "/dev/stdin"),
                        _on_host("converged", "plan", "--detailed-exitcode", "/dev/stdin"),
                        _on_host("verify", "verify", "/dev/stdin"),
                    ],
                    "rescue": [
                        {
                            "name": "router: in (the reverted server)",
                            **_controller(step, "in", *back, "--failed-gate", "{{ ansible_failed_task.name }}"),
                        },
                        {
                            "name": "halt",
                            "ansible.builtin.fail": {
                                "msg": "{{ inventory_hostname }} failed {{ ansible_failed_task.name }}: rollout halted"
                            },
                        },
                    ],
                },
                {"name": "router: in", **_controller(step, "in", *back)},
                *after,
            ],
        },
    ]
