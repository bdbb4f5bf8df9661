"""The router in front of the fleet on Kubernetes: smg (the fleet's pinned router) as a Deployment and a Service, its
workers found by smg's own Kubernetes service discovery (the LeaderWorkerSet's leaders), with the ServiceAccount,
Role and RoleBinding that discovery needs; PURE."""

from __future__ import annotations

from kimik3_reconciler.fleet.targets.kubernetes_objects import (
    POD_BIND,
    SET_NAME_LABEL,
    WORKER_INDEX_LABEL,
    Manifest,
    labels,
    router_selector,
)
from kimik3_reconciler.fleet.values import Fleet
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.router_health import HEALTH, policy_settings

ROUTER_METRICS_PORT = 29000  # smg's Prometheus listener (its default port)


def smg_policy(policy: str) -> str:
    """smg's policy in the router pod: the fleet file's; cache_aware where it leaves the default (slots), which needs
    kimik3's router beside smg, rendered only where it runs on the controller (render_kubernetes refuses it named)."""
    return "cache_aware" if policy == "slots" else policy


def smg_args(fleet: Fleet, profile: Profile) -> list[str]:
    """`smg launch`'s arguments in the router pod: the fleet's port and policy, its workers found by smg's own
    Kubernetes service discovery (the set's leaders: worker index 0; the serving port; this namespace only)."""
    router = fleet.router
    return [
        "launch",
        "--host",
        POD_BIND,
        "--port",
        str(router.port),
        "--prometheus-host",
        POD_BIND,
        "--prometheus-port",
        str(ROUTER_METRICS_PORT),
        "--policy",
        smg_policy(router.policy),
        # smg's regular HTTP router, not `--backend openai` (which sends every request for a model to one worker
        # whatever the policy: adapters/router_smg.py), with the policy's settings of `fleet apply`'s router.
        *policy_settings(smg_policy(router.policy)),
        # The same health checks and breaker as the router of `fleet apply`: a pod that stops answering leaves
        # rotation within seconds, before Kubernetes has marked it unready and smg's discovery has seen that.
        *HEALTH,
        "--service-discovery",
        "--selector",
        f"{SET_NAME_LABEL}={fleet.name}",
        f"{WORKER_INDEX_LABEL}=0",
        "--service-discovery-port",
        str(profile.serve.port),
        "--service-discovery-namespace",
        fleet.kubernetes.namespace,
    ]


def router_manifests(fleet: Fleet, profile: Profile) -> tuple[Manifest, ...]:
    """The router's ServiceAccount, Role, RoleBinding, Deployment and Service."""
    section, router = fleet.kubernetes, fleet.router
    name, namespace = f"{fleet.name}-router", section.namespace
    pod_labels = labels(fleet.name, "router")
    meta = {"name": name, "namespace": namespace, "labels": pod_labels}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}
    # smg's discovery lists and watches the pods of its namespace: that, and nothing else.
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta,
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    container = {
        "name": "smg",
        "image": section.router.image,
        "command": ["smg"],
        "args": smg_args(fleet, profile),
        "ports": [
            {"name": "http", "containerPort": router.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": ROUTER_METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": router_selector(fleet.name)},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"serviceAccountName": name, "containers": [container]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": section.router.service_type,
            "selector": router_selector(fleet.name),
            "ports": [{"name": "http", "port": router.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return tuple(
        Manifest(body["kind"], name, body)  # type: ignore[index]
        for body in (account, role, binding, deployment, service)
    )
