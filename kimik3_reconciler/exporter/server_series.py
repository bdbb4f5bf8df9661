"""llama-server's own exposition (`llamacpp:*`) and /slots, re-labelled with the deployment's labels; and the
server's prefix-cache tokens under engine-neutral names (`kimik3_prefix_cache_*`, one pair per host: a fleet's hit
rate is the sum of the hits over the sum of the prompts across its hosts' exporters)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from kimik3_reconciler.engines import ServerSeries


def relabel(text: str, labels: Mapping[str, str]) -> Iterator[Metric]:
    """Every family of the server's text exposition, each sample with `labels` added (ours win a clash:
    a server label named `profile` must not pass for the deployment's)."""
    for family in text_string_to_metric_families(text):
        out = Metric(family.name, family.documentation, family.type, family.unit)
        for sample in family.samples:
            out.add_sample(sample.name, {**sample.labels, **labels}, sample.value, sample.timestamp)
        yield out


def prefix_cache_families(text: str, series: ServerSeries, labels: Mapping[str, str]) -> Iterator[Metric]:
    """The server's prefix-cache tokens since it started, read through the engine (ServerSeries.prefix_cache):
    `kimik3_prefix_cache_hit_tokens_total` and `kimik3_prefix_cache_prompt_tokens_total`; none where the engine or
    the build has no such counter."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    tokens = series.prefix_cache(values.get)
    if tokens is None:
        return
    for name, doc, value in (
        ("kimik3_prefix_cache_hit_tokens", "prompt tokens the server took from its prefix cache", tokens.hits),
        ("kimik3_prefix_cache_prompt_tokens", "prompt tokens the server was sent, cached or evaluated", tokens.prompt),
    ):
        family = CounterMetricFamily(name, f"{doc} (its own counters, since it started)", labels=list(labels))
        family.add_metric(list(labels.values()), value)
        yield family


def slot_families(slots_json: str, labels: Mapping[str, str]) -> Iterator[Metric]:
    """Per slot: processing (0/1), context size, and the tokens it holds where the build reports them."""
    try:
        slots = json.loads(slots_json)
    except ValueError:
        return
    if not isinstance(slots, list):
        return
    names = [*labels, "slot"]
    processing = GaugeMetricFamily("kimik3_slot_processing", "1 while the slot serves a request", labels=names)
    context = GaugeMetricFamily("kimik3_slot_context_tokens", "the slot's context size (n_ctx)", labels=names)
    held = GaugeMetricFamily(
        "kimik3_slot_kv_tokens",
        "tokens the slot's KV cache holds (prompt + generated), where the build's /slots reports them",
        labels=names,
    )
    any_held = False
    for slot in slots:
        if not isinstance(slot, dict):
            continue
        values = [*labels.values(), str(slot.get("id", len(processing.samples)))]
        processing.add_metric(values, 1.0 if slot.get("is_processing") else 0.0)
        if isinstance(slot.get("n_ctx"), int):
            context.add_metric(values, float(slot["n_ctx"]))
        tokens = _kv_tokens(slot)
        if tokens is not None:
            held.add_metric(values, float(tokens))
            any_held = True
    yield processing
    yield context
    if any_held:
        yield held


def _kv_tokens(slot: dict[str, Any]) -> int | None:
    """`n_past` (older builds), else prompt tokens + decoded tokens of the current task (b11434's next_token)."""
    if isinstance(slot.get("n_past"), int):
        return slot["n_past"]
    token = slot.get("next_token")
    if isinstance(token, list) and token and isinstance(token[0], dict):
        token = token[0]
    if (
        isinstance(token, dict)
        and isinstance(token.get("n_decoded"), int)
        and isinstance(slot.get("n_prompt_tokens"), int)
    ):
        return slot["n_prompt_tokens"] + token["n_decoded"]
    return None
