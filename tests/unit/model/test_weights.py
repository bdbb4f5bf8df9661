"""What verify's report says of the served weights: the format named is the shard's own."""

from __future__ import annotations

from kimik3_reconciler.model.weights import RANDOM_WEIGHTS, WEIGHTS_KEY, unreadable, weights_of


def test_an_unreadable_header_is_named_by_the_shards_format() -> None:
    # Was: "GGUF header not readable" for a safetensors shard (vLLM's checkpoint) too.
    assert unreadable("Q2/k3-00001-of-00019.gguf", "short").source.startswith("Q2/k3-00001-of-00019.gguf: GGUF header")
    weights = unreadable("model-00001-of-00064.safetensors", "not a safetensors file (x)")
    assert not weights.random and weights.source.startswith("model-00001-of-00064.safetensors: safetensors header")
    assert unreadable(".", "no safetensors shard in the checkpoint").source.startswith(".: header not readable")


def test_the_marker_is_named_by_the_shards_format() -> None:
    assert weights_of({WEIGHTS_KEY: RANDOM_WEIGHTS}, "tiny.gguf").source == (
        f"tiny.gguf: GGUF key {WEIGHTS_KEY} = 'random' (a kimik3 tiny model)"
    )
    assert weights_of({WEIGHTS_KEY: RANDOM_WEIGHTS}, "m.safetensors").random
    assert "safetensors metadata" in weights_of({WEIGHTS_KEY: RANDOM_WEIGHTS}, "m.safetensors").source
