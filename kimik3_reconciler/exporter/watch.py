"""`kimik3 status --watch`: the exporter's numbers for a person without Prometheus, read the same way.

`watch_source(ports, profile, observed)` says where the numbers come from: the running exporter's /metrics,
or an exposition collected in this process when the profile runs no exporter. `readings(...)` is the loop:
a reading every interval, each turned into rows. `samples_of(text)` reads an exposition; `watch_rows(before,
now, seconds)` turns two readings into what the live view shows: rates (tok/s) come from the counters'
difference, latency percentiles from the histograms' buckets. The CLI only renders the rows (rich).
"""

from __future__ import annotations

import datetime
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from kimik3_reconciler.engines import ServerSeries, engine_for
from kimik3_reconciler.exporter.registry import deployment_registry, exposition
from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_schema import MetricsSpec, values_of
from kimik3_reconciler.model.spec_draft import SPEC_LOSS_CONCURRENCY
from kimik3_reconciler.planning import render_desired
from kimik3_reconciler.planning.metrics_step import render_exporter
from kimik3_reconciler.ports import Ports

Samples = dict[str, list[tuple[dict[str, str], float]]]


def samples_of(text: str) -> Samples:
    out: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), sample.value))
    return dict(out)


def _one(samples: Samples, name: str) -> float | None:
    values = [v for _, v in samples.get(name, [])]
    return sum(values) if values else None


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / (1 << 30):.1f} GiB"


def quantile(samples: Samples, before: Samples, name: str, q: float) -> float | None:
    """The q-quantile of a histogram's observations between two readings (all of them when `before` lacks it),
    by linear interpolation inside the bucket, as PromQL's histogram_quantile does."""

    def buckets(s: Samples) -> dict[float, float]:
        acc: dict[float, float] = defaultdict(float)
        for labels, value in s.get(f"{name}_bucket", []):
            acc[float(labels["le"])] += value
        return acc

    now, then = buckets(samples), buckets(before)
    counts = sorted((le, now[le] - then.get(le, 0.0)) for le in now)
    if not counts or counts[-1][1] <= 0:
        return None
    rank, lower, below = q * counts[-1][1], 0.0, 0.0
    for le, cumulative in counts:
        if cumulative >= rank:
            if le == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = le, cumulative
    return None


@dataclass(frozen=True)
class Row:
    section: str
    name: str
    value: str


def _last_apply(now: Samples, reverts: float) -> str:
    """What the last apply did, then the running total apart from it: "1 reverts" after an apply that did not
    revert read as if it had (the total counts every apply of the profile)."""
    said = "ok" if _one(now, "kimik3_last_apply_success") else "FAILED"
    reverted = _one(now, "kimik3_last_apply_reverted")
    if reverted is not None:  # an exporter of an older kimik3 does not say
        said += ", reverted to the last good profile" if reverted else ", no revert"
    created = _one(now, "kimik3_apply_reverts_created")
    since = (
        f"since {datetime.datetime.fromtimestamp(created, datetime.UTC):%Y-%m-%d %H:%M} UTC"
        if created is not None
        else "in all"
    )
    return f"{said}; {reverts:.0f} revert{'' if reverts == 1 else 's'} of this profile {since}"


def _server_rows(before: Samples, now: Samples, seconds: float, series: ServerSeries) -> list[Row]:
    """The server's own series, by the engine's names (llama-server's `llamacpp:*`, vLLM's `vllm:*`)."""
    rows: list[Row] = []
    running, waiting = _one(now, series.running), _one(now, series.waiting)
    if running is not None:
        rows.append(Row("server", "requests", f"{running:.0f} processing, {waiting or 0:.0f} queued"))
    slots = now.get("kimik3_slot_processing", [])
    if slots:
        rows.append(Row("server", "slots busy", f"{sum(v for _, v in slots):.0f} of {len(slots)}"))
    for counter, label in (
        (series.generated_tokens_total, "decode tok/s"),
        (series.prompt_tokens_total, "prompt tok/s"),
    ):
        now_v, then_v = _one(now, counter), _one(before, counter)
        if now_v is not None and then_v is not None and seconds > 0:
            rows.append(Row("server", label, f"{max(now_v - then_v, 0) / seconds:.1f}"))
    usage = _one(now, series.kv_usage) if series.kv_usage else None
    if usage is not None:
        rows.append(Row("server", "KV cache used", f"{100 * usage:.0f} %"))
    if series.prefix_cache_hits_total and series.prefix_cache_queries_total:
        hits, queries = _one(now, series.prefix_cache_hits_total), _one(now, series.prefix_cache_queries_total)
        if hits is not None and queries:
            rows.append(
                Row(
                    "server",
                    "prefix cache hits",
                    f"{100 * hits / queries:.0f} % of {queries:.0f} prompt tokens since the server started",
                )
            )
    return rows


def _latency_rows(before: Samples, now: Samples, series: ServerSeries) -> list[Row]:
    """TTFT/ITL percentiles from the exporter's proxy (in front of the server), else from the server's own
    histograms where it has them (vLLM), and vLLM's end-to-end latency."""
    names = (("kimik3_proxy_ttft_seconds", "TTFT p50/p95"), ("kimik3_proxy_itl_seconds", "ITL p50/p95"))
    if not any(f"{name}_bucket" in now for name, _ in names):
        names = tuple(
            (name, label) for name, label in ((series.ttft, "TTFT p50/p95"), (series.itl, "ITL p50/p95")) if name
        )
    names += ((series.e2e, "request p50/p95"),) if series.e2e else ()
    rows: list[Row] = []
    for name, label in names:
        p50, p95, when = quantile(now, before, name, 0.5), quantile(now, before, name, 0.95), "this interval"
        if p50 is None:  # no request in this interval: since the exporter (its proxy) or the server started
            since = "since the exporter started" if name.startswith("kimik3_proxy_") else "since the server started"
            p50, p95, when = quantile(now, {}, name, 0.5), quantile(now, {}, name, 0.95), since
        if p50 is not None:
            rows.append(Row("latency", label, f"{p50 * 1000:.0f} / {(p95 or p50) * 1000:.0f} ms ({when})"))
    return rows


def watch_rows(before: Samples, now: Samples, seconds: float, series: ServerSeries | None = None) -> list[Row]:
    """The live view's rows; `series`: the serving engine's own names (default: llama.cpp's)."""
    series = series or engine_for(DEFAULT_ENGINE).series
    rows: list[Row] = []
    converged = _one(now, "kimik3_deployment_converged")
    info = (now.get("kimik3_deployment_info") or [({}, 0)])[0][0]
    rows.append(
        Row(
            "deployment",
            "profile",
            f"{info.get('profile', '-')} {info.get('quant', '')} "
            f"{info.get('build', '')} fp {info.get('fingerprint', '-')}",
        )
    )
    rows.append(Row("deployment", "converged", {1.0: "yes", 0.0: "no"}.get(converged, "-")))
    state = "loaded" if _one(now, "kimik3_server_up") else "loading" if _one(now, "kimik3_server_loading") else "down"
    phase = (now.get("kimik3_load_phase") or [({}, 0)])[0][0].get("phase")
    rows.append(Row("deployment", "server", f"{state}{': ' + phase if phase else ''}"))
    load = _one(now, "kimik3_model_load_seconds")
    if load is not None:
        rows.append(Row("deployment", "last load", f"{load:.1f} s for {_gib(_one(now, 'kimik3_model_load_bytes'))}"))
    reverts = _one(now, "kimik3_apply_reverts_total")
    if reverts is not None:
        rows.append(Row("deployment", "last apply", _last_apply(now, reverts)))
    for labels, total in now.get("kimik3_gpu_memory_total_bytes", []):
        gpu = labels.get("gpu")
        pick = lambda n: next((v for lb, v in now.get(n, []) if lb.get("gpu") == gpu), None)  # noqa: E731
        rows.append(
            Row(
                "gpu",
                f"GPU {gpu}",
                f"{_gib(pick('kimik3_gpu_memory_used_bytes'))} / {_gib(total)} used, "
                f"server {_gib(pick('kimik3_gpu_server_memory_bytes'))}, others "
                f"{_gib(pick('kimik3_gpu_foreign_memory_bytes'))} "
                f"({pick('kimik3_gpu_foreign_processes') or 0:.0f} processes)",
            )
        )
    rows.append(Row("host", "server RSS", _gib(_one(now, "kimik3_server_rss_bytes"))))
    cached, size = _one(now, "kimik3_shard_page_cache_bytes"), _one(now, "kimik3_shard_bytes")
    if size:
        rows.append(Row("host", "page cache", f"{_gib(cached)} of {_gib(size)} ({100 * (cached or 0) / size:.0f} %)"))
    balancing = _one(now, "kimik3_numa_balancing")
    if balancing is not None:
        rows.append(
            Row("host", "numa_balancing", f"{balancing:.0f}" + ("" if balancing == 0 else " (seed 000: set 0)"))
        )
    rows += _server_rows(before, now, seconds, series)
    # llama-server's prompt cache and speculation (names absent on other engines: no rows)
    rows += _prompt_cache_rows(before, now) + _speculation_rows(before, now, _one(now, series.running))
    rows += _latency_rows(before, now, series)
    failures = _one(now, "kimik3_proxy_tool_call_parse_failures_total")
    if failures is not None:  # a running total, as the revert count: said so, with this interval's part
        earlier = _one(before, "kimik3_proxy_tool_call_parse_failures_total")
        interval = f", {max(failures - earlier, 0):.0f} this interval" if earlier is not None else ""
        rows.append(Row("latency", "tool-call parse failures", f"{failures:.0f} since the exporter started{interval}"))
    return rows


def _delta(before: Samples, now: Samples, name: str) -> float | None:
    now_v, then_v = _one(now, name), _one(before, name)
    return None if now_v is None or then_v is None else max(now_v - then_v, 0)


def _prompt_cache_rows(before: Samples, now: Samples) -> list[Row]:
    """Seed 001 lists the cache hit rate: the share of prompt tokens llama-server took from its cache
    (`prompt_tokens_cached_total` / `prompt_tokens_total`; the proxy's per-reply `timings.cache_n` as well)."""
    rows = []
    cached, prompt = (
        _delta(before, now, "llamacpp:prompt_tokens_cached_total"),
        _delta(before, now, "llamacpp:prompt_tokens_total"),
    )
    if cached is not None and prompt:
        rows.append(
            Row(
                "server",
                "prompt cache hits",
                f"{100 * cached / (cached + prompt):.0f} % of prompt tokens this interval",
            )
        )
    proxy_cached = _one(now, "kimik3_proxy_prompt_cached_tokens_total")
    proxy_evaluated = _one(now, "kimik3_proxy_prompt_evaluated_tokens_total")
    if proxy_cached is not None and (proxy_cached + (proxy_evaluated or 0)) > 0:
        share = 100 * proxy_cached / (proxy_cached + (proxy_evaluated or 0))
        rows.append(
            Row("latency", "prompt cache hits", f"{share:.0f} % of prompt tokens in replies since the exporter started")
        )
    return rows


def _speculation_rows(before: Samples, now: Samples, processing: float | None) -> list[Row]:
    """Drafting while 4 or more requests decode together: where seed 000 measured speculation lose."""
    drafts = _delta(before, now, "llamacpp:spec_decode_num_drafts_total")
    if not drafts or processing is None:
        return []
    # rule: spec-draft-concurrency
    # Seed 000: +23 %/+72 % at c1 with 4 slots, a loss at c4: what predicts the loss is the concurrency served.
    if processing >= SPEC_LOSS_CONCURRENCY:
        return [
            Row(
                "server",
                "speculation",
                f"drafting with {processing:.1f} requests decoding together (this "
                f"interval's mean): seed 000 measured a loss at {SPEC_LOSS_CONCURRENCY} "
                "concurrent requests; a profile without spec_draft serves them faster",
            )
        ]
    return [
        Row(
            "server",
            "speculation",
            f"drafting, {processing:.1f} requests decoding together (pays below {SPEC_LOSS_CONCURRENCY}, seed 000)",
        )
    ]


@dataclass(frozen=True)
class WatchSource:
    """Where the live view's numbers come from: `read()` returns one exposition; `title` says whose."""

    title: str
    read: Callable[[], str]
    series: ServerSeries | None = None  # the serving engine's names (None: llama.cpp's)


def watch_source(ports: Ports, profile: Profile, observed: Observed) -> WatchSource:
    """The running exporter's /metrics (with its proxy's latency series), or, when the profile runs none, the
    same numbers collected in this process (no proxy: no latency series)."""
    running = observed.exporter
    if running is not None and running.alive and running.serving:
        url = ExporterConfig.from_json(running.config).health_url.removesuffix("/healthz") + "/metrics"

        def read_exporter() -> str:
            status_code, text = ports.http.get(url)
            return text if status_code == 200 else ""

        return WatchSource(
            f"kimik3 {profile.name}: exporter {running.unit or f'pid {running.pid}'} ({url})",
            read_exporter,
            engine_for(profile.engine).series,
        )
    with_metrics = (
        profile if profile.metrics else profile.model_copy(update={"metrics": values_of(MetricsSpec(port=1))})
    )
    registry = deployment_registry(render_exporter(render_desired(with_metrics, observed), observed), ports)
    return WatchSource(
        f"kimik3 {profile.name}: collected here (the profile runs no exporter: no proxy latency)",
        lambda: exposition(registry),
        engine_for(profile.engine).series,
    )


def readings(
    read: Callable[[], str],
    interval: float,
    iterations: int,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    series: ServerSeries | None = None,
) -> Iterator[list[Row]]:
    """The live view's rows: the first reading at once (no rates yet), then one every `interval` with the rates
    since the reading before; `iterations` refreshes after the first (0: until the caller stops, e.g. Ctrl-C)."""
    before, then = samples_of(read()), clock()
    yield watch_rows(before, before, 0.0, series)
    count = 0
    while not iterations or count < iterations:
        sleep(interval)
        now, at = samples_of(read()), clock()
        yield watch_rows(before, now, at - then, series)
        before, then, count = now, at, count + 1
