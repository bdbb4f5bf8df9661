"""The fleet's router on real parts: smg started as `kimik3 fleet apply` starts it (adapters/router_smg.py's command
line) in front of three llama-server replicas (tests/support/llama_replicas.py: the demo's image, the tiny GGUF,
loopback), and the prefix-cache hits read from the servers' own counters through the engine protocol.

- round_robin spreads the requests over the three replicas. With `--backend openai` (the adapter's first command
  line) smg ran its proxy to OpenAI-style providers and sent all of them to one replica, whatever the policy.
- cache_aware (the fleet file's default) sends each turn of a conversation to the replica that served its last
  turn: the servers' counters show every later turn's conversation so far taken from the cache, and their hit
  tokens are the replies' own `cached_tokens` added."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from support.llama_replicas import MODEL_NAME, Replicas
from support.replica_rig import demo_replicas, smg_over

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import PrefixCacheTokens
from kimik3_reconciler.fleet.server_load import series_sum

pytestmark = [pytest.mark.docker, pytest.mark.fleet_rollout]  # the fleet extra (smg): CI's fleet stage

SERIES = engine_for("llamacpp").series


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    with demo_replicas(tmp_path_factory, "k3rp", 19441) as started:
        yield started


@contextmanager
def router(replicas: Replicas, policy: str, log: Path) -> Iterator[str]:
    with smg_over(replicas, policy, log) as smg:
        yield smg.url


def readings(replicas: Replicas) -> dict[str, PrefixCacheTokens | None]:
    texts = {url: httpx.get(f"{url}/metrics", timeout=10).text for url in replicas.urls}
    return {url: SERIES.prefix_cache(lambda name, text=text: series_sum(text, name)) for url, text in texts.items()}


def chat(url: str, messages: list[dict]) -> dict:
    answer = httpx.post(
        f"{url}/v1/chat/completions", json={"model": MODEL_NAME, "messages": messages, "max_tokens": 4}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_round_robin_spreads_the_requests_over_every_replica(replicas: Replicas, tmp_path: Path) -> None:
    replicas.start()  # empty caches, counters at 0
    with router(replicas, "round_robin", tmp_path / "smg.log") as url:
        for i in range(6):
            chat(url, [{"role": "user", "content": f"question {i}: " + "word " * 40}])
    served = readings(replicas)
    assert all(served[u] is not None and served[u].prompt > 0 for u in replicas.urls), served


def test_cache_aware_keeps_each_conversation_on_the_replica_that_holds_it(replicas: Replicas, tmp_path: Path) -> None:
    replicas.start()
    conversations = [
        [{"role": "system", "content": f"Agent {c}. " + f"rule {c} " * 150}, {"role": "user", "content": "Begin."}]
        for c in range(3)
    ]
    cached_in_replies, resent, last_prompt = 0, 0, [0] * len(conversations)
    with router(replicas, "cache_aware", tmp_path / "smg.log") as url:
        for turn in range(3):
            for c, messages in enumerate(conversations):
                usage = chat(url, messages)["usage"]
                cached = usage["prompt_tokens_details"]["cached_tokens"]
                # the conversation so far was served on one replica: a later turn finds most of it in that cache
                assert turn == 0 or cached >= 0.8 * last_prompt[c], (turn, c, usage)
                cached_in_replies, resent, last_prompt[c] = (
                    cached_in_replies + cached,
                    resent + usage["prompt_tokens"],
                    usage["prompt_tokens"],
                )
                messages += [
                    {"role": "assistant", "content": f"Calling tool {turn}."},
                    {"role": "user", "content": f"tool result {turn}: " + "ok " * 30},
                ]
    fleet = PrefixCacheTokens.total(readings(replicas).values())
    assert fleet is not None and fleet.hits == cached_in_replies and fleet.prompt == resent, (fleet, cached_in_replies)
