"""The fleet file's schema: pydantic v2 models (per-field checks, no I/O), and its JSON Schema.

A fleet file says which profile N hosts serve, how each host differs (only what may differ), the hosts as a standard
Ansible YAML inventory, the rollout policy and the router in front. Cross-field checks (groups the rollout names,
the policy against the host count, each host's effective profile) are fleet/source.py's."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from kimik3_reconciler.fleet.targets.kubernetes_section import KubernetesSection
from kimik3_reconciler.fleet.targets.slurm_section import SlurmSection
from kimik3_reconciler.model.durations import parse_duration

# _matching: the profile's constrained-string type (pattern in the JSON Schema, the message as written)
from kimik3_reconciler.model.profile_schema import ProfileName, _matching, refuse

# strict, as a profile: `port: "22"` is a mistake worth naming, not something to coerce.
_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True)
# Host vars: Ansible's own (ansible_host, ansible_user, ansible_port) are checked; any other var is the
# operator's (their playbooks read it) and passes through as written.
_VARS_CONFIG = ConfigDict(extra="allow", frozen=True, strict=True)

# Ansible's group names are Python identifiers (it warns about '-' and renames them); host names are inventory
# names: what `ansible_host` defaults to, so a host name, an IPv4 address or an IPv6 literal's characters.
GROUP_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
HOST_NAME = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,252}"
# The fields a host may set differently from the profile (its overrides); everything else every host serves as the
# profile writes it, or the hosts would not be replicas of one deployment.
OVERRIDABLE = ("gpus", "serve.port", "serve.host", "model.cache_dir", "rpc.workers", "vllm.cluster", "sglang.cluster")
# Where the replicas run (fleet/targets/): Ansible over SSH (the default), or jobs of a Slurm cluster.
TARGETS = ("ansible", "slurm")
# smg's load-balancing policies (`smg --policy`; shared/TESTING.md §12: cache_aware is its default) and kimik3's own
# router's (slots: fleet/router_layout.py), the default where the router runs on the controller.
SMG_POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
ROUTER_POLICIES = (*SMG_POLICIES, "slots")


GroupName = _matching(GROUP_NAME, "an Ansible group name: letters, digits and '_', not starting with a digit")
HostName = _matching(HOST_NAME, "an inventory host name: letters, digits, '.', '-', '_' or ':' (a name or an address)")
MemberName = _matching(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}", "a group or host name of the inventory")
Port = Annotated[int, Field(ge=1, le=65535)]


def _check_command(value: Any) -> Any:
    # One word: ssh runs it as one argv word (shlex.join), so "kimik3 --state-dir /srv" would name a program so called.
    if isinstance(value, str) and re.fullmatch(r"\S+", value):
        return value
    if isinstance(value, list) and value and all(isinstance(w, str) and w for w in value):
        return value
    raise refuse(
        "a path to kimik3 (one word), or an argv list: its arguments as a list, e.g. "
        "[/opt/k3/bin/kimik3, --state-dir, /srv]"
    )


KimikCommand = Annotated[
    Any,
    AfterValidator(_check_command),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^\S+$"},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
            ]
        }
    ),
]
AbsoluteDir = _matching(r"/.*", "must be an absolute path on that host (what the profile's relative paths mean there)")
PinnedVersion = _matching(
    r"[0-9]+\.[0-9]+\.[0-9]+",
    "must be one exact release, e.g. \"1.13.0\" (quote it): a range or 'latest' moves under a running fleet",
)


def _check_duration(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise refuse("must be a duration: seconds, or e.g. 30s, 2m, 1h30m")
    try:
        parse_duration(str(value))
    except ValueError as exc:
        raise refuse(str(exc)) from None
    return value


DurationText = Annotated[
    int | str,
    AfterValidator(_check_duration),
    WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h))+$"}]}
    ),
]


class HostVars(BaseModel):
    """An inventory host's (or group's) vars: Ansible's connection vars checked, the rest kept as written."""

    model_config = _VARS_CONFIG
    ansible_host: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="the address SSH connects to (default: the inventory name)"
    )
    ansible_user: Annotated[str, Field(min_length=1)] | None = Field(None, description="the SSH user")
    ansible_port: Port | None = Field(None, description="the SSH port (default: ssh's, 22)")
    ansible_ssh_private_key_file: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="the SSH key (ssh -i)"
    )
    ansible_ssh_common_args: str | None = Field(None, description="more ssh options, e.g. -o UserKnownHostsFile=F")
    ansible_ssh_extra_args: str | None = Field(None, description="ssh options for ssh only (as Ansible)")
    kimik3_command: KimikCommand | None = Field(
        None,
        description="how kimik3 is run on the host: a path or an argv list, e.g. [/opt/kimik3/bin/kimik3] "
        "(default: kimik3 on the login PATH)",
    )
    kimik3_profile_dir: AbsoluteDir | None = Field(
        None,
        description="the folder the profile's relative paths mean on this host (absolute; default: the "
        "profile's folder here)",
    )


class InventoryGroup(BaseModel):
    """One group of a YAML inventory: its hosts, child groups and vars (Ansible's `hosts`/`children`/`vars`)."""

    model_config = _CONFIG
    hosts: dict[HostName, HostVars | None] | None = None
    children: dict[GroupName, InventoryGroup | None] | None = None
    vars: HostVars | None = None


class ServeOverrides(BaseModel):
    """What of `serve:` may differ between hosts: the port, and the address (an IP on that host)."""

    model_config = _CONFIG
    port: Any | None = Field(None, description="serve.port on this host")
    host: Any | None = Field(None, description="serve.host on this host (loopback, or an IP of this host)")


class ModelOverrides(BaseModel):
    """What of `model:` may differ between hosts: where the hub cache is."""

    model_config = _CONFIG
    cache_dir: Any | None = Field(None, description="model.cache_dir on this host")


class RpcOverrides(BaseModel):
    """A host's own RPC workers (a llama.cpp main server and its workers are one replica)."""

    model_config = _CONFIG
    workers: Any = Field(description="rpc.workers of this host's main server (as in a profile)")


class ClusterOverrides(BaseModel):
    """A host's own cluster (vllm.cluster / sglang.cluster: a replica over several hosts, this host its head)."""

    model_config = _CONFIG
    cluster: Any = Field(description="the cluster this host heads (as in a profile: bind, port, nodes)")


class HostOverrides(BaseModel):
    """The fields this host sets differently from the profile (OVERRIDABLE); each is checked in the host's
    effective profile, as a profile's own field is."""

    model_config = _CONFIG
    gpus: Any | None = Field(None, description="gpus on this host: all, none, or a list of indices/UUIDs")
    serve: ServeOverrides | None = None
    model: ModelOverrides | None = None
    rpc: RpcOverrides | None = None
    vllm: ClusterOverrides | None = None
    sglang: ClusterOverrides | None = None


class RolloutSpec(BaseModel):
    """How `kimik3 fleet apply` rolls a change: batches, the canary, what a failure does, how long a drain waits."""

    model_config = _CONFIG
    hosts: MemberName = Field("all", description="the inventory group (or host) that serves the profile")
    canary: MemberName | None = Field(None, description="a group or host rolled first, alone (default: the first host)")
    max_unavailable: Annotated[int, Field(ge=1)] = Field(
        1, description="hosts out of the router at once: the batch size (the rest keep serving)"
    )
    on_failure: Literal["halt", "continue"] = Field(
        "halt", description="a host failing a gate is reverted; halt stops the rollout there, continue goes on"
    )
    drain_timeout: DurationText = Field(
        "60s", description="how long a host out of the router may finish its in-flight requests"
    )
    warm_prompts: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="a file (relative to this one) of the operator's hot prompts (system prompts, tool schemas) a "
        "rolled host prefills before it rejoins the router where its slots' caches are not kept (fleet/hot_prompts.py)",
    )


class RouterSpec(BaseModel):
    """The router in front of the hosts: smg (the SGLang model gateway), pinned, where it runs, its port and policy."""

    model_config = _CONFIG
    kind: Literal["smg"] = Field("smg", description="smg: the SGLang model gateway (PyPI `smg`)")
    version: PinnedVersion = Field(description='the exact smg release, e.g. "1.13.0"')
    host: Annotated[str, Field(min_length=1)] = Field(
        "localhost",
        description="the address the router binds on the controller (the machine running kimik3 fleet): localhost, or "
        "an IP address of the controller (0.0.0.0 or :: for every interface)",
    )
    port: Port = 30000
    policy: Literal[ROUTER_POLICIES] | None = Field(  # type: ignore[valid-type]
        None,
        description="slots: kimik3's router in front of smg, each conversation sent where the servers said they hold "
        "its prompt (the default; `fleet render --target kubernetes`: cache_aware); else smg's own --policy",
    )


class FleetFile(BaseModel):
    """A fleet: one profile served by the hosts of an Ansible inventory, rolled out behind a router."""

    model_config = _CONFIG
    api_version: Literal["kimik3/v1"] = Field(alias="apiVersion")
    kind: Literal["Fleet"]
    name: ProfileName
    profile: Annotated[str, Field(min_length=1)] = Field(
        description="the profile the hosts serve (relative to this file)"
    )
    inventory: dict[GroupName, InventoryGroup | None] = Field(
        description="the hosts, as an Ansible YAML inventory (top-level groups, usually `all:`)", min_length=1
    )
    overrides: dict[HostName, HostOverrides] = Field(
        default_factory=dict, description=f"per host, what differs from the profile ({', '.join(OVERRIDABLE)})"
    )
    rollout: RolloutSpec = RolloutSpec()
    router: RouterSpec
    target: Literal[TARGETS] = Field(  # type: ignore[valid-type]
        "ansible", description="what runs the replicas: ansible (kimik3 over SSH) or slurm (a job per replica)"
    )
    slurm: SlurmSection | None = Field(None, description="target: slurm: where its jobs go (optional)")
    kubernetes: KubernetesSection | None = Field(
        None, description="what `kimik3 fleet render --target kubernetes` needs beside the profile (optional)"
    )


InventoryGroup.model_rebuild()


def fleet_json_schema() -> dict[str, Any]:
    """The JSON Schema of a fleet file."""
    schema = FleetFile.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "kimik3/v1/fleet", **schema}
