"""bench/agent_trace.py: the coding-agent trace has the shape its docstring claims (>= 24 sessions of several
agents, a shared prefix per agent, conversations that grow append-only to several times that prefix by
mid-session), it is the same for a seed, and the replicas' sizing follows the Kimi-K3 host derivation."""

from __future__ import annotations

from bench.agent_trace import (
    AGENT_CONTEXT_TOKENS,
    KIMI_K3,
    MAX_CHECKPOINTS,
    MIB,
    TINY,
    AgentShape,
    coding_agent_trace,
    held,
    replica_sizing,
    request_tokens,
    reuse_bounds,
)
from kimik3_reconciler.model.catalog import CACHE_RAM_DEFAULT_MIB

TRACE = coding_agent_trace()


def test_the_trace_is_the_same_for_a_seed_and_another_for_another_seed():
    assert coding_agent_trace() == TRACE
    assert coding_agent_trace(seed=41) != TRACE


def test_at_least_24_sessions_of_several_agents_each_of_several_turns():
    assert len(TRACE) >= 24 and len({s.name for s in TRACE}) == len(TRACE)
    agents = {s.agent for s in TRACE}
    assert len(agents) >= 4
    assert all(sum(s.agent == a for s in TRACE) >= 6 for a in agents)
    assert all(s.turns == AgentShape().turns >= 8 for s in TRACE)


def test_an_agents_sessions_share_its_system_prompt_and_tools_and_no_other_agent_does():
    systems = {s.agent: s.system for s in TRACE}
    assert all(s.system == systems[s.agent] for s in TRACE)
    assert len(set(systems.values())) == len(systems)
    assert all("Tools: [" in system and '"parameters"' in system for system in systems.values())
    assert all(s.task not in {o.task for o in TRACE if o is not s} for s in TRACE)  # every conversation its own


def test_each_turn_resends_the_conversation_so_far_and_appends_a_call_and_a_result():
    for session in TRACE:
        for turn in range(1, session.turns):
            before, now = session.messages(turn - 1), session.messages(turn)
            assert now[: len(before)] == before and len(now) == len(before) + 2
            assert now[-2]["role"] == "assistant" and '"tool"' in now[-2]["content"]
            assert now[-1]["content"].startswith("tool result: ")


def test_mid_session_the_conversation_is_several_times_the_shared_prefix():
    """The docstring's shape: a shared prefix of ~1,000 tokens, +~700 a turn; ~2.9x at turn 4, ~5x at the last."""
    for session in TRACE:
        shared = len(session.system)
        assert 900 <= shared <= 1200
        growth = [session.conversation_chars(t) - session.conversation_chars(t - 1) for t in range(1, session.turns)]
        assert all(650 <= g <= 800 for g in growth)
        assert 2.5 <= session.conversation_chars(session.turns // 2) / shared <= 3.5
        assert 4.5 <= session.conversation_chars(session.turns - 1) / shared <= 6


def test_the_shared_prefix_is_about_a_quarter_of_the_prompt_tokens_and_a_perfect_router_reuses_about_four_fifths():
    """The bounds the docs quote: round robin holding only the agents' system prompts reuses their share; a router
    that always finds the conversation's last turn reuses all but each turn's new messages: ~3x the first."""
    shared, ceiling = reuse_bounds(TRACE)
    assert 0.25 <= shared <= 0.30 and 0.78 <= ceiling <= 0.85
    assert 2.8 <= ceiling / shared <= 3.2


def test_a_kimi_k3_conversation_mid_session_fills_most_of_the_default_prompt_cache():
    assert KIMI_K3.kv_bytes_per_token == 24 * 576 * 2 == 27_648
    assert round(KIMI_K3.state_bytes / MIB, 1) == 147.7  # 69 KDA layers of 32 heads of 128, conv 4, F32
    conversation = KIMI_K3.conversation_bytes(AGENT_CONTEXT_TOKENS, MAX_CHECKPOINTS)
    assert 5 * (1 << 30) < conversation < 6 * (1 << 30)
    assert held(CACHE_RAM_DEFAULT_MIB, conversation) == 1
    assert held(CACHE_RAM_DEFAULT_MIB, KIMI_K3.conversation_bytes(AGENT_CONTEXT_TOKENS, 0)) == 6  # without checkpoints


def test_a_replicas_prompt_cache_holds_as_many_mid_session_conversations_as_the_host_and_a_slot_the_longest():
    sizing = replica_sizing(TRACE)
    assert TINY.kv_bytes_per_token == 2 * 576 * 2 and TINY.state_bytes == 2 * (3 * 3 * 64 + 16 * 16 * 4) * 4
    conversation = TINY.conversation_bytes(sizing.mid_tokens, 15)
    assert held(sizing.cache_ram_mib, conversation) == sizing.host_held == 1
    assert sizing.cache_ram_mib * MIB < 2 * conversation
    assert sizing.clients == 3 * sizing.parallel  # as many sessions in flight per replica as slots, as on the host
    longest = max(request_tokens(s, s.turns - 1) for s in TRACE)
    assert longest < sizing.ctx_size // sizing.parallel
