"""The engine seam (issue 25): the registry's engines satisfy the protocol, the profile names one of them (and
nothing else), and what reaches the container comes through the engine the plan was handed."""

from __future__ import annotations

import pytest
from support.observed import observed

from kimik3_reconciler.engines import ServingEngine, engine_for
from kimik3_reconciler.engines.base import ServerSeries
from kimik3_reconciler.errors import PlanError, ProfileError
from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE, ENGINES
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning import render_desired

PROFILE = """apiVersion: kimik3/v1
name: k
model: {repo: a/b, revision: %s, quant: UD-Q2_K_XL}
build: {variant: cpu, cpu_features: []}
gpus: none
""" % ("a" * 40)


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_registered_engine_satisfies_the_protocol_under_its_own_name(name: str) -> None:
    engine = engine_for(name)
    assert isinstance(engine, ServingEngine) and engine.name == name
    assert engine.readiness.path.startswith("/") and engine.series.prefix and engine.reasoning_field
    # tune writes a candidate into the engine's section: it must be a profile section whose fields are the knobs
    from kimik3_reconciler.model.tuning import section_model

    fields = section_model(engine.tune_knobs.section).model_fields
    assert set(engine.tune_knobs.names) - {"threads"} <= set(fields)  # threads: named only to be refused (seed 000)
    assert engine.load_wire in ("native", "openai") and isinstance(engine.exact_prefill, bool)


def test_an_unknown_engine_is_a_plan_error_naming_the_field() -> None:
    with pytest.raises(PlanError) as refused:
        engine_for("ollama")
    assert refused.value.fields == (("engine",),) and "llamacpp" in str(refused.value)


def test_the_profile_defaults_to_llamacpp_and_refuses_a_name_the_registry_lacks() -> None:
    assert parse_profile(PROFILE, "p.yaml").profile.engine == DEFAULT_ENGINE == "llamacpp"
    assert parse_profile(PROFILE + "engine: llamacpp\n", "p.yaml").profile.engine == "llamacpp"
    with pytest.raises(ProfileError) as refused:
        parse_profile(PROFILE + "engine: ollama\n", "p.yaml")
    assert refused.value.exit_code == 2 and "engine" in str(refused.value)


def test_the_plan_gets_the_profiles_engine_and_the_container_runs_its_argv() -> None:
    profile = parse_profile(PROFILE, "p.yaml").profile
    facts = observed(profile)
    desired = render_desired(profile, facts)
    assert desired.engine is engine_for("llamacpp")
    entry = desired.engine.model_entry(facts.model)
    opened = desired.launch.spec.command[1]  # -m <snapshot>/<the quant's first shard>
    assert opened.endswith("/" + entry)
    snapshot = opened.removesuffix("/" + entry)
    assert desired.launch.spec.command == desired.engine.server_argv(desired.launch.input, snapshot)


def test_the_checkpoint_engines_read_the_series_their_servers_publish() -> None:
    """ServerSeries.openai builds the names from the prefix (issue 37): each is the server's own full name."""
    vllm, sglang = engine_for("vllm").series, engine_for("sglang").series
    assert (vllm.running, vllm.waiting, vllm.slots) == ("vllm:num_requests_running", "vllm:num_requests_waiting", None)
    assert (vllm.generated_tokens_total, vllm.prompt_tokens_total) == (
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
    )
    assert (vllm.ttft, vllm.itl, vllm.e2e, vllm.kv_usage) == (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:kv_cache_usage_perc",
    )
    assert (vllm.prefix_cache_hits_total, vllm.prefix_cache_queries_total) == (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
    )
    assert sglang == ServerSeries(
        "sglang:",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:generation_tokens_total",
        "sglang:prompt_tokens_total",
        None,
    )
