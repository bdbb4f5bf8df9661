"""A coding-agent trace for bench/fleet_cache.py (`--trace agent`, issue 40), and the replicas sized like a Kimi-K3
host for it: conversations that dwarf the shared prompt, on replicas whose prompt caches hold as few of them,
against the sessions in flight, as a Kimi-K3 host's holds of real ones.

**The shape, from real agents.** A coding agent's request is its system prompt and tool schemas (shared by every
session of that agent), the task, then per step the agent's tool call and the tool's result (file contents, search
hits, test logs), re-sent whole every turn. Public figures: Claude Code's `/context` shows a 2.6-3.2k-token system
prompt and 11.6-17.6k tokens of tool schemas (15-20k shared), 30.5k tokens of messages in a 51k-token session, a
200k window compacted ~33k before its end; Manus reports ~50 tool calls a task and 100:1 input to output tokens
("Context Engineering for AI Agents", 2025). So a step adds about a tenth of the shared prefix, and by the middle
of a task the conversation is ~3x the shared prefix, ~6x at its end. Scaled to a bench that must run a phase in a
few minutes on two cores (the tiny model's ~1 token a byte), `AgentShape`'s defaults keep those ratios and
compress the ~50 steps into 8 turns: a shared prefix of ~1,000 tokens (200 of instructions, ~800 of tool schemas),
a task of 150, and per turn a call of ~100 and a result of ~600 (+ ~700 a turn, 0.7x the shared prefix). At turn 4
(mid-session) the conversation is ~2.9x the shared prefix, at turn 7 ~5x; the ~30 k prompt tokens a session.
Assumed, not measured: the step count's compression (a turn here adds 7x what a real step adds, so a replica that
holds a stale prefix of a conversation, a few turns old, saves less of it than it would on a real agent), and that
the agents' sessions are independent (no sub-agents sharing a conversation).

**The replicas, from a Kimi-K3 host.** What decides a hit is whether a replica still holds the conversation: in
a slot (`--parallel`), or in llama-server's host prompt cache (`--cache-ram`, MiB; a slot's conversation is saved
there when the request that takes the slot keeps little of it (seen: saved at 31 % kept, not at 53 %), and loaded
back by the next request that shares more of it than the slot does). A cached conversation on a hybrid model is its
MLA KV cache plus its KDA recurrent state and the slot's context checkpoints (each a copy of that state;
llama-server keeps up to 32 a slot, 2-3 a turn were made on one slot here). Kimi-K3 (`KIMI_K3`): 93 layers, MLA's K
row 576 (kv_lora_rank 512 + rope 64, f16 per seed 000; reference/llama-cpp.md §4); which layers are MLA and the KDA
dimensions are not in our sources: assumed those of the public Kimi-Linear-48B-A3B config (every fourth layer and
the last MLA: 24 MLA, 69 KDA; 32 KDA heads of 128, conv 4): 27,648 bytes a token and 148 MiB a state. A mid-session
agent conversation of 40 k tokens (tens of thousands, assumed) with its 32 checkpoints is ~5.8 GiB: kimik3's default
8192 MiB prompt cache holds **1** of them (llama-server always keeps one; without checkpoints it would hold 6). A
host serves 8 slots (`hybrid-q2.yaml`, `allvram-iq2xxs.yaml`) and, at the load it is sized for, about as many
sessions in flight (Kimi-K3 decodes a turn for tens of seconds; an agent's tool runs in seconds): it holds 9
conversations against 8 in flight (24 across 3 hosts). The bench's replicas (`replica_sizing`): 4 slots, 3x4 = 12
sessions in flight (`--clients`), a slot's context over the longest conversation (8192 tokens), and a prompt cache
that holds the host's count of the trace's mid-session conversations on the tiny model (`TINY`: 2,304 bytes a
token): 1 conversation of ~4,100 tokens, `--cache-ram 10`. So a replica holds 5 against 4 in flight (the host 9
against 8: round robin is, if anything, favoured).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from kimik3_reconciler.engines.llamacpp.recurrent_state import KIMI_K3_ASSUMED, KdaShape
from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, is_kda_layer
from kimik3_reconciler.model.catalog import CACHE_RAM_DEFAULT_MIB, CTX_CHECKPOINTS_DEFAULT

MIB = 1 << 20
WORDS = (
    "file path read write list search patch test build deploy config schema string integer array object "
    "required description parameters function returns error status result value token cache route replica "
    "server client request response stream chunk prompt system user assistant tool call argument"
).split()


def words(rng: random.Random, chars: int) -> str:
    """About `chars` characters of the bench's vocabulary, drawn from `rng`."""
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


@dataclass(frozen=True)
class Session:
    """One agent conversation: its system prompt (the agent's, shared by its sessions), its opening task and, per
    turn after the first, the assistant's tool call and the tool's result that the next request adds."""

    name: str
    agent: int
    system: str
    task: str
    steps: tuple[tuple[str, str], ...]  # (assistant's tool call, tool result)

    def messages(self, turn: int) -> list[dict]:
        """The request of turn `turn` (0-based): the conversation so far, re-sent whole as an agent does."""
        out = [{"role": "system", "content": self.system}, {"role": "user", "content": self.task}]
        for call, result in self.steps[:turn]:
            out += [{"role": "assistant", "content": call}, {"role": "user", "content": f"tool result: {result}"}]
        return out

    @property
    def turns(self) -> int:
        return len(self.steps) + 1

    def conversation_chars(self, turn: int) -> int:
        """What turn `turn`'s request holds beyond the shared system prompt: the task, the calls and results."""
        return sum(len(m["content"]) for m in self.messages(turn)[1:])


@dataclass(frozen=True)
class AgentShape:
    """The trace's sizes in characters (the tiny model's vocabulary is bytes: ~1 token each). Defaults: the module
    docstring's argument."""

    sessions: int = 24
    agents: int = 4
    turns: int = 8
    instructions_chars: int = 200  # the system prompt's prose
    tools: int = 4  # tool schemas per agent (JSON, ~170 characters each)
    task_chars: int = 150
    call_chars: int = 100  # the assistant's tool call
    result_chars: int = 600  # the tool's result: a file, search hits or a test log


TOOLS = ("read_file", "search_code", "run_tests", "edit_file", "list_dir", "run_shell", "git_diff", "web_fetch")


def _schemas(rng: random.Random, agent: int, count: int) -> str:
    tools = [
        {
            "name": f"{TOOLS[(agent + i) % len(TOOLS)]}_{agent}",
            "description": words(rng, 40),
            "parameters": {"type": "object", "properties": {w: {"type": "string"} for w in rng.sample(WORDS, 2)}},
        }
        for i in range(count)
    ]
    return json.dumps(tools)


def _result(rng: random.Random, chars: int) -> str:
    """A tool's result: a file's lines, search hits or a test log, about `chars` long."""
    kind = rng.randrange(3)
    lines: list[str] = []
    while sum(len(line) + 1 for line in lines) < chars:
        if kind == 0:
            lines.append(f"{len(lines) + 1:4d}  {words(rng, 40)}")
        elif kind == 1:
            lines.append(f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py:{rng.randrange(1, 900)}: {words(rng, 30)}")
        else:
            lines.append(f"tests/test_{rng.choice(WORDS)}.py::{rng.choice(WORDS)} {rng.choice(('PASSED', 'FAILED'))}")
    return "\n".join(lines)[:chars]


def coding_agent_trace(shape: AgentShape = AgentShape(), seed: int = 40) -> list[Session]:
    """`shape.sessions` conversations of `shape.agents` agents, each `shape.turns` requests: the agent's system
    prompt and tool schemas (shared by its sessions), a task, then per turn a tool call and a large result.
    Deterministic for a seed."""
    rng = random.Random(seed)
    systems = [
        f"You are coding agent {agent}. {words(rng, shape.instructions_chars)}\n"
        f"Tools: {_schemas(rng, agent, shape.tools)}"
        for agent in range(shape.agents)
    ]
    out = []
    for index in range(shape.sessions):
        agent = index % shape.agents
        steps = tuple(
            (
                json.dumps({"tool": TOOLS[rng.randrange(len(TOOLS))], "arguments": words(rng, shape.call_chars - 40)}),
                _result(rng, shape.result_chars),
            )
            for _ in range(shape.turns - 1)
        )
        task = f"Task {index}: {words(rng, shape.task_chars)}"
        out.append(Session(f"a{index}", agent, systems[agent], task, steps))
    return out


@dataclass(frozen=True)
class HybridCache:
    """What one conversation costs in llama-server's prompt cache on a hybrid KDA + MLA model: the MLA layers' f16
    K rows for its tokens (V is a view of the latent), and per KDA layer a recurrent state (conv + delta state,
    F32; reference/llama-cpp.md §4.5) once for the sequence and once per context checkpoint."""

    mla_layers: int
    kda_layers: int
    latent: int  # kv_lora_rank + qk_rope_head_dim: the K row
    kda_heads: int
    kda_head_dim: int
    d_conv: int

    @property
    def kv_bytes_per_token(self) -> int:
        return self.mla_layers * self.latent * 2

    @property
    def state_bytes(self) -> int:
        return KdaShape(self.kda_layers, self.kda_heads, self.kda_head_dim, self.d_conv).state_bytes

    def conversation_bytes(self, tokens: int, checkpoints: int) -> int:
        return tokens * self.kv_bytes_per_token + (1 + checkpoints) * self.state_bytes


# Kimi-K3: 93 layers, K row 512 + 64 (reference/llama-cpp.md §4); the MLA/KDA split and KDA dims assumed from the
# public Kimi-Linear-48B-A3B config (the product's KIMI_K3_ASSUMED, which the sizing gate counts too).
KIMI_K3 = HybridCache(
    mla_layers=93 - KIMI_K3_ASSUMED.layers,
    kda_layers=KIMI_K3_ASSUMED.layers,
    latent=576,
    kda_heads=KIMI_K3_ASSUMED.heads,
    kda_head_dim=KIMI_K3_ASSUMED.head_dim,
    d_conv=KIMI_K3_ASSUMED.d_conv,
)
_TINY_LAYERS = 4  # write_tiny_kimi_k3's default, what tests/support/llama_replicas.py serves
_DIMS = TinyDims()
TINY = HybridCache(
    mla_layers=sum(not is_kda_layer(i) for i in range(_TINY_LAYERS)),
    kda_layers=sum(is_kda_layer(i) for i in range(_TINY_LAYERS)),
    latent=_DIMS.kv_lora_rank + _DIMS.qk_rope,
    kda_heads=_DIMS.n_head,
    kda_head_dim=_DIMS.kda_head_dim,
    d_conv=_DIMS.d_conv,
)
HOST_SLOTS = 8  # hybrid-q2.yaml and allvram-iq2xxs.yaml: parallel 8
AGENT_CONTEXT_TOKENS = 40_000  # a mid-session agent conversation (assumed: "tens of thousands")
MAX_CHECKPOINTS = CTX_CHECKPOINTS_DEFAULT  # a mid-session conversation of ~25 turns has them all
CHECKPOINTS_PER_TURN = 3  # seen on the tiny model (b11434): 2-3 made a request on one slot
TEMPLATE_TOKENS = 8  # the tiny model's chat template per message (<|im_start|>, role, newline, <|im_end|>)


def held(cache_mib: int, conversation_bytes: int) -> int:
    """Conversations a prompt cache of `cache_mib` holds (llama-server always keeps one, whatever its size)."""
    return max(1, cache_mib * MIB // conversation_bytes)


def request_tokens(session: Session, turn: int) -> int:
    """The tiny model's tokens for turn `turn`'s request: a byte a token plus the template's per message."""
    return sum(len(m["content"].encode()) + TEMPLATE_TOKENS for m in session.messages(turn))


@dataclass(frozen=True)
class ReplicaSizing:
    """A replica's llama-server sizes for the trace, and the host figures they follow."""

    parallel: int
    ctx_size: int  # all slots' (llama-server gives each slot ctx_size / parallel)
    cache_ram_mib: int
    clients: int  # sessions in flight across the 3 replicas
    host_held: int  # conversations a Kimi-K3 host's prompt cache holds
    host_conversation_gib: float
    mid_tokens: int  # the trace's mid-session request, tokens


def replica_sizing(trace: list[Session], replicas: int = 3, parallel: int = 4) -> ReplicaSizing:
    """Replicas that hold as many of `trace`'s conversations, against the sessions in flight, as a Kimi-K3 host
    holds of real ones: `parallel` slots each, as many sessions in flight per replica as slots (a host's 8 slots
    serve about 8), and a prompt cache that holds the host's count of the trace's mid-session conversations."""
    host_bytes = KIMI_K3.conversation_bytes(AGENT_CONTEXT_TOKENS, MAX_CHECKPOINTS)
    host_held = held(CACHE_RAM_DEFAULT_MIB, host_bytes)
    middle = trace[0].turns // 2
    mid_tokens = sorted(request_tokens(s, middle) for s in trace)[len(trace) // 2]
    checkpoints = min(MAX_CHECKPOINTS, CHECKPOINTS_PER_TURN * (middle + 1))
    cache_mib = math.ceil(host_held * TINY.conversation_bytes(mid_tokens, checkpoints) / MIB)
    longest = max(request_tokens(s, s.turns - 1) for s in trace)
    slot_ctx = 1 << math.ceil(math.log2(longest + 512))  # the reply's tokens too, and a power of two
    return ReplicaSizing(
        parallel, slot_ctx * parallel, cache_mib, replicas * parallel, host_held, host_bytes / (1 << 30), mid_tokens
    )


def reuse_bounds(trace: list[Session]) -> tuple[float, float]:
    """The trace's hit-rate bounds, counted from its text (a token a byte): the share of its prompt tokens that are
    agents' system prompts (what a router reuses that finds only those: round robin once its replicas hold none of
    the conversations), and what a router reuses that always finds each conversation's last turn and every
    conversation's system prompt (all but each turn's new messages)."""
    total = sum(request_tokens(s, t) for s in trace for t in range(s.turns))
    system = sum(len(s.system.encode()) + TEMPLATE_TOKENS for s in trace)
    last_turns = sum(request_tokens(s, t - 1) for s in trace for t in range(1, s.turns))
    shared = sum((len(s.system.encode()) + TEMPLATE_TOKENS) * s.turns for s in trace)
    return shared / total, (last_turns + system) / total
