"""The safetensors checkpoint (issue 25 §2) on fakes: which files of the repo a vLLM/SGLang server opens, the
manifest key per location, a repo without safetensors refused before anything is fetched, and the fixture
checkpoint generated deterministically. The real hub and cache: tests/integration/test_checkpoint_download.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from support.fakes.host import FakeHost
from support.fakes.hub import FakeHub
from support.fakes.state import MemoryState

from kimik3_demo.checkpoint import HEAD_DIM, write_tiny_llama
from kimik3_demo.prepare import CHECKPOINT_REPO, checkpoint_repo, prepare_checkpoint_root
from kimik3_reconciler.model.model_files import CHECKPOINT, checkpoint_file, checkpoint_manifest_key
from kimik3_reconciler.observe.model_cache import collect_checkpoint

REV = "c4" * 20
KIMI_LIKE = {  # the shape of a Kimi/DeepSeek checkpoint repo's top level, plus what must be left out
    "model-00001-of-00002.safetensors": True,
    "model-00002-of-00002.safetensors": True,
    "model.safetensors.index.json": True,
    "config.json": True,
    "generation_config.json": True,
    "tokenizer_config.json": True,
    "tiktoken.model": True,
    "tokenization_kimi.py": True,
    "configuration_kimi.py": True,
    "chat_template.jinja": True,
    "special_tokens_map.json": True,
    "README.md": False,
    "LICENSE": False,
    "figures/bench.png": False,
    "original/consolidated.00.pth": False,
    "pytorch_model.bin": False,
    "model-Q4.gguf": False,
    "docs/deploy_guidance.md": False,
}


@pytest.mark.parametrize("path, wanted", KIMI_LIKE.items())
def test_the_files_a_server_opens_are_selected(path: str, wanted: bool) -> None:
    assert checkpoint_file(path) is wanted


def test_the_manifest_is_kept_per_location() -> None:
    one, other = (checkpoint_manifest_key("org/M", REV, cache) for cache in ("/a", "/b"))
    assert one != other and one.startswith(f"models/org--M/{REV}/{CHECKPOINT}@")


def test_collect_lists_the_checkpoint_files_only(tmp_path: Path) -> None:
    hub = FakeHub("org/M", REV, {path: b"x" * 8 for path in KIMI_LIKE}, tmp_path / "hub")
    fact = collect_checkpoint(
        "org/M", REV, None, str(tmp_path / "cache"), hub, MemoryState(tmp_path / "st"), FakeHost()
    )
    assert fact.quant == CHECKPOINT and fact.listing_error is None
    assert {f.path for f in fact.files} == {path for path, wanted in KIMI_LIKE.items() if wanted}
    assert set(fact.missing) == {f.path for f in fact.files}


def test_a_repo_without_safetensors_is_refused_before_a_fetch(tmp_path: Path) -> None:
    hub = FakeHub("org/M-GGUF", REV, {"config.json": b"{}", "Q4/m-00001-of-00001.gguf": b"g"}, tmp_path / "hub")
    fact = collect_checkpoint(
        "org/M-GGUF", REV, None, str(tmp_path / "cache"), hub, MemoryState(tmp_path / "st"), FakeHost()
    )
    assert not fact.files and "no *.safetensors at the top of the repository" in (fact.listing_error or "")


def test_the_fixture_checkpoint_is_deterministic_and_llama_shaped(tmp_path: Path) -> None:
    first, second = write_tiny_llama(tmp_path / "a"), write_tiny_llama(tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert (
        config["architectures"] == ["LlamaForCausalLM"]
        and config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == HEAD_DIM == 64
    )  # vLLM's CPU attention refuses head_dim 16
    index = json.loads((tmp_path / "a" / "model.safetensors.index.json").read_text())
    shard = tmp_path / "a" / "model-00001-of-00002.safetensors"
    length = struct.unpack("<Q", shard.read_bytes()[:8])[0]
    header = json.loads(shard.read_bytes()[8 : 8 + length])
    named = {n for n in header if n != "__metadata__"}
    assert named == {n for n, f in index["weight_map"].items() if f == shard.name}
    ends = max(t["data_offsets"][1] for n, t in header.items() if n != "__metadata__")
    assert shard.stat().st_size == 8 + length + ends  # the header's offsets cover the file exactly
    assert write_tiny_llama(tmp_path / "c", seed=1)[0].read_bytes() != first[0].read_bytes()


def test_prepare_writes_the_checkpoint_repo_once(tmp_path: Path) -> None:
    prepare_checkpoint_root(tmp_path)
    repo = checkpoint_repo(tmp_path)
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in repo.files.values()}
    prepare_checkpoint_root(tmp_path)
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in checkpoint_repo(tmp_path).files.values()} == before
    assert repo.repo_id == CHECKPOINT_REPO and "config.json" in repo.files
