"""llama-server's own exposition (`llamacpp:*`) and /slots, re-labelled with the deployment's labels."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families


def relabel(text: str, labels: Mapping[str, str]) -> Iterator[Metric]:
    """Every family of the server's text exposition, each sample with `labels` added (ours win a clash:
    a server label named `profile` must not pass for the deployment's)."""
    for family in text_string_to_metric_families(text):
        out = Metric(family.name, family.documentation, family.type, family.unit)
        for sample in family.samples:
            out.add_sample(sample.name, {**sample.labels, **labels}, sample.value, sample.timestamp)
        yield out


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
