"""One scrape = the whole deployment: state records, the container, the host, the server's own series.

Everything is read at scrape time through the ports (no cache but the page-cache walk, which is
rate-limited: mincore over a 800 GB quant is not free), each source on its own thread with its own
deadline (exporter/sources.py), so a scrape answers within SCRAPE_BOUND_S whatever Docker, the server,
NVML, /proc or the state dir does. A source that cannot be read, or not in time, exports nothing, never
zeros pretending nor its last value (a CPU host has no NVML: no GPU series; dockerd gone: no restart count
and no `converged`, while the server's own health and series, read from the server, stay), and
`kimik3_exporter_source_up{source}` says which sources answered.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from kimik3_reconciler import logs
from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.exporter.server_series import prefix_cache_families, relabel, slot_families
from kimik3_reconciler.exporter.sources import Reading, SourceReads
from kimik3_reconciler.model.api_keys import sent_key
from kimik3_reconciler.model.facts import ContainerFact
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.records import apply_key, gate_key, load_key, smoke_key, verify_key
from kimik3_reconciler.observe.docker_objects import parse_container
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

    def __init__(self, config: ExporterConfig, ports: Ports, reads: SourceReads | None = None):
        self.config, self.ports = config, ports
        # The engine's names and wire behaviour (its /slots or none, "refused while loading"): the registry, by name.
        self.engine = engine_for(config.engine)
        self.reads = reads or SourceReads()  # the reads in flight, shared by concurrent scrapes
        # rule: metrics-labels-no-secrets
        # Only the rendered labels (names and fingerprints) go on series; the key file is read per scrape
        # to authenticate and is never a label or a value.
        self.labels = dict(config.labels)
        # The last page-cache walk that ended: (clock when it started, (path, (cached, size) or None) per shard).
        self._walk: tuple[float, list[tuple[str, tuple[int, int] | None]]] | None = None
        self._answered: dict[str, bool] = {}  # per source, whether it answered the last scrape (log transitions)

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
                data = handle.read()
        except OSError:  # gone or unreadable since the apply
            return None
        # No key the server can match as sent (a CR left by CRLF, non-ASCII, trailing blanks, a non-UTF-8 edit): none
        # is sent, the server answers 401 and kimik3_exporter_source_up says the source is down.
        return sent_key(data)

    # --- collect ---------------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """One scrape, answered within `self.reads.bound_s` whatever a source does (exporter/sources.py)."""
        deadline = time.monotonic() + self.reads.bound_s
        reads, url = self.reads, self.config.server_url
        pending = {
            "docker": reads.start("docker", self.ports.docker.inspect_container, self.config.container),
            # The server's health and series come from the server, never through Docker: with dockerd
            # gone a serving llama-server is still up, and its counters still count.
            "server_health": reads.start("server_health", self.ports.http.health, f"{url}/health"),
            "server_metrics": reads.start("server_metrics", self._server_page, "/metrics"),
            "state": reads.start("state", self._read_records),
        }
        if self.engine.series.slots:  # llama-server's per-slot state; vLLM has none
            pending["server_slots"] = reads.start("server_slots", self._server_page, self.engine.series.slots)
        if self.config.gpus != "none":
            pending["nvml"] = reads.start("nvml", self.ports.host.nvml)
        walk = self._start_walk()
        got = {source: _judged(reads.result(read, deadline)) for source, read in pending.items()}
        docker = got["docker"]
        container = parse_container(docker.value) if docker.answered and docker.value else None
        pid = container.pid if container is not None and container.state == "running" else None
        health = got["server_health"].value if got["server_health"].answered else None
        if docker.answered and (container is None or container.state != "running") and health is not None:
            # Docker says ours is not running: whatever answers at its URL (another profile's server) is not ours.
            health = "unreachable"
        if (
            health == "unreachable"
            and self.engine.readiness.while_loading == "refused"
            and docker.answered
            and container is not None
            and container.state == "running"
        ):
            # vLLM binds its port only once loaded: while its container runs, a refusal is the load, not a failure.
            health = "loading"
        if health is not None and health != "ok":
            # Loading (every route answers 503 for minutes) or not there: its pages were asked alongside /health
            # to keep the scrape short, but they are not a source that failed; reported as not asked, as before.
            got.pop("server_metrics")
            got.pop("server_slots", None)
        # What needs the container's pid (or its log) starts once Docker answered, within the scrape's bound.
        got["proc"] = reads.result(reads.start("proc", self._proc, pid), deadline)
        phase = None
        if health == "loading" and container is not None:
            logs = reads.result(
                reads.start("docker", self.ports.docker.container_logs, self.config.container, 1), deadline
            )
            phase = load_phase(logs.value) if logs.answered else "unknown (docker did not answer)"
        got["page_cache"] = self._page_cache(reads.result(walk, deadline) if walk is not None else None)
        records = got["state"].value if got["state"].answered else None
        yield from self._deployment(container if docker.answered else _UNKNOWN, health, records, phase)
        if records is not None:
            yield from self._records(records)
        yield from self._host(got, pid if docker.answered else _UNKNOWN)
        yield from self._server(got)
        yield from self._source_up(got)

    def _read_records(self) -> dict[str, dict[str, Any] | None]:
        """The state records a scrape shows, read on the "state" source's thread (a hung state dir is a late
        source, not a hung scrape)."""
        read, c = self.ports.state.read, self.config
        return {
            "apply": read(apply_key(c.profile)),
            "load": read(load_key(c.container)),
            "smoke": read(smoke_key(c.image_fingerprint)) if c.image_fingerprint else None,
            "gate": read(gate_key(c.repo, c.revision, c.quant)),
            "verify": read(verify_key(c.profile)),
        }

    def _server_page(self, path: str) -> tuple[int, str]:
        """GET the server's `path` with the key file's first key (read here: the file can hang too)."""
        return self.ports.http.get(
            f"{self.config.server_url}{path}",
            api_key=self._api_key(),
            timeout_s=self.reads.deadlines.get("server_metrics", 2.5),
        )

    def _proc(self, pid: int | None) -> tuple[str | None, int | None]:
        """kernel.numa_balancing, and the server's resident bytes when its pid is known."""
        return self.ports.host.numa_balancing(), self.ports.host.process_rss(pid) if pid else None

    def _deployment(
        self,
        container: ContainerFact | None | _Unknown,
        health: str | None,
        records: dict[str, Any] | None,
        phase: str | None,
    ) -> Iterator[Metric]:
        known = not isinstance(container, _Unknown)
        running_fp = (container.fingerprint or "") if known and container is not None else ""
        info = InfoMetricFamily("kimik3_deployment", "what is deployed (one series, value 1)", labels=list(self.labels))
        info.add_metric(
            list(self.labels.values()),
            {
                "repo": self.config.repo,
                "revision": self.config.revision,
                "container": self.config.container,
                "running_fingerprint": running_fp,
            },
        )
        yield info
        record = (records or {}).get("apply") or {}
        if known and health is not None and records is not None:
            running = container is not None and container.state == "running"
            # Converged: the last apply succeeded, the container it converged to runs, and its model is loaded.
            # Known only when Docker, the server and the state dir all answered: otherwise left out, not 0.
            converged = (
                record.get("result") == "ok"
                and running
                and container is not None
                and container.fingerprint == record.get("fingerprint") == self.labels.get("fingerprint")
                and health == "ok"
            )
            yield from self._gauge(
                "kimik3_deployment_converged",
                "1 when the last apply succeeded and its container runs with the model loaded",
                1.0 if converged else 0.0,
            )
        if health is not None:
            yield from self._gauge(
                "kimik3_server_up", "1 when the server's /health answers 200", 1.0 if health == "ok" else 0.0
            )
            yield from self._gauge(
                "kimik3_server_loading",
                "1 while the server loads the model (its readiness path answers 503, or its running container's port refuses)",
                1.0 if health == "loading" else 0.0,
            )
        if phase is not None:
            yield from self._gauge(
                "kimik3_load_phase", "the server's latest log line while it loads (label)", 1.0, phase=phase
            )
        if known and container is not None:
            yield from self._gauge(
                "kimik3_container_restarts", "the container's restart count (docker)", float(container.restart_count)
            )
        if record:
            yield from self._gauge(
                "kimik3_last_apply_timestamp_seconds",
                "when the last apply of this profile ended",
                _epoch(record.get("date")),
            )
            yield from self._gauge(
                "kimik3_last_apply_success",
                "1 when the last apply succeeded",
                1.0 if record.get("result") == "ok" else 0.0,
            )
            if isinstance(record.get("reverted"), bool):  # records of an older kimik3 do not say
                yield from self._gauge(
                    "kimik3_last_apply_reverted",
                    "1 when the last apply failed and relaunched the last good profile",
                    1.0 if record["reverted"] else 0.0,
                )
            reverts = CounterMetricFamily(
                "kimik3_apply_reverts",
                "applies that failed and relaunched the last good profile",
                labels=list(self.labels),
            )
            # _created: when the count started (Prometheus' own "since" of a counter); absent when not known.
            reverts.add_metric(
                list(self.labels.values()),
                float(record.get("reverts", 0)),
                created=_epoch(since) if isinstance(since := record.get("reverts_since"), str) else None,
            )
            yield reverts

    def _records(self, records: dict[str, Any]) -> Iterator[Metric]:
        load = records.get("load")
        if load:
            yield from self._gauge(
                "kimik3_model_load_seconds",
                "seconds the last model load took (launch to /health 200)",
                load.get("seconds"),
            )
            yield from self._gauge("kimik3_model_load_bytes", "bytes of the model of the last load", load.get("bytes"))
        yield from self._gates(records)
        yield from self._verify(records.get("verify"))

    def _gates(self, records: dict[str, Any]) -> Iterator[Metric]:
        image_fp = self.config.image_fingerprint
        passed = self._family(
            "kimik3_gate_passed", "1 passed, 0 failed, per gate (absent: not run for this image)", ["gate"]
        )
        smoke = records.get("smoke")
        if smoke is not None:
            self._add(passed, 1.0 if smoke.get("passed") else 0.0, "smoke")
        quant = records.get("gate") or {}
        result = quant.get(image_fp) if image_fp else None
        if isinstance(result, dict):
            self._add(passed, 1.0 if result.get("passed") else 0.0, "quant")
            report = result.get("report") or {}
            yield from self._gauge("kimik3_gate_kld", "the quant gate's mean KL divergence", report.get("mean_kld"))
            yield from self._gauge(
                "kimik3_gate_top_token_agreement", "the quant gate's same-top-token share", report.get("same_top_p")
            )
        if passed.samples:
            yield passed

    def _verify(self, report: dict[str, Any] | None) -> Iterator[Metric]:
        if not report:
            return
        checks = self._family(
            "kimik3_verify_check", "the last verify's outcome per check (status label), value 1", ["check", "status"]
        )
        for check in report.get("checks", []):
            self._add(checks, 1.0, str(check.get("name")), str(check.get("status")))
        yield checks
        yield from self._gauge(
            "kimik3_verify_tool_call_parse_failures",
            "tool-call replies that did not parse in the last verify",
            report.get("tool_call_parse_failures"),
        )
        yield from self._gauge(
            "kimik3_verify_tool_call_retries", "tool-call requests verify sent again", report.get("tool_call_retries")
        )
        yield from self._gauge(
            "kimik3_verify_timestamp_seconds", "when the last verify ran", _epoch(report.get("date"))
        )

    def _host(self, got: dict[str, Reading], server_pid: int | None | _Unknown) -> Iterator[Metric]:
        proc = got["proc"]
        if proc.answered:
            balancing, rss = proc.value
            yield from self._gauge("kimik3_server_rss_bytes", "the server's resident memory (VmRSS)", rss)
            if balancing is not None and balancing.strip().isdigit():
                yield from self._gauge(
                    "kimik3_numa_balancing", "kernel.numa_balancing (seed 000: must be 0)", float(balancing.strip())
                )
        if "nvml" in got:
            yield from self._gpus(got["nvml"], server_pid)
        yield from self._shards(got["page_cache"])

    def _gpus(self, nvml: Reading, server_pid: int | None | _Unknown) -> Iterator[Metric]:
        if not nvml.answered:
            return  # no driver, or NVML did not answer in time: no GPU series at all (not zeros)
        dump: dict[str, Any] = nvml.value
        wanted = self.config.gpus
        names = ["gpu", "uuid"]
        total = self._family("kimik3_gpu_memory_total_bytes", "VRAM per GPU", names)
        used = self._family("kimik3_gpu_memory_used_bytes", "VRAM in use per GPU (every process)", names)
        ours = self._family("kimik3_gpu_server_memory_bytes", "VRAM the server holds per GPU", names)
        foreign = self._family(
            "kimik3_gpu_foreign_memory_bytes", "VRAM other processes hold on the profile's GPUs", names
        )
        foreign_n = self._family("kimik3_gpu_foreign_processes", "other processes on the profile's GPUs", names)
        for gpu in dump.get("gpus", []):
            index, uuid = str(gpu.get("index")), str(gpu.get("uuid"))
            if wanted != "all" and index not in wanted and uuid not in wanted:
                continue
            self._add(total, gpu.get("memory_total", 0), index, uuid)
            self._add(used, gpu.get("memory_total", 0) - gpu.get("memory_free", 0), index, uuid)
            if isinstance(server_pid, _Unknown):
                continue  # Docker did not say which pid is the server's: its own VRAM must not pass for a foreigner's
            processes = gpu.get("processes") or []
            mine = sum(p.get("used_memory") or 0 for p in processes if server_pid and p.get("pid") == server_pid)
            others = [p for p in processes if p.get("pid") != server_pid]
            self._add(ours, mine, index, uuid)
            self._add(foreign, sum(p.get("used_memory") or 0 for p in others), index, uuid)
            self._add(foreign_n, len(others), index, uuid)
        yield from (family for family in (total, used, ours, foreign, foreign_n) if family.samples)

    def _start_walk(self) -> Any:
        """A page-cache walk of the shards when the last one is PAGE_CACHE_EVERY_S old (mincore over 800 GB is not
        free), on the "page_cache" source's thread; None when the last one is recent enough."""
        if self._walk is not None and self.ports.clock.monotonic() - self._walk[0] < PAGE_CACHE_EVERY_S:
            return None
        return self.reads.start("page_cache", self._walk_shards)

    def _walk_shards(self) -> list[tuple[str, tuple[int, int] | None]]:
        at = self.ports.clock.monotonic()
        walked = [(path, self.ports.host.page_cache_bytes(path)) for path in self.config.shards]
        # Kept when it ends, even after the scrape that started it gave up: the next scrape serves it.
        self._walk = (at, walked)
        return walked

    def _page_cache(self, walked: Reading | None) -> Reading:
        """The walk a scrape serves: the last one that ended, while at most two periods old (one slow walk does not
        blank the series); else the page cache is a source that did not answer. `walked`: this scrape's walk."""
        walk, took = self._walk, walked.seconds if walked is not None else 0.0
        if walk is not None and self.ports.clock.monotonic() - walk[0] < 2 * PAGE_CACHE_EVERY_S:
            return Reading("page_cache", value=walk[1], seconds=took)
        if walked is not None and not walked.answered:
            return walked
        return Reading(
            "page_cache", error=f"no page-cache walk ended in the last {2 * PAGE_CACHE_EVERY_S:.0f} s", seconds=took
        )

    def _shards(self, walk: Reading) -> Iterator[Metric]:
        if not walk.answered:
            return
        size = self._family("kimik3_shard_bytes", "size of each served weight shard", ["shard"])
        cached = self._family(
            "kimik3_shard_page_cache_bytes",
            f"bytes of each shard in the page cache (mincore, refreshed every {PAGE_CACHE_EVERY_S:.0f} s)",
            ["shard"],
        )
        for path, result in walk.value:
            if result is None:
                continue
            self._add(cached, result[0], PurePosixPath(path).name)
            self._add(size, result[1], PurePosixPath(path).name)
        if size.samples:
            yield from (size, cached)

    def _server(self, got: dict[str, Reading]) -> Iterator[Metric]:
        if "server_metrics" not in got:
            return
        metrics, slots = got["server_metrics"], got.get("server_slots")
        if metrics.answered:
            try:
                yield from list(relabel(metrics.value[1], self.labels))
                yield from list(prefix_cache_families(metrics.value[1], self.engine.series, self.labels))
            except ValueError:
                got["server_metrics"] = Reading(
                    "server_metrics", error="not a Prometheus exposition", seconds=metrics.seconds
                )
        if slots is not None and slots.answered:
            yield from slot_families(slots.value[1], self.labels)

    def _source_up(self, got: dict[str, Reading]) -> Iterator[Metric]:
        up = self._family(
            "kimik3_exporter_source_up", "1 when the source answered this scrape within its deadline", ["source"]
        )
        took = self._family(
            "kimik3_exporter_source_seconds",
            "how long the source's read took this scrape (when late: how long it has been running)",
            ["source"],
        )
        for source, reading in sorted(got.items()):
            self._add(up, 1.0 if reading.answered else 0.0, source)
            self._add(took, round(reading.seconds, 6), source)
            self._say_changes(reading)
        yield from (up, took)

    def _say_changes(self, reading: Reading) -> None:
        """One log line when a source stops answering and one when it answers again, not one per scrape."""
        was = self._answered.get(reading.source, True)
        self._answered[reading.source] = reading.answered
        if was and not reading.answered:
            why = (
                f"no answer within {self.reads.deadlines.get(reading.source, 1.0):g} s (its read has run "
                f"{reading.seconds:.1f} s)"
                if reading.late
                else reading.error
            )
            logs.logger("kimik3").warning(
                "source-down",
                source=reading.source,
                message=f"{why}: its series are left out until it answers; the scrape still answers",
            )
        elif reading.answered and not was:
            logs.logger("kimik3").info("source-up", source=reading.source, seconds=round(reading.seconds, 3))


def _judged(reading: Reading) -> Reading:
    """A read that returned but says its source failed (NVML's error, a server page not 200) is that source down."""
    if not reading.answered:
        return reading
    value, error = reading.value, None
    if reading.source == "nvml" and (not isinstance(value, dict) or "error" in value):
        error = str(value.get("error")) if isinstance(value, dict) else "no NVML answer"
    elif reading.source in ("server_metrics", "server_slots") and value[0] != 200:
        error = value[1][:200] if value[0] == 0 else f"HTTP {value[0]}: {value[1][:200]}"
    return reading if error is None else Reading(reading.source, error=error, seconds=reading.seconds)


class _Unknown:
    """Docker did not answer this scrape: whether a container runs, and its pid, are not known (not "none")."""


_UNKNOWN = _Unknown()
