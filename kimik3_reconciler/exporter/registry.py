"""The exporter's registry: the deployment collector and, with metrics.proxy, the proxy's histograms."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from kimik3_reconciler.exporter.collect import DeploymentCollector
from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.ports import Ports


def deployment_registry(config: ExporterConfig, ports: Ports) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeploymentCollector(config, ports))
    return registry


def exporter_registry(config: ExporterConfig, ports: Ports) -> tuple[CollectorRegistry, ProxyMetrics | None]:
    """The registry /metrics serves, and the proxy's series in it when the profile asks for the proxy."""
    registry = deployment_registry(config, ports)
    proxy = ProxyMetrics(registry, config.labels) if config.proxy_port else None
    return registry, proxy


def exposition(registry: CollectorRegistry) -> str:
    """One scrape of `registry`, as /metrics would answer it (for `status --watch` without an exporter)."""
    return generate_latest(registry).decode()
