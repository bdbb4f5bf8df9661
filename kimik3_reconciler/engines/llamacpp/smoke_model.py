"""Write a tiny random-weights GGUF of architecture `kimi-k3` that llama.cpp b11434's llama-server loads.

The model follows the verified variant of reference/llama-cpp.md §4.6: layers alternate KDA
(recurrent) and MLA attention, layer 0 has a dense FFN and the others a latent MoE (8 experts,
top-2, 1 shared expert), cross-layer residuals with block size 2, a q_lora path, an MLA latent of
512 + 64 (production-like, so quantized KV caches work) and a 260-token byte-level vocabulary.
All weights are F32 and drawn from `numpy.random.default_rng(seed)`, so the same arguments
always give byte-identical files (about 2 MB in all). The weights are random: the server answers
with nonsense text, and the first shard says so (`kimik3.weights = "random"`, model/weights.py), so
`kimik3 verify` reports its content checks as "not checkable (random weights)", never as passed.

Shards follow llama-gguf-split: `<stem>-00001-of-0000N.gguf`, all metadata in the first shard,
and every shard carries `split.no` (u16), `split.count` (u16) and `split.tensors.count` (i32).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from kimik3_reconciler.model.weights import RANDOM_WEIGHTS, WEIGHTS_KEY

ARCH = "kimi-k3"
SPLIT_NAME_FORMAT = "{stem}-{no:05d}-of-{count:05d}.gguf"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("[BOS]", "[EOS]", "<|im_start|>", "<|im_end|>")  # ids 256..259
BOS_ID, EOS_ID, IM_END_ID = 256, 257, 259

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3


@dataclass(frozen=True)
class TinyDims:
    """Hyper-parameters of the tiny model (names as in reference/llama-cpp.md §4.2)."""

    n_embd: int = 64
    n_head: int = 4
    kda_head_dim: int = 16  # d_inner = n_head * kda_head_dim
    d_conv: int = 4
    q_lora_rank: int = 32
    kv_lora_rank: int = 512
    qk_rope: int = 64
    qk_nope: int = 32
    v_head: int = 32
    n_ff: int = 128  # dense FFN width
    n_expert: int = 8
    n_expert_used: int = 2
    n_expert_shared: int = 1
    expert_ff: int = 32
    expert_latent: int = 32
    res_block_size: int = 2
    dense_lead: int = 1
    context_length: int = 4096

    @property
    def d_inner(self) -> int:
        return self.n_head * self.kda_head_dim

    @property
    def key_length_mla(self) -> int:
        return self.qk_nope + self.qk_rope


def is_kda_layer(index: int) -> bool:
    """Even layers are KDA (recurrent), odd layers are MLA."""
    return index % 2 == 0


# --- vocabulary -------------------------------------------------------------------------------


def byte_level_tokens() -> list[str]:
    """GPT-2's bytes_to_unicode alphabet, in byte order: one token per byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = 0
    tokens = []
    for byte in range(256):
        if byte in printable:
            tokens.append(chr(byte))
        else:
            tokens.append(chr(256 + extra))
            extra += 1
    return tokens


def vocabulary() -> tuple[list[str], list[int]]:
    """The 260 tokens and their types: 256 byte tokens, then the control tokens."""
    tokens = byte_level_tokens() + list(SPECIAL_TOKENS)
    types = [TOKEN_TYPE_NORMAL] * 256 + [TOKEN_TYPE_CONTROL] * len(SPECIAL_TOKENS)
    return tokens, types


# --- metadata ---------------------------------------------------------------------------------


def add_model_metadata(writer: GGUFWriter, dims: TinyDims, layers: int, n_vocab: int) -> None:
    """The `kimi-k3.*` hyper-parameters the b11434 loader reads (reference/llama-cpp.md §4.1)."""
    a = ARCH
    u32, f32 = writer.add_uint32, writer.add_float32
    writer.add_string("general.name", "Kimi-K3-tiny")
    # verify must not judge what random weights say (model/weights.py); llama.cpp ignores the key
    writer.add_string(WEIGHTS_KEY, RANDOM_WEIGHTS)
    u32("general.file_type", 0)  # ALL_F32
    u32(f"{a}.vocab_size", n_vocab)
    u32(f"{a}.context_length", dims.context_length)
    u32(f"{a}.embedding_length", dims.n_embd)
    u32(f"{a}.block_count", layers)
    u32(f"{a}.feed_forward_length", dims.n_ff)
    u32(f"{a}.attention.head_count", dims.n_head)
    head_count_kv = [0 if is_kda_layer(i) else 1 for i in range(layers)]
    writer.add_key_value(f"{a}.attention.head_count_kv", head_count_kv, GGUFValueType.ARRAY, GGUFValueType.UINT32)
    f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
    u32(f"{a}.attention.key_length", dims.kv_lora_rank + dims.qk_rope)
    u32(f"{a}.attention.value_length", dims.kv_lora_rank)
    u32(f"{a}.attention.key_length_mla", dims.key_length_mla)
    u32(f"{a}.attention.value_length_mla", dims.v_head)
    u32(f"{a}.attention.q_lora_rank", dims.q_lora_rank)
    u32(f"{a}.attention.kv_lora_rank", dims.kv_lora_rank)
    u32(f"{a}.rope.dimension_count", dims.qk_rope)
    u32(f"{a}.ssm.conv_kernel", dims.d_conv)
    u32(f"{a}.kda.head_dim", dims.kda_head_dim)
    f32(f"{a}.kda.gate_lower_bound", -5.0)
    u32(f"{a}.expert_count", dims.n_expert)
    u32(f"{a}.expert_used_count", dims.n_expert_used)
    u32(f"{a}.expert_feed_forward_length", dims.expert_ff)
    u32(f"{a}.expert_shared_count", dims.n_expert_shared)
    u32(f"{a}.leading_dense_block_count", dims.dense_lead)
    f32(f"{a}.expert_weights_scale", 1.0)
    writer.add_bool(f"{a}.expert_weights_norm", True)
    u32(f"{a}.expert_gating_func", 2)  # sigmoid
    u32(f"{a}.expert_latent_length", dims.expert_latent)
    u32(f"{a}.attn_res.block_size", dims.res_block_size)
    f32(f"{a}.activation.situ_beta", 1.0)
    f32(f"{a}.activation.situ_linear_beta", 1.0)


def add_tokenizer_metadata(writer: GGUFWriter, tokens: list[str], types: list[int]) -> None:
    """A gpt2/kimi-k2 byte-level tokenizer (no merges needed with pre = kimi-k2) and a chat template."""
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_string("tokenizer.ggml.pre", "kimi-k2")
    writer.add_key_value("tokenizer.ggml.tokens", tokens, GGUFValueType.ARRAY, GGUFValueType.STRING)
    writer.add_key_value("tokenizer.ggml.token_type", types, GGUFValueType.ARRAY, GGUFValueType.INT32)
    writer.add_uint32("tokenizer.ggml.bos_token_id", BOS_ID)
    writer.add_uint32("tokenizer.ggml.eos_token_id", IM_END_ID)
    writer.add_uint32("tokenizer.ggml.eot_token_id", IM_END_ID)
    writer.add_uint32("tokenizer.ggml.padding_token_id", EOS_ID)
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_bool("tokenizer.ggml.add_eos_token", False)
    writer.add_string("tokenizer.chat_template", CHAT_TEMPLATE)


# --- tensors ----------------------------------------------------------------------------------


class _Weights:
    """Draws F32 tensors from one seeded generator; shapes are given in ggml `ne` order."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def normal(self, *ne: int, scale: float = 0.02) -> np.ndarray:
        return (self.rng.standard_normal(tuple(reversed(ne))) * scale).astype(np.float32)

    def ones(self, *ne: int) -> np.ndarray:
        return np.ones(tuple(reversed(ne)), dtype=np.float32)


def kda_tensors(w: _Weights, d: TinyDims) -> dict[str, np.ndarray]:
    """One KDA (recurrent) attention block, without the `blk.N.` prefix."""
    di, hd = d.d_inner, d.kda_head_dim
    a_log = w.rng.uniform(0.0, 1.0, d.n_head).astype(np.float32)
    return {
        "ssm_conv1d_q.weight": w.normal(d.d_conv, 1, di, scale=0.3),
        "ssm_conv1d_k.weight": w.normal(d.d_conv, 1, di, scale=0.3),
        "ssm_conv1d_v.weight": w.normal(d.d_conv, 1, di, scale=0.3),
        "attn_q.weight": w.normal(d.n_embd, di),
        "attn_k.weight": w.normal(d.n_embd, di),
        "attn_v.weight": w.normal(d.n_embd, di),
        "ssm_f_a.weight": w.normal(d.n_embd, hd),
        "ssm_f_b.weight": w.normal(hd, di),
        "ssm_beta.weight": w.normal(d.n_embd, d.n_head),
        "ssm_a": -np.exp(a_log),
        "ssm_dt.bias": w.normal(di),
        "ssm_g.weight": w.normal(d.n_embd, di),
        "ssm_norm.weight": w.ones(hd),
        "attn_output.weight": w.normal(di, d.n_embd),
    }


def mla_tensors(w: _Weights, d: TinyDims) -> dict[str, np.ndarray]:
    """One MLA attention block in the absorbed (k_b/v_b) form the converter writes."""
    r, q, nh = d.kv_lora_rank, d.q_lora_rank, d.n_head
    return {
        "attn_q_a_norm.weight": w.ones(q),
        "attn_q_a.weight": w.normal(d.n_embd, q),
        "attn_q_b.weight": w.normal(q, nh * d.key_length_mla),
        "attn_kv_a_norm.weight": w.ones(r),
        "attn_kv_a_mqa.weight": w.normal(d.n_embd, r + d.qk_rope),
        "attn_k_b.weight": w.normal(d.qk_nope, r, nh),
        "attn_v_b.weight": w.normal(r, d.v_head, nh),
        "attn_gate.weight": w.normal(d.n_embd, nh * d.v_head),
        "attn_output.weight": w.normal(nh * d.v_head, d.n_embd),
    }


def dense_ffn_tensors(w: _Weights, d: TinyDims) -> dict[str, np.ndarray]:
    return {
        "ffn_gate.weight": w.normal(d.n_embd, d.n_ff),
        "ffn_up.weight": w.normal(d.n_embd, d.n_ff),
        "ffn_down.weight": w.normal(d.n_ff, d.n_embd),
    }


def moe_ffn_tensors(w: _Weights, d: TinyDims) -> dict[str, np.ndarray]:
    """Latent MoE: router, routed experts in the latent space, latent projections, shared expert."""
    lat, fe, ne = d.expert_latent, d.expert_ff, d.n_expert
    fs = fe * max(1, d.n_expert_shared)
    return {
        "ffn_gate_inp.weight": w.normal(d.n_embd, ne, scale=0.1),
        "exp_probs_b.bias": np.zeros(ne, dtype=np.float32),
        "ffn_gate_exps.weight": w.normal(lat, fe, ne),
        "ffn_up_exps.weight": w.normal(lat, fe, ne),
        "ffn_down_exps.weight": w.normal(fe, lat, ne),
        "ffn_routed_down.weight": w.normal(d.n_embd, lat),
        "ffn_routed_up.weight": w.normal(lat, d.n_embd),
        "ffn_routed_norm.weight": w.ones(lat),
        "ffn_gate_shexp.weight": w.normal(d.n_embd, fs),
        "ffn_up_shexp.weight": w.normal(d.n_embd, fs),
        "ffn_down_shexp.weight": w.normal(fs, d.n_embd),
    }


def layer_tensors(w: _Weights, d: TinyDims, index: int) -> dict[str, np.ndarray]:
    """Every tensor of block `index`, with its `blk.N.` prefix."""
    block = {"attn_norm.weight": w.ones(d.n_embd), "ffn_norm.weight": w.ones(d.n_embd)}
    if d.res_block_size > 0:
        block["attn_res_score.weight"] = w.normal(d.n_embd, scale=0.1)
        block["ffn_res_score.weight"] = w.normal(d.n_embd, scale=0.1)
    block.update(kda_tensors(w, d) if is_kda_layer(index) else mla_tensors(w, d))
    block.update(dense_ffn_tensors(w, d) if index < d.dense_lead else moe_ffn_tensors(w, d))
    return {f"blk.{index}.{name}": array for name, array in block.items()}


def model_tensors(seed: int, d: TinyDims, layers: int, n_vocab: int) -> dict[str, np.ndarray]:
    """All tensors in file order: embeddings, the blocks, then the output head."""
    w = _Weights(seed)
    tensors = {"token_embd.weight": w.normal(d.n_embd, n_vocab, scale=1.0)}
    for index in range(layers):
        tensors.update(layer_tensors(w, d, index))
    if d.res_block_size > 0:
        tensors["output_res_score.weight"] = w.normal(d.n_embd, scale=0.1)
    tensors["output_norm.weight"] = w.ones(d.n_embd)
    tensors["output.weight"] = w.normal(d.n_embd, n_vocab)
    return tensors


# --- files ------------------------------------------------------------------------------------


def shard_paths(out_dir: Path, stem: str, shards: int) -> list[Path]:
    """llama.cpp split naming (`llama_split_path`); a single shard is a plain `<stem>.gguf`."""
    if shards == 1:
        return [out_dir / f"{stem}.gguf"]
    return [out_dir / SPLIT_NAME_FORMAT.format(stem=stem, no=i + 1, count=shards) for i in range(shards)]


def split_evenly(names: list[str], shards: int) -> list[list[str]]:
    """Contiguous groups of tensor names, as even in count as possible, none empty."""
    if not 1 <= shards <= len(names):
        raise ValueError(f"shards must be between 1 and {len(names)}, got {shards}")
    base, extra = divmod(len(names), shards)
    groups, start = [], 0
    for i in range(shards):
        end = start + base + (1 if i < extra else 0)
        groups.append(names[start:end])
        start = end
    return groups


def write_shard(
    path: Path,
    tensors: dict[str, np.ndarray],
    fill_metadata: Callable[[GGUFWriter], None] | None,
    split: tuple[int, int, int] | None,
) -> None:
    """Write one GGUF atomically; `fill_metadata(writer)` adds the model KV (first shard only)."""
    partial = path.with_name(path.name + ".partial")
    writer = GGUFWriter(partial, ARCH)
    if fill_metadata is None:
        writer.kv_data = [{}]  # like llama-gguf-split: later shards hold only the split keys
    else:
        fill_metadata(writer)
    if split is not None:
        split_no, split_count, total_tensors = split
        writer.add_uint16("split.no", split_no)
        writer.add_uint16("split.count", split_count)
        writer.add_int32("split.tensors.count", total_tensors)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)


def as_f16(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same weights re-typed: matrices to F16; what the converter keeps F32 stays F32 (1-D
    tensors, norms, the router, ssm_conv1d_*, and every tensor not named *.weight)."""

    def keep_f32(name: str, array: np.ndarray) -> bool:
        return (
            array.ndim < 2
            or not name.endswith(".weight")
            or "norm" in name
            or "ffn_gate_inp" in name
            or "ssm_conv1d" in name
        )

    return {n: a if keep_f32(n, a) else a.astype(np.float16) for n, a in tensors.items()}


def write_tiny_kimi_k3(
    out_dir: Path,
    stem: str,
    *,
    shards: int = 2,
    seed: int = 0,
    layers: int = 4,
    dims: TinyDims | None = None,
    f16: bool = False,
) -> list[Path]:
    """Write the tiny model as `shards` GGUF files in `out_dir`; return their paths, first shard first.
    `dims` makes bigger synthetic models (GB-sized, for placement tests on a GPU)."""
    if layers < 2:
        raise ValueError("layers must be at least 2 (one KDA and one MLA layer)")
    dims = dims or TinyDims()
    tokens, types = vocabulary()
    tensors = model_tensors(seed, dims, layers, len(tokens))
    if f16:
        tensors = as_f16(tensors)

    def fill_metadata(writer: GGUFWriter) -> None:
        add_model_metadata(writer, dims, layers, len(tokens))
        add_tokenizer_metadata(writer, tokens, types)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = shard_paths(out_dir, stem, shards)
    for index, (path, names) in enumerate(zip(paths, split_evenly(list(tensors), shards))):
        split = (index, shards, len(tensors)) if shards > 1 else None
        write_shard(path, {n: tensors[n] for n in names}, fill_metadata if index == 0 else None, split)
    return paths


def main(argv: list[str] | None = None) -> None:
    """`python -m kimik3_reconciler.engines.llamacpp.smoke_model OUT_DIR STEM --shards 2 --seed 0`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("stem")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args(argv)
    for path in write_tiny_kimi_k3(args.out_dir, args.stem, shards=args.shards, seed=args.seed, layers=args.layers):
        print(path)


if __name__ == "__main__":
    main()
