"""A tiny random Llama-shaped checkpoint in safetensors, for the engines that serve a Hugging Face checkpoint (vLLM,
SGLang; issue 25): what the fixture hub serves as `kimik3-demo/Llama-tiny-random`, generated deterministically
(numpy only: the safetensors format and a byte-level BPE tokenizer are written by hand, nothing is committed).

    python -m kimik3_demo.checkpoint OUT_DIR

Shape: LlamaForCausalLM, hidden 256, 4 heads of head_dim 64 (vLLM's CPU attention refuses head_dim 16; 64 works:
shared/TESTING.md §10), 2 KV heads, 2 layers, intermediate 512, bf16, ~2.6 MB of weights in two shards plus
`model.safetensors.index.json`; `config.json`, `generation_config.json`, and a tokenizer (`tokenizer.json`:
byte-level BPE of the 256 bytes plus 4 special tokens, no merges; `tokenizer_config.json` with a chat template).
The weights are random: a server loads it and answers nonsense, and the shards' `__metadata__` says so
(`kimik3.weights: random`, as the tiny GGUF's key), which verify reads.
"""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

import numpy as np

from kimik3_reconciler.engines.llamacpp.smoke_model import byte_level_tokens

HIDDEN, HEADS, KV_HEADS, LAYERS, INTERMEDIATE = 256, 4, 2, 2, 512
HEAD_DIM = HIDDEN // HEADS
SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>")
MAX_POSITIONS = 2048
SHARDS = 2
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def vocabulary() -> dict[str, int]:
    vocab = {char: i for i, char in enumerate(byte_level_tokens())}
    vocab.update({token: len(vocab) + i for i, token in enumerate(SPECIAL)})
    return vocab


def tokenizer_json(vocab: dict[str, int]) -> dict:
    added = [
        {
            "id": vocab[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t in SPECIAL
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },
    }


def tokenizer_config(vocab: dict[str, int]) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL[0],
        "eos_token": SPECIAL[1],
        "pad_token": SPECIAL[1],
        "add_bos_token": False,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(vocab[t]): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t in SPECIAL
        },
    }


def model_config(vocab_size: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab_size,
        "bos_token_id": 256,
        "eos_token_id": 257,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "attention_bias": False,
        "mlp_bias": False,
    }


def _bf16(values: np.ndarray) -> bytes:
    """float32 -> bfloat16 bytes (the high half of each float, rounded to nearest even), little-endian."""
    bits = values.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def tensors(vocab_size: int, seed: int) -> dict[str, tuple[tuple[int, ...], bytes]]:
    """name -> (shape, bf16 bytes), in the HF Llama layout; normal(0, 0.02) weights, ones for the norms."""
    rng = np.random.default_rng(seed)
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (HIDDEN,),
            f"{p}.post_attention_layernorm.weight": (HIDDEN,),
            f"{p}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            f"{p}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{p}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{p}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        }
    shapes |= {"model.norm.weight": (HIDDEN,), "lm_head.weight": (vocab_size, HIDDEN)}
    out = {}
    for name, shape in shapes.items():
        values = (
            np.ones(shape, np.float32)
            if name.endswith("norm.weight")
            else rng.normal(0.0, 0.02, shape).astype(np.float32)
        )
        out[name] = (shape, _bf16(values))
    return out


def write_safetensors(path: Path, named: dict[str, tuple[tuple[int, ...], bytes]]) -> None:
    """The safetensors format: an 8-byte little-endian header length, the JSON header (padded with spaces to 8
    bytes), then the tensors' bytes back to back."""
    # kimik3.weights: verify (observe/served_weights.py) reads it to know the weights are random, as the tiny GGUF's key
    header: dict[str, object] = {"__metadata__": {"format": "pt", "kimik3.weights": "random"}}
    offset = 0
    for name, (shape, data) in named.items():
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        for _, data in named.values():
            out.write(data)


def write_tiny_llama(out_dir: Path, seed: int = 0) -> list[Path]:
    """Write the checkpoint's files into `out_dir` (created); return them. Same seed, same bytes."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary()
    named = tensors(len(vocab), seed)
    names = list(named)
    half = (len(names) + 1) // 2
    parts = [names[:half], names[half:]]
    weight_map, total, written = {}, 0, []
    for i, part in enumerate(parts, 1):
        shard = out_dir / f"model-{i:05d}-of-{SHARDS:05d}.safetensors"
        write_safetensors(shard, {n: named[n] for n in part})
        weight_map |= {n: shard.name for n in part}
        total += sum(len(named[n][1]) for n in part)
        written.append(shard)
    documents = {
        "model.safetensors.index.json": {"metadata": {"total_size": total}, "weight_map": weight_map},
        "config.json": model_config(len(vocab)),
        "generation_config.json": {"bos_token_id": 256, "eos_token_id": 257, "do_sample": False},
        "tokenizer.json": tokenizer_json(vocab),
        "tokenizer_config.json": tokenizer_config(vocab),
        "special_tokens_map.json": {"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "pad_token": SPECIAL[1]},
    }
    for name, document in documents.items():
        path = out_dir / name
        path.write_text(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    # Something the server does not need, to show the download leaves it out (model_files.checkpoint_file).
    (out_dir / "README.md").write_text("# Llama-tiny-random\n\nRandom weights for kimik3's tests.\n")
    written.append(out_dir / "README.md")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in write_tiny_llama(args.out_dir, args.seed):
        print(path)


if __name__ == "__main__":
    main()
