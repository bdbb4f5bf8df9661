"""The prefix-cache reading behind the engine protocol (ServerSeries.prefix_cache): llama-server counts cached and
evaluated prompt tokens apart (b11434: `prompt_tokens_total` excludes the cached ones), vLLM counts hits and queries;
both read as (hit tokens, prompt tokens); a restarted server's counters read whole, the fleet's are the sum."""

from __future__ import annotations

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import PrefixCacheTokens
from kimik3_reconciler.fleet.server_load import series_sum

LLAMA = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 250
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 750
llamacpp:requests_processing 1
"""
VLLM = """vllm:prefix_cache_queries_total{engine="0",model_name="k3"} 400.0
vllm:prefix_cache_hits_total{engine="0",model_name="k3"} 100.0
vllm:prompt_tokens_total{engine="0",model_name="k3"} 400.0
"""


def reading(engine: str, text: str) -> PrefixCacheTokens | None:
    return engine_for(engine).series.prefix_cache(lambda name: series_sum(text, name))


def test_llama_server_prompt_is_cached_plus_evaluated() -> None:
    got = reading("llamacpp", LLAMA)
    assert got == PrefixCacheTokens(750, 1000) and got.rate == 0.75


def test_vllm_reads_its_hits_and_queries() -> None:
    assert reading("vllm", VLLM) == PrefixCacheTokens(100, 400)


def test_a_server_without_the_counter_has_no_reading() -> None:
    assert reading("llamacpp", "llamacpp:prompt_tokens_total 10\n") is None  # a build without the cached counter
    assert reading("sglang", "sglang:prompt_tokens_total 10\n") is None  # no counter read for SGLang yet


def test_since_is_the_difference_and_a_restart_reads_whole() -> None:
    before, now = PrefixCacheTokens(100, 200), PrefixCacheTokens(400, 600)
    assert now.since(before) == PrefixCacheTokens(300, 400)
    assert PrefixCacheTokens(10, 50).since(before) == PrefixCacheTokens(10, 50)  # counters went down: restarted
    assert now.since(None) == now


def test_the_fleet_adds_every_server_it_could_read() -> None:
    total = PrefixCacheTokens.total([PrefixCacheTokens(90, 100), None, PrefixCacheTokens(10, 100)])
    assert total == PrefixCacheTokens(100, 200) and total.rate == 0.5
    assert PrefixCacheTokens.total([None]) is None and PrefixCacheTokens(0, 0).rate is None
