"""One scrape = the whole deployment: state records, the container, the host, the server's own series.

Everything is read at scrape time through the ports (no cache but the page-cache walk, which is
rate-limited: mincore over a 800 GB quant is not free). A source that cannot be read exports
nothing, never zeros pretending (a CPU host has no NVML: no GPU series), and
`kimik3_exporter_source_up{source}` says which sources answered.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from kimik3_reconciler.errors import Kimik3Error
from kimik3_reconciler.model.api_keys import api_keys, sendable_key
from kimik3_reconciler.model.facts import ContainerFact
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.records import apply_key, gate_key, load_key, smoke_key, verify_key
from kimik3_reconciler.observe.docker_objects import parse_container
from kimik3_reconciler.exporter.server_series import relabel, slot_families
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.health import load_phase

PAGE_CACHE_EVERY_S = 30.0


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


class DeploymentCollector(Collector):
    """prometheus_client calls `collect()` on every scrape of /metrics."""

    def __init__(self, config: ExporterConfig, ports: Ports):
        self.config, self.ports = config, ports
        # rule: metrics-labels-no-secrets
        # Only the rendered labels (names and fingerprints) go on series; the key file is read per scrape
        # to authenticate and is never a label or a value.
        self.labels = dict(config.labels)
        self._page_cache: tuple[float, list[tuple[str, tuple[int, int] | None]]] | None = None
        self.sources: dict[str, bool] = {}

    # --- helpers ---------------------------------------------------------------------------------------

    def _gauge(self, name: str, doc: str, value: float | None, **extra: str) -> Iterator[Metric]:
        if value is None:
            return
        family = GaugeMetricFamily(name, doc, labels=[*self.labels, *extra])
        family.add_metric([*self.labels.values(), *extra.values()], float(value))
        yield family

    def _family(self, name: str, doc: str, extra: list[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*self.labels, *extra])

    def _add(self, family: GaugeMetricFamily, value: float, *extra: str) -> None:
        family.add_metric([*self.labels.values(), *extra], float(value))

    def _api_key(self) -> str | None:
        path = self.config.api_key_file
        if not path:
            return None
        try:
            with open(path, "rb") as handle:
                # The first key as llama-server reads the file: bytes, split on "\n" only (a text-mode read would
                # turn a CRLF key into one the server does not hold: it keeps the "\r").
                key = next(iter(api_keys(handle.read().decode("utf-8"))), None)
        except (OSError, ValueError):  # gone, unreadable, or edited to non-UTF-8 since the apply
            return None
        # A key the server cannot match as sent (a CR left by CRLF, non-ASCII, trailing blanks) is not sent: the
        # server answers 401 and kimik3_exporter_source_up says the source is down. model/api_keys.py decides.
        return sendable_key(key)

    # --- collect ---------------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        self.sources = {}
        try:
            inspect = self.ports.docker.inspect_container(self.config.container)
            self.sources["docker"] = True
        except (Kimik3Error, OSError):
            # dockerd restarting or absent: the scrape still answers (server, host, records, docker's up 0), so
            # the dashboard shows the daemon gone instead of the whole exporter failing with a 500.
            inspect, self.sources["docker"] = None, False
        container = parse_container(inspect) if inspect else None
        health = self.ports.http.health(f"{self.config.server_url}/health") if container else None
        yield from self._deployment(container, health)
        yield from self._records()
        yield from self._host(container)
        if health == "ok":
            yield from self._server()
        yield from self._source_up()

    def _deployment(self, container: ContainerFact | None, health: str | None) -> Iterator[Metric]:
        info = InfoMetricFamily("kimik3_deployment", "what is deployed (one series, value 1)", labels=list(self.labels))
        info.add_metric(list(self.labels.values()), {"repo": self.config.repo, "revision": self.config.revision,
                                                     "container": self.config.container,
                                                     "running_fingerprint": (container.fingerprint or "")
                                                     if container else ""})
        yield info
        record = self.ports.state.read(apply_key(self.config.profile)) or {}
        running = container is not None and container.state == "running"
        # Converged: the last apply succeeded, the container it converged to runs, and its model is loaded.
        converged = (record.get("result") == "ok" and running and container is not None
                     and container.fingerprint == record.get("fingerprint") == self.labels.get("fingerprint")
                     and health == "ok")
        yield from self._gauge("kimik3_deployment_converged", "1 when the last apply succeeded and its container "
                               "runs with the model loaded", 1.0 if converged else 0.0)
        yield from self._gauge("kimik3_server_up", "1 when llama-server's /health answers 200", 1.0 if health == "ok"
                               else 0.0)
        yield from self._gauge("kimik3_server_loading", "1 while llama-server loads the model (/health 503)",
                               1.0 if health == "loading" else 0.0)
        if health == "loading" and container is not None:
            try:
                phase = load_phase(self.ports.docker.container_logs(self.config.container, 1))
            except (Kimik3Error, OSError):
                phase = "unknown (docker did not answer)"  # as above: one source failing fails no scrape
            yield from self._gauge("kimik3_load_phase", "the server's latest log line while it loads (label)", 1.0,
                                   phase=phase)
        if container is not None:
            yield from self._gauge("kimik3_container_restarts", "the container's restart count (docker)",
                                   float(container.restart_count))
        if record:
            yield from self._gauge("kimik3_last_apply_timestamp_seconds", "when the last apply of this profile ended",
                                   _epoch(record.get("date")))
            yield from self._gauge("kimik3_last_apply_success", "1 when the last apply succeeded",
                                   1.0 if record.get("result") == "ok" else 0.0)
            if isinstance(record.get("reverted"), bool):  # records of an older kimik3 do not say
                yield from self._gauge("kimik3_last_apply_reverted", "1 when the last apply failed and relaunched "
                                       "the last good profile", 1.0 if record["reverted"] else 0.0)
            reverts = CounterMetricFamily("kimik3_apply_reverts", "applies that failed and relaunched the last good "
                                          "profile", labels=list(self.labels))
            # _created: when the count started (Prometheus' own "since" of a counter); absent when not known.
            reverts.add_metric(list(self.labels.values()), float(record.get("reverts", 0)),
                               created=_epoch(since) if isinstance(since := record.get("reverts_since"), str) else None)
            yield reverts

    def _records(self) -> Iterator[Metric]:
        load = self.ports.state.read(load_key(self.config.container))
        if load:
            yield from self._gauge("kimik3_model_load_seconds", "seconds the last model load took (launch to /health "
                                   "200)", load.get("seconds"))
            yield from self._gauge("kimik3_model_load_bytes", "bytes of the model of the last load", load.get("bytes"))
        yield from self._gates()
        yield from self._verify()

    def _gates(self) -> Iterator[Metric]:
        image_fp = self.config.image_fingerprint
        passed = self._family("kimik3_gate_passed", "1 passed, 0 failed, per gate (absent: not run for this image)",
                              ["gate"])
        smoke = self.ports.state.read(smoke_key(image_fp)) if image_fp else None
        if smoke is not None:
            self._add(passed, 1.0 if smoke.get("passed") else 0.0, "smoke")
        quant = (self.ports.state.read(gate_key(self.config.repo, self.config.revision, self.config.quant)) or {})
        result = quant.get(image_fp) if image_fp else None
        if isinstance(result, dict):
            self._add(passed, 1.0 if result.get("passed") else 0.0, "quant")
            report = result.get("report") or {}
            yield from self._gauge("kimik3_gate_kld", "the quant gate's mean KL divergence", report.get("mean_kld"))
            yield from self._gauge("kimik3_gate_top_token_agreement", "the quant gate's same-top-token share",
                                   report.get("same_top_p"))
        if passed.samples:
            yield passed

    def _verify(self) -> Iterator[Metric]:
        report = self.ports.state.read(verify_key(self.config.profile))
        if not report:
            return
        checks = self._family("kimik3_verify_check", "the last verify's outcome per check (status label), value 1",
                              ["check", "status"])
        for check in report.get("checks", []):
            self._add(checks, 1.0, str(check.get("name")), str(check.get("status")))
        yield checks
        yield from self._gauge("kimik3_verify_tool_call_parse_failures", "tool-call replies that did not parse in "
                               "the last verify", report.get("tool_call_parse_failures"))
        yield from self._gauge("kimik3_verify_tool_call_retries", "tool-call requests verify sent again",
                               report.get("tool_call_retries"))
        yield from self._gauge("kimik3_verify_timestamp_seconds", "when the last verify ran", _epoch(report.get("date")))

    def _host(self, container: ContainerFact | None) -> Iterator[Metric]:
        host = self.ports.host
        pid = container.pid if container is not None and container.state == "running" else None
        if pid:
            yield from self._gauge("kimik3_server_rss_bytes", "llama-server's resident memory (VmRSS)",
                                   host.process_rss(pid))
        balancing = host.numa_balancing()
        if balancing is not None and balancing.strip().isdigit():
            yield from self._gauge("kimik3_numa_balancing", "kernel.numa_balancing (seed 000: must be 0)",
                                   float(balancing.strip()))
        yield from self._gpus(pid)
        yield from self._shards()

    def _gpus(self, server_pid: int | None) -> Iterator[Metric]:
        if self.config.gpus == "none":
            return
        dump: dict[str, Any] = self.ports.host.nvml()
        self.sources["nvml"] = "error" not in dump
        if "error" in dump:
            return  # no driver: no GPU series at all (not zeros)
        wanted = self.config.gpus
        names = ["gpu", "uuid"]
        total = self._family("kimik3_gpu_memory_total_bytes", "VRAM per GPU", names)
        used = self._family("kimik3_gpu_memory_used_bytes", "VRAM in use per GPU (every process)", names)
        ours = self._family("kimik3_gpu_server_memory_bytes", "VRAM llama-server holds per GPU", names)
        foreign = self._family("kimik3_gpu_foreign_memory_bytes", "VRAM other processes hold on the profile's GPUs",
                               names)
        foreign_n = self._family("kimik3_gpu_foreign_processes", "other processes on the profile's GPUs", names)
        for gpu in dump.get("gpus", []):
            index, uuid = str(gpu.get("index")), str(gpu.get("uuid"))
            if wanted != "all" and index not in wanted and uuid not in wanted:
                continue
            processes = gpu.get("processes") or []
            mine = sum(p.get("used_memory") or 0 for p in processes if server_pid and p.get("pid") == server_pid)
            others = [p for p in processes if p.get("pid") != server_pid]
            self._add(total, gpu.get("memory_total", 0), index, uuid)
            self._add(used, gpu.get("memory_total", 0) - gpu.get("memory_free", 0), index, uuid)
            self._add(ours, mine, index, uuid)
            self._add(foreign, sum(p.get("used_memory") or 0 for p in others), index, uuid)
            self._add(foreign_n, len(others), index, uuid)
        yield from (total, used, ours, foreign, foreign_n)

    def _shards(self) -> Iterator[Metric]:
        now = self.ports.clock.monotonic()
        if self._page_cache is None or now - self._page_cache[0] >= PAGE_CACHE_EVERY_S:
            self._page_cache = (now, [(path, self.ports.host.page_cache_bytes(path)) for path in self.config.shards])
        size = self._family("kimik3_shard_bytes", "size of each served GGUF shard", ["shard"])
        cached = self._family("kimik3_shard_page_cache_bytes", "bytes of each shard in the page cache (mincore, "
                              f"refreshed every {PAGE_CACHE_EVERY_S:.0f} s)", ["shard"])
        for path, result in self._page_cache[1]:
            if result is None:
                continue
            self._add(cached, result[0], PurePosixPath(path).name)
            self._add(size, result[1], PurePosixPath(path).name)
        if size.samples:
            yield from (size, cached)

    def _server(self) -> Iterator[Metric]:
        key = self._api_key()
        status, text = self.ports.http.get(f"{self.config.server_url}/metrics", api_key=key)
        self.sources["server_metrics"] = status == 200
        if status == 200:
            try:
                yield from list(relabel(text, self.labels))
            except ValueError:
                self.sources["server_metrics"] = False
        status, text = self.ports.http.get(f"{self.config.server_url}/slots", api_key=key)
        self.sources["server_slots"] = status == 200
        if status == 200:
            yield from slot_families(text, self.labels)

    def _source_up(self) -> Iterator[Metric]:
        up = self._family("kimik3_exporter_source_up", "1 when the source answered this scrape", ["source"])
        for source, ok in sorted(self.sources.items()):
            self._add(up, 1.0 if ok else 0.0, source)
        if up.samples:
            yield up
