"""Tensor-parallel sizes against the checkpoint and the GPUs (issue 38 item 6): a size that does not divide the
checkpoint's attention heads (its config.json at the pinned revision) is refused by the plan, naming the field, before
any pull; a size below the GPUs the container gets is warned. Judged on the recorded H200 host; the real config.json
from the fixture hub: tests/integration/test_vllm_inputs_plan.py."""

from __future__ import annotations

import json

import pytest
from support.observed import model_fact, observed
from support.recorded_hosts import h200_host
from test_vllm_host_gate import PROFILE, _checkpoint

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.checkpoint_config import parse_checkpoint_config
from kimik3_reconciler.model.facts import CheckpointConfig
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning import plan
from kimik3_reconciler.planning.host_gate import host_gate

VLLM = PROFILE
SGLANG = VLLM.replace("engine: vllm", "engine: sglang").replace("vllm/vllm-openai", "lmsysorg/sglang")


def _observed(text: str, heads: int | None, gpus: int = 8):
    profile = parse_profile(text, "p.yaml").profile
    config = CheckpointConfig(attention_heads=heads, heads_key="num_attention_heads") if heads else None
    return profile, observed(
        profile,
        host=h200_host(gpus),
        model=model_fact(profile, quant="", files=_checkpoint(400)),
        checkpoint_config=config,
    )


@pytest.mark.parametrize(
    "text, knobs, field",
    [
        (VLLM, "vllm: {tensor_parallel_size: 8, any_gpu: true}\n", "vllm.tensor_parallel_size"),
        (SGLANG, "sglang: {tp_size: 8, dcp_size: 8, mamba_full_memory_ratio: 0.5, any_gpu: true}\n", "sglang.tp_size"),
    ],
)
def test_a_size_that_does_not_divide_the_heads_is_refused_naming_the_field(text: str, knobs: str, field: str) -> None:
    profile, seen = _observed(text + knobs, heads=12)
    refusals, _ = host_gate(profile, seen)
    said = [r for r in refusals if "attention heads" in r]
    assert said == [
        f"{field} 8 does not divide the checkpoint's 12 attention heads (num_attention_heads in "
        f"config.json at aaaaaaaaaaaa): every rank takes an equal share of them; use one of 1, 2, 3, 4, 6"
    ]
    assert said[0].field == tuple(field.split("."))
    with pytest.raises(PlanError, match="does not divide the checkpoint's 12 attention heads"):
        plan(profile, seen)  # the plan refuses: no step (pull, download) is planned, let alone run


def test_a_size_that_divides_the_heads_passes_and_an_unread_config_is_not_judged() -> None:
    text = VLLM + "vllm: {tensor_parallel_size: 8, any_gpu: true}\n"
    for heads in (64, None):  # Kimi-K2's 64 heads; a config that could not be read (hub down) says nothing
        profile, seen = _observed(text, heads=heads)
        refusals, warnings = host_gate(profile, seen)
        assert not [r for r in refusals if "attention heads" in r] and not [w for w in warnings if "idle" in w]


@pytest.mark.parametrize("gpus, given", [("all", 8), ("[0, 1, 2, 3, 4, 5, 6, 7]", 8), ("[0, 1, 2, 3, 4, 5]", 6)])
def test_a_size_below_the_gpus_given_warns_that_the_rest_stay_idle(gpus: str, given: int) -> None:
    profile, seen = _observed(VLLM + f"gpus: {gpus}\nvllm: {{tensor_parallel_size: 4, any_gpu: true}}\n", heads=64)
    _, warnings = host_gate(profile, seen)
    idle = [w for w in warnings if "stay idle" in w]
    assert len(idle) == 1 and idle[0].startswith(f"vllm.tensor_parallel_size 4 uses 4 of the {given} GPUs")
    assert f"the other {given - 4} stay idle" in idle[0]


@pytest.mark.parametrize(
    "data, heads, key",
    [
        ({"num_attention_heads": 64, "num_key_value_heads": 64}, 64, "num_attention_heads"),
        (
            {"architectures": ["KimiK3ForConditionalGeneration"], "text_config": {"num_attention_heads": 96}},
            96,
            "text_config.num_attention_heads",
        ),
    ],
)
def test_the_heads_are_read_at_the_top_or_in_the_language_config(data: dict, heads: int, key: str) -> None:
    assert parse_checkpoint_config(json.dumps(data).encode()) == CheckpointConfig(attention_heads=heads, heads_key=key)


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[1, 2]", b'{"num_attention_heads": true}', b'{"hidden_size": 8}', b'{"num_attention_heads": 0}'],
)
def test_a_config_without_readable_heads_is_none(raw: bytes) -> None:
    assert parse_checkpoint_config(raw) is None


@pytest.mark.parametrize(
    "text, extra",
    [
        (VLLM + "vllm: {tensor_parallel_size: 4, any_gpu: true}\n", '["--pipeline-parallel-size", "2"]'),
        (VLLM + "vllm: {tensor_parallel_size: 4, any_gpu: true}\n", '["-dp=2"]'),
        (VLLM + "vllm: {tensor_parallel_size: 4, pipeline_parallel_size: 2, any_gpu: true}\n", "[]"),
        (
            SGLANG + "sglang: {tp_size: 4, dcp_size: 4, mamba_full_memory_ratio: 0.5, any_gpu: true}\n",
            '["--dp-size", "2"]',
        ),
    ],
)
def test_pipeline_or_data_parallel_in_extra_args_is_not_called_idle(text: str, extra: str) -> None:
    """TP 4 x PP (or DP) 2 uses all 8 GPUs: "the other 4 stay idle" would send the operator to drop GPUs the
    engine uses. kimik3 does not compute those sizes, so it says nothing of idle GPUs then."""
    profile, seen = _observed(text + f"serve: {{extra_args: {extra}}}\n", heads=64)
    _, warnings = host_gate(profile, seen)
    assert not [w for w in warnings if "stay idle" in w], warnings
