"""Kubernetes objects as kimik3 renders them (fleet/targets/kubernetes.py, kubernetes_router.py): the `Manifest`
value, the labels every object carries, the labels LWS gives its pods, and the YAML a GitOps repo commits; PURE."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# LWS labels its pods with these (api/leaderworkerset/v1/leaderworkerset_types.go, lws v0.10.0).
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# A server listens on every address of its pod's own network namespace: its loopback and its pod IP, nothing of the
# node's (docs/operations.md "A fleet on Kubernetes"); the NetworkPolicy admits only the router and its group.
POD_BIND = "0.0.0.0"


@dataclass(frozen=True)
class Manifest:
    """One Kubernetes object: its kind, name and body (what `kubectl apply -f` reads)."""

    kind: str
    name: str
    body: dict[str, Any]

    @property
    def file_name(self) -> str:
        """Its file in the rendered folder, e.g. leaderworkerset-kimi-k3.yaml."""
        return f"{self.kind.lower()}-{self.name}.yaml"


def labels(fleet_name: str, component: str) -> dict[str, str]:
    """The labels of every object and pod of the fleet: kimik3's, this fleet's, and which part it is."""
    return {
        "app.kubernetes.io/name": "kimik3",
        "app.kubernetes.io/instance": fleet_name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "kimik3",
    }


def router_selector(fleet_name: str) -> dict[str, str]:
    """The router's pods: what its Deployment and Service select, and what the servers' NetworkPolicy admits."""
    return {"app.kubernetes.io/instance": fleet_name, "app.kubernetes.io/component": "router"}


def manifest_yaml(manifest: Manifest) -> str:
    """One manifest as YAML (block style, keys in the order rendered): the file a GitOps repo commits."""
    import yaml

    return yaml.safe_dump(json.loads(json.dumps(manifest.body)), sort_keys=False, default_flow_style=False)
