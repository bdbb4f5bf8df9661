"""A fleet: one profile served by N hosts behind a router (issue 36); a floor above one host's apply.

The fleet composes the hosts' own plans (each made on its host by `kimik3 plan`) and adds only what no host can
know: the order, the capacity floor, the router, the bytes between hosts. Values and checks here are pure; every
effect (SSH, Ansible, the router) is an adapter the CLI wires in.

API (stable: `fleet apply` builds on it): `parse_fleet(text, source, read_text) -> Fleet`, `is_fleet_text(text)`;
`Fleet`, `FleetHost`, `RolloutPolicy` (`batches()`, `min_serving`), `RouterPlacement`; `fleet_json_schema()`.
"""

from kimik3_reconciler.fleet.schema import OVERRIDABLE, fleet_json_schema
from kimik3_reconciler.fleet.source import parse_fleet
from kimik3_reconciler.fleet.values import Fleet, FleetHost, RolloutPolicy, RouterPlacement
from kimik3_reconciler.model.fleet_kind import is_fleet_text

__all__ = [
    "OVERRIDABLE",
    "Fleet",
    "FleetHost",
    "RolloutPolicy",
    "RouterPlacement",
    "fleet_json_schema",
    "is_fleet_text",
    "parse_fleet",
]
