"""A GGUF header reader (pure: bytes in, tensor table out) for the placement forecast.

The forecast must run before anything is downloaded, from a ranged read of each shard's first
bytes, so it parses just the header: metadata key/values and the tensor infos (name, shape,
ggml type); tensor data is never touched. Sizes per ggml type come from ggml's block layout.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from kimik3_reconciler.engines.base import HeaderShort, HeaderUnreadable
from kimik3_reconciler.engines.llamacpp import local_files
from kimik3_reconciler.engines.llamacpp.recurrent_state import kda_layer_state_bytes
from kimik3_reconciler.model.facts import ModelFact, ModelLayout, RemoteFile

_LAYER = re.compile(r"^blk\.(\d+)\.")
# the tensors --n-cpu-moe / --fit move to the CPU (reference/llama-cpp.md §1.2.2)
_EXPERT = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps\.")


class NeedMoreBytes(HeaderShort):
    """The header is longer than the bytes given; `at_least` is a size that will do."""

    def __init__(self, at_least: int):
        super().__init__(at_least, f"need at least {at_least} bytes of the GGUF header")


class NotGguf(HeaderUnreadable):
    pass


# ggml type id -> (elements per block, bytes per block)  (ggml.h / ggml.c type traits)
TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    9: (32, 36),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    24: (1, 1),
    25: (1, 2),
    26: (1, 4),
    27: (1, 8),
    28: (1, 8),
    29: (256, 56),
    30: (1, 2),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
}
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml ne order
    ggml_type: int

    @property
    def nbytes(self) -> int:
        block, size = TYPE_SIZES[self.ggml_type]
        elements = 1
        for n in self.shape:
            elements *= n
        return elements // block * size


@dataclass(frozen=True)
class GgufHeader:
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise NeedMoreBytes(max(2 * len(self.data), self.pos + n + (1 << 20)))
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.scalar("<Q")).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == 8:
            return self.string()
        if kind == 9:
            item, count = self.scalar("<I"), self.scalar("<Q")
            if item == 8 and count > 4096:  # token lists: skip the strings, keep the count
                for _ in range(count):
                    self.take(self.scalar("<Q"))
                return {"skipped_strings": count}
            return [self.value(item) for _ in range(count)]
        raise NotGguf(f"unknown GGUF value type {kind}")


def parse_gguf_header(data: bytes) -> GgufHeader:
    """Parse the metadata and tensor infos; raises NeedMoreBytes when `data` stops too early."""
    reader = _Reader(data)
    if reader.take(4) != b"GGUF":
        raise NotGguf("not a GGUF file (bad magic)")
    version = reader.scalar("<I")
    if version < 2:
        raise NotGguf(f"GGUF version {version} is too old")
    n_tensors, n_kv = reader.scalar("<Q"), reader.scalar("<Q")
    metadata = {}
    for _ in range(n_kv):
        key = reader.string()
        metadata[key] = reader.value(reader.scalar("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = reader.string()
        shape = tuple(reader.scalar("<Q") for _ in range(reader.scalar("<I")))
        kind = reader.scalar("<I")
        reader.scalar("<Q")  # offset in the data section: not needed for sizes
        tensors.append(TensorInfo(name, shape, kind))
    return GgufHeader(metadata, tuple(tensors))


def summarize(headers: list[GgufHeader]) -> ModelLayout:
    """Per-layer dense and expert bytes over all shards, plus what the KV cache costs per token."""
    meta = next((h.metadata for h in headers if "general.architecture" in h.metadata), headers[0].metadata)
    arch = meta.get("general.architecture", "kimi-k3")
    n_layer = int(meta.get(f"{arch}.block_count", 0))
    dense, experts = [0] * n_layer, [0] * n_layer
    output = token_embd = n_vocab = 0
    for tensor in (t for h in headers for t in h.tensors):
        match = _LAYER.match(tensor.name)
        if match and int(match.group(1)) < n_layer:
            i = int(match.group(1))
            if _EXPERT.search(tensor.name):
                experts[i] += tensor.nbytes
            else:
                dense[i] += tensor.nbytes
        elif tensor.name.startswith("token_embd"):
            n_vocab = tensor.shape[-1] if len(tensor.shape) > 1 else 0
            token_embd += tensor.nbytes
        else:
            output += tensor.nbytes  # output.weight, output_norm, output_res_score
    kv_heads = meta.get(f"{arch}.attention.head_count_kv", [1] * n_layer)
    kv_heads = kv_heads if isinstance(kv_heads, list) else [kv_heads] * n_layer
    mla_layers = sum(1 for h in kv_heads if h)
    # KDA (head_count_kv 0) layers keep an F32 recurrent state per slot (reference/llama-cpp.md §4.5); layer 0's
    # head count sizes them (§4.1: "layer 0's value is used for KDA dims").
    heads = meta.get(f"{arch}.attention.head_count", 0)
    n_head = int(heads[0] if isinstance(heads, list) and heads else heads or 0)
    head_dim, d_conv = int(meta.get(f"{arch}.kda.head_dim", 0)), int(meta.get(f"{arch}.ssm.conv_kernel", 0))
    state = kda_layer_state_bytes(n_head, head_dim, d_conv)
    kda_layers = sum(1 for h in kv_heads[:n_layer] if not h)
    latent = int(meta.get(f"{arch}.attention.kv_lora_rank", 0)) + int(meta.get(f"{arch}.rope.dimension_count", 0))
    return ModelLayout(
        n_layer=n_layer,
        layer_dense=tuple(dense),
        layer_experts=tuple(experts),
        output_bytes=output,
        token_embd_bytes=token_embd,
        kv_bytes_per_token=mla_layers * latent * 2,
        n_embd=int(meta.get(f"{arch}.embedding_length", 0)),
        n_vocab=n_vocab,
        context_length=int(meta.get(f"{arch}.context_length", 0)),
        state_bytes_per_slot=kda_layers * state,
    )


class GgufHeaders:
    """The GGUF header reader as the engine hands it out (engines/base.py's WeightHeaders)."""

    def layout_files(self, model: ModelFact) -> list[RemoteFile]:
        """The quant's shards (`<quant>/…-0000N-of-0000M.gguf`, or its one file)."""
        return [f for f in model.files if f.path.startswith(model.quant + "/") and f.path.endswith(".gguf")]

    def read(self, data: bytes) -> GgufHeader:
        return parse_gguf_header(data)

    def metadata(self, header: GgufHeader) -> dict[str, Any]:
        return header.metadata

    def layout(self, headers: list[GgufHeader]) -> ModelLayout:
        return summarize(headers)

    def local_files(self, names: list[str], folder: bool) -> list[str]:
        return local_files.served_files(names, folder)

    def check_start(self, name: str, head: bytes) -> None:
        local_files.check_start(name, head)


HEADERS = GgufHeaders()
