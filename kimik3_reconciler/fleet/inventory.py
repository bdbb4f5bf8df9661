"""An Ansible YAML inventory read as Ansible reads it: hosts, the groups each is in, its vars; PURE.

Vars: a group's apply to its hosts and its children's hosts, the deeper group's over its parent's, the host's own
last (Ansible's precedence, less its alphabetical tie-break between sibling groups: here the later one in the file
wins). Every host is in `all`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kimik3_reconciler.model.profile_rules import FieldPath


@dataclass(frozen=True)
class InventoryHost:
    """A host as the inventory defines it: its name, the groups it is in (outermost first), its merged vars, and
    where it is first written (the inventory path of its entry)."""

    name: str
    groups: tuple[str, ...]
    vars: Mapping[str, Any] = field(default_factory=dict)
    path: FieldPath = ()


@dataclass(frozen=True)
class Inventory:
    """The hosts in file order and each group's hosts (`all` included)."""

    hosts: tuple[InventoryHost, ...]
    groups: Mapping[str, tuple[str, ...]]

    def members(self, name: str) -> tuple[str, ...] | None:
        """The hosts of group `name`, or `name` alone when it is a host; None when it is neither."""
        if name in self.groups:
            return self.groups[name]
        return (name,) if any(h.name == name for h in self.hosts) else None


def read_inventory(tree: Mapping[str, Any]) -> Inventory:
    """`tree`: the inventory as written (top-level group -> {hosts, children, vars}), validated by the schema. A group
    may be written in several places (`children: {canary:}` names the group defined elsewhere): its hosts, children
    and vars are the union of them all."""
    own: dict[str, dict[str, dict[str, Any]]] = {}  # group -> host -> vars written under that group
    children: dict[str, list[str]] = {}
    group_vars: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    path_of: dict[str, FieldPath] = {}

    def collect(name: str, group: Mapping[str, Any] | None, path: FieldPath) -> None:
        group = group or {}
        own.setdefault(name, {})
        children.setdefault(name, [])
        group_vars[name] = {**group_vars.get(name, {}), **dict(group.get("vars") or {})}
        for host, host_vars in (group.get("hosts") or {}).items():
            if host not in path_of:
                order.append(host)
                path_of[host] = (*path, "hosts", host)
            own[name][host] = {**own[name].get(host, {}), **dict(host_vars or {})}
        for child, child_group in (group.get("children") or {}).items():
            if child not in children[name]:
                children[name].append(child)
            collect(child, child_group, (*path, "children", child))

    for name, group in tree.items():
        collect(name, group, (name,))
    children.setdefault("all", [])
    children["all"] += [g for g in tree if g != "all" and g not in children["all"]]
    own.setdefault("all", {})

    depth: dict[str, int] = {}

    def descend(name: str, level: int, lineage: tuple[str, ...]) -> None:
        if name in lineage:  # a child naming its own ancestor: Ansible refuses the loop; the schema cannot see it
            return
        depth[name] = max(depth.get(name, 0), level)
        for child in children.get(name, []):
            descend(child, level + 1, (*lineage, name))

    descend("all", 0, ())

    def members(name: str, lineage: tuple[str, ...] = ()) -> list[str]:
        if name in lineage:
            return []
        found = list(own.get(name, {}))
        for child in children.get(name, []):
            found += [h for h in members(child, (*lineage, name)) if h not in found]
        return found

    groups = {g: [h for h in order if h in members(g)] for g in depth}
    groups["all"] = list(order)
    hosts = []
    for host in order:
        # stable: file order within a depth
        mine = sorted((g for g in depth if host in groups[g]), key=lambda g: depth[g])
        merged: dict[str, Any] = {}
        for g in mine:
            merged.update(group_vars.get(g, {}))
        for g in mine:
            merged.update(own.get(g, {}).get(host, {}))
        hosts.append(InventoryHost(host, tuple(mine), merged, path_of[host]))
    return Inventory(tuple(hosts), {g: tuple(m) for g, m in groups.items()})
