"""A damaged state dir never becomes a traceback: records that are not UTF-8, not a JSON object, or of another
shape (edited by hand, another kimik3 version) count as absent, and the step that wrote them redoes its work.
Found by the held-back review's fault pass: `plan`/`status`/`apply` died on each of these (and the lock's holder
record as non-UTF-8 bytes stopped every apply)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from support.fakes import converged_fake

from kimik3_reconciler.adapters import atomic_files
from kimik3_reconciler.adapters.atomic_files import write_atomically
from kimik3_reconciler.adapters.state_files import StateFiles
from kimik3_reconciler.model.facts import ModelLayout
from kimik3_reconciler.model.model_files import manifest_key, manifest_readable, manifest_record
from kimik3_reconciler.model.record_shape import typed
from kimik3_reconciler.model.records import layout_key

FILES = {
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf": b"one" * 10,
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf": b"two" * 10,
}
LAYOUT = {
    "n_layer": 2,
    "layer_dense": [10, 10],
    "layer_experts": [20, 20],
    "output_bytes": 5,
    "token_embd_bytes": 7,
    "kv_bytes_per_token": 3,
    "context_length": 4096,
    "state_bytes_per_slot": 0,
}


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe garbage", b"[1, 2, 3]", b"42", b"null", b'{"torn": ', b""],
    ids=["not-utf8", "a-list", "a-number", "null", "torn", "empty"],
)
def test_a_record_that_is_not_a_json_object_reads_as_absent(tmp_path: Path, raw: bytes) -> None:
    state = StateFiles(tmp_path)
    state.write("apply/k3.json", {"date": "2026-12-03"})
    (tmp_path / "apply" / "k3.json").write_bytes(raw)
    assert state.read("apply/k3.json") is None


@pytest.mark.parametrize(
    "edit",
    [
        {"layer_dense": None},
        {"output_bytes": "5"},
        {"n_layer": True},
        {"layer_experts": [1, "x"]},
        {"version": 2},
        {"kv_bytes_per_token": None},
    ],
    ids=["none-tuple", "str-int", "bool-int", "mixed-tuple", "unknown-field", "none-int"],
)
def test_a_layout_record_of_another_shape_is_not_a_layout(edit: dict) -> None:
    assert typed(ModelLayout, LAYOUT) == ModelLayout(**LAYOUT)
    assert typed(ModelLayout, {**LAYOUT, **edit}) is None
    missing = dict(LAYOUT)
    del missing["n_layer"]
    assert typed(ModelLayout, missing) is None


def test_a_manifest_of_another_shape_is_not_readable() -> None:
    from kimik3_reconciler.model.facts import FileStat, RemoteFile

    good = manifest_record(
        (RemoteFile(path="q/a.gguf", size=3, sha256="ab"),),
        (FileStat(path="q/a.gguf", size=3, mtime_ns=1, ctime_ns=2, inode=4),),
    )
    assert manifest_readable(good)
    for bad in (
        {**good, "files": None},
        {**good, "verified": None},
        {**good, "stats": None},
        {**good, "files": [{"path": "q/a.gguf"}]},
        {**good, "stats": {"q/a.gguf": {"size": "3"}}},
        {**good, "files": [[1]]},
    ):
        assert not manifest_readable(bad), bad


@pytest.fixture
def world(tmp_path: Path):
    orchestrator, _, hub, profile = converged_fake(tmp_path, FILES)
    return orchestrator, profile, hub


@pytest.mark.parametrize("which", ["manifest", "layout"])
@pytest.mark.parametrize("value", [None, 12345, "str", [], {}, [{"x": 1}]], ids=repr)
def test_plan_and_apply_survive_each_field_of_a_record_edited(world, which: str, value: object) -> None:
    """Each top-level field of the manifest and the layout record set to a value of another type: the plan is made
    (the manifest as absent: the files are re-verified), and an apply converges again."""
    orchestrator, profile, hub = world
    p = profile.profile
    key = (
        manifest_key(p, str(hub.root))
        if which == "manifest"
        else layout_key(p.model.repo, p.model.revision, p.model.quant)
    )
    original = orchestrator.ports.state.read(key) or (LAYOUT if which == "layout" else None)
    assert original is not None
    for field in original:
        orchestrator.ports.state.write(key, {**original, field: value})
        orchestrator.plan(profile)  # no exception: the record counts as absent
        orchestrator.apply(profile)
        assert orchestrator.plan(profile).converged


def test_a_failed_state_write_names_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC from write()/fsync() carries no file name: the error must still name the record (exit 8's message)."""

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic_files.os, "fsync", full)
    target = tmp_path / "lock" / "holder.json"
    with pytest.raises(OSError) as caught:
        write_atomically(target, "{}", durable=True)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert list(target.parent.iterdir()) == []  # no temp file left behind


@pytest.mark.parametrize("value", [None, "str", [], {}, -1, True, 0])
def test_a_load_rate_record_of_another_shape_is_no_rate(world, value) -> None:
    """host/load-rate*.json with a field that is not a positive number: the plan predicts from seed 000's rate."""
    from kimik3_reconciler.model.records import LOAD_RATE_KEY, WARM_LOAD_RATE_KEY

    orchestrator, profile, _ = world
    for key in (LOAD_RATE_KEY, WARM_LOAD_RATE_KEY):
        for field in ("bytes", "seconds"):
            orchestrator.ports.state.write(key, {"bytes": 1 << 30, "seconds": 2.0, field: value})
            observed = orchestrator.observe(profile)
            assert observed.load_rate is None or key != LOAD_RATE_KEY
            assert observed.warm_load_rate is None or key != WARM_LOAD_RATE_KEY
            orchestrator.plan(profile)


@pytest.mark.parametrize("value", [None, "str", [], -3, 2.5])
def test_an_apply_record_with_a_bad_revert_count_restarts_it(world, value) -> None:
    from kimik3_reconciler.model.records import apply_key

    orchestrator, profile, _ = world
    orchestrator.ports.state.write(apply_key("k3-test"), {"result": "ok", "reverts": value})
    orchestrator.apply_or_revert(profile, None)
    assert orchestrator.ports.state.read(apply_key("k3-test"))["reverts"] == 0


def test_bench_runs_of_another_shape_are_skipped_not_a_traceback(tmp_path: Path) -> None:
    from kimik3_reconciler.benchmark.store import keep, kept
    from kimik3_reconciler.model.bench import BenchRun, BenchSettings, bench_index_key

    state = StateFiles(tmp_path)
    run = BenchRun("k3", "0123456789abcdef", "2026-12-03T00:00:00+00:00", BenchSettings(grid=(1,)), (), {})
    keep(state, run)
    for bad in ({"levels": None}, {"levels": "x"}, {"settings": "x"}, {"settings": []}, {"fingerprint": []}):
        state.write(keep(state, run), {**run.to_json(), **bad})
    assert kept(state, "k3") == [run]  # the edited runs are skipped as if removed
    for index in ({"runs": None}, {"runs": [{"x": 1}, 5, None]}, {"runs": "s"}):
        state.write(bench_index_key("k3"), index)
        assert kept(state, "k3") == []
        keep(state, run)  # a new run starts a readable index again
        assert kept(state, "k3") == [run]
