"""The inventory's vars checked before anything runs, PURE: no secret written inline, and kimik3's own port var.

A fleet file lives in a GitOps repo, and `fleet apply` copies every `ansible_*` var into the run folder's
inventory.json: a password or token written there is in both. kimik3 reaches hosts with SSH keys (`fleet plan`
and `status` run ssh with BatchMode=yes, so a password var would not even be used there)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kimik3_reconciler.model.profile_rules import FieldPath

MIRROR_PORT = 8089  # the model mirror's port on each host, unless the host var kimik3_mirror_port says otherwise
# Ansible's connection and privilege-escalation passwords (its docs' "Connecting to hosts" and become vars).
_SECRET_VARS = frozenset(
    {
        "ansible_password",
        "ansible_ssh_pass",
        "ansible_ssh_password",
        "ansible_become_pass",
        "ansible_become_password",
        "ansible_sudo_pass",
        "ansible_su_pass",
        "ansible_httpapi_pass",
        "ansible_httpapi_password",
    }
)
# As a profile's serve.env (model/profile_rules/no_secrets.py), and Ansible's own `_pass`.
_SECRET_SUFFIXES = ("_token", "_key", "_secret", "_password", "_pass", "_passwd")
NO_SECRETS = (
    "a fleet file never holds a secret (it is committed, and `fleet apply` copies host vars into its run folder): "
    "reach hosts with an SSH key (ansible_ssh_private_key_file or an ssh-agent) and passwordless sudo"
)


def var_entries(tree: Mapping[str, Any]) -> Iterator[tuple[FieldPath, str, Any]]:
    """Every var written in an inventory tree (as the schema validated it): (the path of its key, name, value)."""

    def walk(group: Mapping[str, Any] | None, path: FieldPath) -> Iterator[tuple[FieldPath, str, Any]]:
        group = group or {}
        for name, value in (group.get("vars") or {}).items():
            yield (*path, "vars", name), name, value
        for host, host_vars in (group.get("hosts") or {}).items():
            for name, value in (host_vars or {}).items():
                yield (*path, "hosts", host, name), name, value
        for child, child_group in (group.get("children") or {}).items():
            yield from walk(child_group, (*path, "children", child))

    for name, group in tree.items():
        yield from walk(group, ("inventory", name))


def secret_vars(tree: Mapping[str, Any]) -> Iterator[tuple[FieldPath, str]]:
    """(where, message) for each var that holds a secret; the message never quotes its value."""
    for path, name, value in var_entries(tree):
        lower = name.lower()
        if lower in _SECRET_VARS or (lower.endswith(_SECRET_SUFFIXES) and not _names_no_secret(value)):
            yield path, f"{name} holds a secret; {NO_SECRETS}"


def _names_no_secret(value: Any) -> bool:
    """A value a var named like a secret (`ssh_key`, `use_api_key`) holds that is none: a file's path (the key's
    file, as ansible_ssh_private_key_file holds), a switch, nothing, or a whole Jinja reference Ansible resolves at
    run time (`{{ lookup('env', 'X') }}`, a vault var's name). Ansible's own password vars are refused whatever they
    hold: kimik3 never uses one (SSH keys, passwordless sudo; plan and status run ssh with BatchMode=yes)."""
    if value is None or isinstance(value, bool):
        return True
    text = value.strip() if isinstance(value, str) else ""
    return text.startswith(("/", "~/")) or (text.startswith("{{") and text.endswith("}}"))


def written_at(tree: Mapping[str, Any], host: str, groups: tuple[str, ...], name: str, value: Any) -> FieldPath | None:
    """Where the var `name` the host holds as `value` is written: the host's own entry, else a group's vars of the
    host's (the deepest of those holding that value); None when it is written nowhere (a default)."""
    own, inherited = None, None
    for path, var, held in var_entries(tree):
        if var != name or held != value:
            continue
        if path[-3:-1] == ("hosts", host):
            own = own or path
        elif path[-2] == "vars" and path[-3] in groups:
            inherited = path  # groups are walked outer first: a later one is deeper, as Ansible's precedence
    return own or inherited


def mirror_port(variables: Mapping[str, Any]) -> int | None:
    """The host's model mirror port (kimik3_mirror_port, else MIRROR_PORT); None when the var is no TCP port."""
    port = variables.get("kimik3_mirror_port", MIRROR_PORT)
    # An inventory var is the operator's text: `"8090"` or `true` is a mistake to name, not to coerce.
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        return None
    return port
