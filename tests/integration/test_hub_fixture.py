"""The fixture hub answers the real huggingface_hub client as the Hub does (reference/hf-hub.md)."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile, RepoFolder

from kimik3_demo.hub import FixtureHub, FixtureRepo, repos_from_root

REPO = "kimik3-test/Tiny-GGUF"
SHA = "0123456789abcdef" * 2 + "01234567"
DECLARED = 52_000_000_000  # a "production" shard size for the sizing gate; the body stays small


@pytest.fixture(scope="module")
def contents() -> dict[str, bytes]:
    rng = random.Random(7)
    return {
        "Q/model-Q-00001-of-00002.gguf": rng.randbytes(300_000),
        "Q/model-Q-00002-of-00002.gguf": rng.randbytes(123_457),
        "R/model-R.gguf": rng.randbytes(5_000),
        "README.md": b"# tiny\n",
    }


@pytest.fixture(scope="module")
def hub(tmp_path_factory, contents):
    folder = tmp_path_factory.mktemp("repo")
    files = {}
    for path, data in contents.items():
        local = folder / path.replace("/", "__")
        local.write_bytes(data)
        files[path] = local
    repo = FixtureRepo(REPO, SHA, files, declared_sizes={"R/model-R.gguf": DECLARED})
    with FixtureHub([repo]) as running:
        yield running


@pytest.fixture
def api(hub) -> HfApi:
    return HfApi(endpoint=hub.url, token=False)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_recursive_tree_reports_sizes_and_lfs_sha256(api, contents):
    entries = list(api.list_repo_tree(REPO, recursive=True, revision=SHA))
    files = {e.path: e for e in entries if isinstance(e, RepoFile)}
    folders = {e.path for e in entries if isinstance(e, RepoFolder)}
    assert folders == {"Q", "R"}
    assert set(files) == set(contents)
    for path, data in contents.items():
        expected = DECLARED if path == "R/model-R.gguf" else len(data)
        assert files[path].size == expected
        assert files[path].lfs.sha256 == sha256(data)
        assert files[path].xet_hash is None


def test_tree_of_one_folder_for_the_sizing_gate(api, contents):
    entries = api.list_repo_tree(REPO, path_in_repo="Q", recursive=True, revision=SHA)
    sizes = {e.path: e.size for e in entries if isinstance(e, RepoFile)}
    assert sizes == {p: len(d) for p, d in contents.items() if p.startswith("Q/")}


def test_paths_info_and_model_info(api, contents):
    infos = api.get_paths_info(REPO, ["Q", "Q/model-Q-00001-of-00002.gguf", "missing.gguf"], revision=SHA)
    assert [type(i) for i in infos] == [RepoFolder, RepoFile]
    assert infos[1].lfs.sha256 == sha256(contents["Q/model-Q-00001-of-00002.gguf"])
    info = api.model_info(REPO, revision=SHA, files_metadata=True)
    assert info.sha == SHA
    assert {s.rfilename: s.size for s in info.siblings}["R/model-R.gguf"] == DECLARED
    assert api.model_info(REPO).sha == SHA  # main resolves to the repo's commit


def test_snapshot_download_then_cache_lookup(hub, contents, tmp_path):
    folder = snapshot_download(
        REPO, revision=SHA, allow_patterns=["Q/*"], cache_dir=tmp_path, endpoint=hub.url, token=False
    )
    assert Path(folder) == tmp_path / "models--kimik3-test--Tiny-GGUF" / "snapshots" / SHA
    for path, data in contents.items():
        cached = try_to_load_from_cache(REPO, path, revision=SHA, cache_dir=tmp_path)
        if path.startswith("Q/"):
            assert Path(folder, path).read_bytes() == data
            assert Path(cached).read_bytes() == data
        else:
            assert not isinstance(cached, str)
            assert not Path(folder, path).exists()
    before = len(hub.requests)
    snapshot_download(REPO, revision=SHA, allow_patterns=["Q/*"], cache_dir=tmp_path, endpoint=hub.url, token=False)
    assert hub.requests[before:] == []
    assert all(path != "/api/agent-harnesses" for _, path in hub.requests)


def test_download_by_branch_name(hub, contents, tmp_path):
    local = hf_hub_download(REPO, "README.md", revision="main", cache_dir=tmp_path, endpoint=hub.url, token=False)
    assert Path(local).read_bytes() == contents["README.md"]
    assert f"/snapshots/{SHA}/" in Path(local).as_posix()


@pytest.mark.parametrize(
    ("repo", "revision", "filename", "error"),
    [
        ("kimik3-test/Unknown", SHA, "README.md", RepositoryNotFoundError),
        (REPO, "f" * 40, "README.md", RevisionNotFoundError),
        (REPO, SHA, "Q/missing.gguf", EntryNotFoundError),
    ],
)
def test_missing_things_raise_the_clients_errors(hub, tmp_path, repo, revision, filename, error):
    with pytest.raises(error):
        hf_hub_download(repo, filename, revision=revision, cache_dir=tmp_path, endpoint=hub.url, token=False)


def test_missing_repo_and_revision_in_listings(api):
    with pytest.raises(RepositoryNotFoundError):
        list(api.list_repo_tree("kimik3-test/Unknown", recursive=True, revision=SHA))
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree(REPO, recursive=True, revision="e" * 40))
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(REPO, path_in_repo="NOPE", recursive=True, revision=SHA))


def test_head_and_range_requests(hub, contents):
    path = "Q/model-Q-00001-of-00002.gguf"
    data = contents[path]
    url = f"{hub.url}/{REPO}/resolve/{SHA}/{path}"
    head = httpx.head(url)
    assert head.status_code == 200
    assert head.headers["X-Repo-Commit"] == SHA
    assert head.headers["ETag"] == head.headers["X-Linked-Etag"] == f'"{sha256(data)}"'
    assert int(head.headers["X-Linked-Size"]) == int(head.headers["Content-Length"]) == len(data)
    tail = httpx.get(url, headers={"Range": "bytes=1000-"})
    assert tail.status_code == 206
    assert tail.headers["Content-Range"] == f"bytes 1000-{len(data) - 1}/{len(data)}"
    assert tail.content == data[1000:]
    middle = httpx.get(url, headers={"Range": "bytes=10-19"})
    assert (middle.status_code, middle.content) == (206, data[10:20])
    assert httpx.get(url, headers={"Range": f"bytes={len(data)}-"}).status_code == 416


def test_missing_file_head_carries_error_code_and_commit(hub):
    response = httpx.head(f"{hub.url}/{REPO}/resolve/{SHA}/nope.bin")
    assert response.status_code == 404
    assert response.headers["X-Error-Code"] == "EntryNotFound"
    assert response.headers["X-Repo-Commit"] == SHA
    assert httpx.get(f"{hub.url}/api/agent-harnesses").status_code == 404


def test_repos_from_root_reads_the_main_layout(tmp_path):
    repo_dir = tmp_path / "org" / "name"
    (repo_dir / "files" / "Q").mkdir(parents=True)
    (repo_dir / "files" / "Q" / "a.gguf").write_bytes(b"abc")
    (repo_dir / "revision.txt").write_text("a" * 40 + "\n")
    (repo,) = repos_from_root(tmp_path)
    assert (repo.repo_id, repo.revision, list(repo.files)) == ("org/name", "a" * 40, ["Q/a.gguf"])
    assert os.fspath(repo.files["Q/a.gguf"]).endswith("files/Q/a.gguf")
