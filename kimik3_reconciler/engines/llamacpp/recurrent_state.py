"""A KDA (recurrent) layer's state per sequence, and the Kimi-K3 shape kimik3 assumes until the GGUF headers say.

llama.cpp keeps, per KDA layer and per sequence (slot), an F32 conv state of 3*(d_conv-1)*di floats (q, k and v's
short convolutions) and a delta state of hd*hd*n_head floats, di = n_head*hd (`src/llama-hparams.cpp` n_embd_r,
n_embd_s; reference/llama-cpp.md §4.5). The same bytes are what one llama-server context checkpoint copies
(`LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`: a hybrid model's recurrent part), plus a few header bytes a layer.
Pure values; the GGUF summary (engines/llamacpp/gguf_header.py), the sizing gate and bench/agent_trace.py read it.
"""

from __future__ import annotations

from dataclasses import dataclass

F32 = 4


def kda_layer_state_bytes(n_head: int, head_dim: int, d_conv: int) -> int:
    """One KDA layer's state for one sequence, in bytes (conv + delta state, F32)."""
    d_inner = n_head * head_dim
    return (3 * max(0, d_conv - 1) * d_inner + head_dim * head_dim * n_head) * F32


@dataclass(frozen=True)
class KdaShape:
    """The KDA layers of a model: how many, and each one's heads, head size and conv kernel."""

    layers: int
    heads: int
    head_dim: int
    d_conv: int

    @property
    def state_bytes(self) -> int:
        """One sequence's recurrent state over all KDA layers (= one context checkpoint)."""
        return self.layers * kda_layer_state_bytes(self.heads, self.head_dim, self.d_conv)


# Kimi-K3: 93 layers (reference/llama-cpp.md §4). Which of them are KDA and the KDA dimensions are in no seed or
# reference: assumed those of the public Kimi-Linear-48B-A3B config (full attention every 4th layer and the last:
# 24 MLA, 69 KDA; 32 KDA heads of 128, conv 4), 147.7 MiB a sequence. The GGUF headers replace it once read.
KIMI_K3_ASSUMED = KdaShape(layers=69, heads=32, head_dim=128, d_conv=4)
KIMI_K3_ASSUMED_SOURCE = (
    "assumed until the GGUF headers are read: Kimi-Linear-48B-A3B's KDA shape, 69 layers of 32 heads of 128"
)
