"""A checkpoint's config.json, parsed (pure): the attention heads vLLM and SGLang split over their tensor-parallel
ranks. Multimodal checkpoints keep the language model's under a nested config (`text_config`); both are looked at."""

from __future__ import annotations

import json

from kimik3_reconciler.model.facts import CheckpointConfig

# Where Hugging Face configs keep the language model's own config in a multimodal checkpoint (vLLM reads its heads
# from there: hf_text_config).
_NESTED = ("text_config", "language_config", "llm_config")


def parse_checkpoint_config(data: bytes) -> CheckpointConfig | None:
    """The heads, from the top level or a nested language config; None when the file is not JSON or names none."""
    try:
        config = json.loads(data)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    for prefix, section in ((None, config), *((key, config.get(key)) for key in _NESTED)):
        heads = section.get("num_attention_heads") if isinstance(section, dict) else None
        if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0:
            return CheckpointConfig(
                attention_heads=heads, heads_key=f"{prefix}.num_attention_heads" if prefix else "num_attention_heads"
            )
    return None
