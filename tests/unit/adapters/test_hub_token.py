"""The HF token goes only over https or to a loopback mirror (rule hub-token-https).

The fixture hub runs on loopback and records each request's Authorization header. To reach it as a
*non-loopback* plain-http hub without touching any other host, the tests name a TEST-NET address
(192.0.2.1, RFC 5737) as the endpoint and route it through HTTP_PROXY to the fixture: httpx sends the
absolute URL to the proxy, and the fixture serves its path. So the adapters decide on the URL a real
remote mirror would have, and the fixture sees exactly the headers they send."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hub_client import forget_hub_client

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub, hub_token
from kimik3_reconciler.adapters.hub_download import fetch_all, targets
from kimik3_reconciler.model.hub_endpoint import token_may_go_to
from kimik3_reconciler.model.specs import ModelDownload

REPO = "kimik3-test/Token-GGUF"
REV = "0123456789abcdef" * 2 + "01234567"
TOKEN = "hf_" + "t" * 34
REMOTE = "http://192.0.2.1:8080"  # plain http, not loopback: reached through the proxy below


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://huggingface.co", True),
        ("https://mirror.example:8443/hub", True),
        ("http://127.0.0.1:18080", True),
        ("http://127.1.2.3", True),
        ("http://localhost:8080", True),
        ("http://[::1]:8080", True),
        ("http://10.20.30.40:8080", False),
        ("http://mirror.internal", False),
        ("http://localhost.evil.example", False),
        ("ftp://127.0.0.1", False),
    ],
)
def test_token_goes_only_over_https_or_to_loopback(url: str, allowed: bool) -> None:
    assert token_may_go_to(url) is allowed


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FixtureHub]:
    shard = tmp_path / "K3-Q-00001-of-00001.gguf"
    shard.write_bytes(b"GGUF" + bytes(4092))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with FixtureHub([FixtureRepo(REPO, REV, {"Q/K3-Q-00001-of-00001.gguf": shard})]) as running:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", running.url)
        monkeypatch.setenv("http_proxy", running.url)
        forget_hub_client()  # a client another test made holds no proxy: this test's requests would go to 192.0.2.1
        yield running


def _sent(hub: FixtureHub, path_part: str) -> list[str | None]:
    return [auth for _, path, auth in hub.authorizations if path_part in path]


def test_the_adapter_withholds_the_token_from_a_plain_http_remote_hub(hub: FixtureHub, tmp_path: Path) -> None:
    assert hub_token(REMOTE) is False and hub_token("https://huggingface.co") == TOKEN
    adapter = HuggingFaceHub()
    files = tuple(adapter.list_files(REPO, REV, ["Q"], REMOTE))
    head = adapter.read_head(REPO, REV, files[0].path, REMOTE, 4)
    spec = ModelDownload(
        repo=REPO,
        revision=REV,
        quant="Q",
        endpoint=REMOTE,
        cache_dir=str(tmp_path / "cache"),
        files=files,
        missing=tuple(f.path for f in files),
        manifest_key="unused",
    )
    adapter.download(spec, lambda *_: None)
    assert head == b"GGUF"
    # Every request reached the fixture (listing, header read, download), none with a token.
    assert _sent(hub, "/api/models/") and _sent(hub, "/resolve/")
    assert [auth for _, _, auth in hub.authorizations] == [None] * len(hub.authorizations)


def test_a_loopback_mirror_gets_the_token(hub: FixtureHub, tmp_path: Path) -> None:
    adapter = HuggingFaceHub()
    files = tuple(adapter.list_files(REPO, REV, ["Q"], hub.url))
    adapter.read_head(REPO, REV, files[0].path, hub.url, 4)
    assert _sent(hub, "/api/models/") and set(_sent(hub, "/api/models/")) == {f"Bearer {TOKEN}"}
    assert set(_sent(hub, "/resolve/")) == {f"Bearer {TOKEN}"}


def test_fetch_all_drops_a_token_its_caller_passed_for_a_plain_http_remote_hub(hub: FixtureHub, tmp_path: Path) -> None:
    """hub_download decides too (defence in depth): a token handed in for http://192.0.2.1 is not sent."""
    files = tuple(HuggingFaceHub().list_files(REPO, REV, ["Q"], hub.url))
    hub.authorizations.clear()
    jobs = targets(REPO, REV, files, REMOTE, tmp_path / "cache" / "models--x")
    fetch_all(jobs, TOKEN, lambda *_: None, 1)
    assert _sent(hub, "/resolve/") == [None]


@pytest.mark.parametrize("bad", ["\ufeff" + TOKEN, TOKEN + "\u200b", TOKEN[:10] + "é" + TOKEN[10:], TOKEN + "\x01"])
def test_a_token_no_header_can_carry_is_refused_without_showing_it(bad: str, monkeypatch) -> None:
    """Adversary review: a BOM (a token file saved by an editor) or a pasted invisible character made httpx raise
    UnicodeEncodeError on the first hub request: `kimik3 plan` ended in a traceback. Now exit 2, token unnamed."""
    from kimik3_reconciler.errors import InputError

    monkeypatch.setenv("HF_TOKEN", bad)
    with pytest.raises(InputError) as refused:
        hub_token("https://huggingface.co")
    assert refused.value.exit_code == 2 and "HF_TOKEN" in str(refused.value) and TOKEN[3:] not in str(refused.value)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert hub_token("https://huggingface.co") == TOKEN
