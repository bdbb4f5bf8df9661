"""The exporter's registry: the deployment collector and, with metrics.proxy, the proxy's histograms."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry

from kimik3_reconciler.exporter.collect import DeploymentCollector
from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics
from kimik3_reconciler.exporter.server_series import relabel
from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.records import front_config_key
from kimik3_reconciler.ports import Ports


def deployment_registry(config: ExporterConfig, ports: Ports) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeploymentCollector(config, ports))
    return registry


def exporter_registry(config: ExporterConfig, ports: Ports) -> tuple[CollectorRegistry, ProxyMetrics | None]:
    """The registry /metrics serves, and the proxy's series in it when the profile asks for the proxy."""
    registry = deployment_registry(config, ports)
    proxy = ProxyMetrics(registry, config.labels) if config.proxy_port else None
    if proxy is None:
        registry.register(FrontSeries(config, ports))
    return registry, proxy


FRONT_READ_S = 1.0  # one read of the front's series per scrape, within the scrape's bound (exporter/sources.py)


class FrontSeries:
    """With metrics.handover the proxy is the front (its own process, labelled `profile` only: it outlives every
    fingerprint): its latency series, read from its control path at scrape time, with the deployment's labels."""

    def __init__(self, config: ExporterConfig, ports: Ports):
        self.config, self.ports = config, ports

    def collect(self) -> Iterator[Metric]:
        record = self.ports.state.read(front_config_key(self.config.profile))
        if not record:
            return  # no front: the profile runs without handover
        status, body = self.ports.http.get(
            f"{FrontConfig.from_json(record).control_url}/metrics", timeout_s=FRONT_READ_S
        )
        if status == 200:
            yield from relabel(body, self.config.labels)


def exposition(registry: CollectorRegistry) -> str:
    """One scrape of `registry`, as /metrics would answer it (for `status --watch` without an exporter)."""
    return generate_latest(registry).decode()
