"""The safetensors checkpoint (vLLM, SGLang; issue 25 §2) from the fixture hub through the real huggingface_hub
client, kimik3's downloader and its model step: the files a server opens are listed (README left out), planned with
their bytes, fetched into the HF cache layout and recorded verified; a re-plan reads the manifest and asks the hub
nothing; a download killed mid-shard resumes where it stopped; a corrupt file is found by its moved stat, re-hashed,
refused and fetched again. The checkpoint: kimik3_demo/checkpoint.py (generated, ~2.6 MB). Seconds."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.background import Background
from support.fakes.state import FakeClock

from kimik3_demo.hub import FixtureHub
from kimik3_demo.prepare import CHECKPOINT_REPO, CHECKPOINT_REVISION, checkpoint_repo, prepare_checkpoint_root
from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub
from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.adapters.state_files import StateFiles
from kimik3_reconciler.model.facts import ModelFact
from kimik3_reconciler.model.model_files import checkpoint_manifest_key
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.observe.model_cache import collect_checkpoint
from kimik3_reconciler.planning.model_step import download_spec, model_step
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.model import download_model
from kimik3_reconciler.steps.report import NullReporter

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARD = "model-00001-of-00002.safetensors"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    prepare_checkpoint_root(root)
    return root


@pytest.fixture
def hub(served: Path) -> Iterator[FixtureHub]:
    with FixtureHub([checkpoint_repo(served)]) as running:
        yield running


def observe(hub: FixtureHub, work: Path) -> ModelFact:
    return collect_checkpoint(
        CHECKPOINT_REPO,
        CHECKPOINT_REVISION,
        hub.url,
        str(work / "cache"),
        HuggingFaceHub(),
        StateFiles(work / "state"),
        LinuxHost(),
    )


def apply(hub: FixtureHub, work: Path, fact: ModelFact, workers: int = 4) -> None:
    spec = download_spec(fact, hub.url, checkpoint_manifest_key(CHECKPOINT_REPO, CHECKPOINT_REVISION, fact.cache_dir))
    ports = Ports(
        docker=None,
        hub=HuggingFaceHub(workers),
        http=None,
        host=LinuxHost(),  # type: ignore[arg-type]
        state=StateFiles(work / "state"),
        clock=FakeClock(),
    )
    download_model(spec, ports, NullReporter())


def cached(work: Path, path: str) -> Path:
    return work / "cache" / f"models--{CHECKPOINT_REPO.replace('/', '--')}" / "snapshots" / CHECKPOINT_REVISION / path


def test_the_checkpoint_is_listed_planned_fetched_verified_and_then_a_noop(
    hub: FixtureHub, served: Path, tmp_path: Path
) -> None:
    fresh = observe(hub, tmp_path)
    local = checkpoint_repo(served).files
    assert {f.path for f in fresh.files} == set(local) - {"README.md"}  # what a server opens, nothing else
    assert fresh.listing == "hub" and set(fresh.missing) == {f.path for f in fresh.files}
    step = model_step("model", fresh, download_spec(fresh, hub.url, "unused"))
    assert step.action is Action.CREATE and step.target == f"{CHECKPOINT_REPO}@{CHECKPOINT_REVISION[:12]}/checkpoint"
    assert (
        step.cost.startswith("2.5 MiB to fetch")
        and "[*.safetensors 2 file(s) 2.5 MiB; config, tokenizer and code 6 file(s) " in step.cost
    )  # one line for the weights however many shards
    apply(hub, tmp_path, fresh)
    for path in (f.path for f in fresh.files):
        assert cached(tmp_path, path).read_bytes() == local[path].read_bytes(), path
    asked = len(hub.requests)
    again = observe(hub, tmp_path)
    assert again.listing == "manifest" and again.complete and len(hub.requests) == asked  # no hub request
    assert model_step("model", again, download_spec(again, hub.url, "unused")).action is Action.NOOP


def test_a_download_killed_between_shards_resumes_without_fetching_them_again(
    hub: FixtureHub, served: Path, tmp_path: Path, background: Background
) -> None:
    """kill -9 once the first shard is in the cache: the next apply fetches what is missing, not that shard.
    (Within a file kimik3 resumes from what it wrote, in 8 MiB chunks: tests/integration/test_download.py; these
    shards are smaller than one chunk.)"""
    local = checkpoint_repo(served).files
    first, second = SHARD, SHARD.replace("00001-of", "00002-of")
    hub.faults.bytes_per_second = 1 << 20  # ~1.3 s per shard, one file at a time: time to kill between them
    script = (
        "from pathlib import Path; from tests.integration.test_checkpoint_download import *; "
        f"hub = type('H', (), {{'url': {hub.url!r}}})(); work = Path({str(tmp_path)!r}); "
        "apply(hub, work, observe(hub, work), workers=1)"
    )
    child = background.start(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'tests'}"},
    )
    blobs = tmp_path / "cache" / f"models--{CHECKPOINT_REPO.replace('/', '--')}" / "blobs"
    done = blobs / hashlib.sha256(local[first].read_bytes()).hexdigest()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not done.is_file() and child.poll() is None:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert done.is_file(), "the first shard never landed"
    resumed = observe(hub, tmp_path)
    assert second in resumed.missing, "the download finished before it was killed"
    fetched_before = dict(hub.faults.served)
    hub.faults.bytes_per_second = None
    apply(hub, tmp_path, resumed)
    assert hub.faults.served[first] == fetched_before[first]  # the landed shard is not fetched again
    assert cached(tmp_path, second).read_bytes() == local[second].read_bytes()
    assert observe(hub, tmp_path).complete


def test_a_corrupt_file_is_refused_and_fetched_again(hub: FixtureHub, served: Path, tmp_path: Path) -> None:
    apply(hub, tmp_path, observe(hub, tmp_path))
    blob = cached(tmp_path, SHARD).resolve()
    good = blob.read_bytes()
    blob.write_bytes(good[:-4] + b"\0\0\0\0")  # same size, other bytes: only a re-hash can tell
    seen = observe(hub, tmp_path)
    assert seen.corrupt == (SHARD,) and seen.missing == (SHARD,)
    step = model_step("model", seen, download_spec(seen, hub.url, "unused"))
    assert step.action is Action.CREATE and "sha256 mismatch" in step.reason
    hub.faults.served.clear()
    apply(hub, tmp_path, seen)
    assert hub.faults.served == {SHARD: len(good)} and cached(tmp_path, SHARD).read_bytes() == good
    assert observe(hub, tmp_path).complete
