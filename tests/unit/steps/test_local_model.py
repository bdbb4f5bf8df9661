"""A local model source (issue 27 item 3, `model.local_path`): a GGUF made on this host, verified by the sha256
manifest kimik3 records, mounted read-only, drift when its content changes. On fakes with real files: the bytes a
plan hashes are counted where every hash goes (HostPort.file_digest: FakeHost.hashed); the container is the one the
fake Docker was asked to create. The real dockerd and llama-server: tests/integration/test_local_model_docker.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fakes import (
    FAKE_PROFILE,
    FAKE_REVISION,
    FakeHost,
    FakeHub,
    MemoryCache,
    MemoryState,
    fake_ports,
    gguf_bytes,
)

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import InputError, LoadFailed, PlanError
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import local_model_key
from kimik3_reconciler.model.specs import LocalModelVerify
from kimik3_reconciler.observe.local_model import collect_local_model
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.model import verify_local_model
from kimik3_reconciler.steps.report import NullReporter

QUANT = "UD-Q2_K_XL-REAP770"


def local_profile(local_path: str, quant: str = QUANT, extra: str = ""):  # noqa: ANN201 - LoadedProfile
    text = FAKE_PROFILE.replace("quant: UD-Q2_K_XL}", f"quant: {quant}, local_path: {local_path}}}")
    return parse_profile(text + extra, "k3.yaml")


def gguf(path: Path, tag: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes({"general.name": tag}) + tag.encode() * 1000)
    return path


@pytest.fixture
def world(tmp_path: Path):  # noqa: ANN201 - (Orchestrator, ports, FakeDocker, tmp_path)
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    # The hub holds nothing of this quant: a local model never asks it.
    ports, docker = fake_ports(FakeHub("org/k3", FAKE_REVISION, {}, tmp_path / "hub"))
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), ports, docker, tmp_path


def model_step(orchestrator: Orchestrator, profile):  # noqa: ANN001, ANN201
    return next(s for s in orchestrator.plan(profile).steps if s.kind == "model")


def verify_step(found) -> LocalModelVerify:  # noqa: ANN001 - what collect_local_model found
    """The verify step of the local model `found` (its folder, files and stats as observed)."""
    return LocalModelVerify(
        local_path=found.local_path,
        folder=found.cache_dir,
        quant=QUANT,
        files=found.files,
        stats=found.stats,
        manifest_key=local_model_key(found.local_path),
    )


def test_first_apply_records_the_manifest_and_later_plans_read_no_byte(world) -> None:
    orchestrator, ports, docker, tmp = world
    model = gguf(tmp / "models" / "reap770.gguf", "one")
    profile = local_profile("models/reap770.gguf")
    first = model_step(orchestrator, profile)
    assert first.action == Action.CREATE and "not verified yet" in first.reason
    assert isinstance(first.spec, LocalModelVerify)
    orchestrator.apply(profile)
    # plan, then the apply's own plan: hashed once (the sha256 kept in the cache dir by stat fingerprint)
    assert ports.host.hashed == {str(model): model.stat().st_size}
    record = ports.state.read(local_model_key(str(model)))
    assert record is not None and record["cache_dir"] == str(model)
    assert [f["path"] for f in record["files"]] == [f"{QUANT}/reap770.gguf"]
    ports.host.hashed.clear()
    again = model_step(orchestrator, profile)
    assert again.action == Action.NOOP and "verified" in again.reason
    assert ports.host.hashed == {}  # size, mtime, ctime and inode as recorded: not read
    assert all(s.action == Action.NOOP for s in orchestrator.plan(profile).steps if s.kind != "verify")


def test_the_container_mounts_the_file_read_only_and_opens_it(world) -> None:
    orchestrator, _, docker, tmp = world
    model = gguf(tmp / "models" / "reap770.gguf", "one")
    orchestrator.apply(local_profile("models/reap770.gguf"))
    container = docker.containers["k3-test"]
    mounts = container["Mounts"]
    assert [(m["Source"], m["Destination"], m["RW"]) for m in mounts] == [
        (str(model), f"/models/local/{QUANT}/reap770.gguf", False)
    ]
    argv = container["Config"]["Cmd"]
    assert argv[argv.index("-m") + 1] == f"/models/local/{QUANT}/reap770.gguf"


def test_new_content_is_drift_the_apply_relaunches_and_a_touch_is_not(world) -> None:
    orchestrator, ports, docker, tmp = world
    model = gguf(tmp / "models" / "reap770.gguf", "one")
    profile = local_profile("models/reap770.gguf")
    orchestrator.apply(profile)
    launched = docker.containers["k3-test"]["Id"]
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 10**9))  # touched: same bytes
    plan = orchestrator.plan(profile)
    steps = {s.kind: s for s in plan.steps}
    assert steps["model"].action == Action.UPDATE and "sha256 matches" in steps["model"].reason
    assert steps["container"].action == Action.NOOP
    orchestrator.apply(profile)
    assert docker.containers["k3-test"]["Id"] == launched
    gguf(model, "two")  # a new model written in its place
    steps = {s.kind: s for s in orchestrator.plan(profile).steps}
    assert steps["model"].action == Action.UPDATE and "changed since verified" in steps["model"].reason
    assert steps["container"].action == Action.REPLACE
    assert [d.field for d in steps["container"].diff] == ["model.sha256"]
    orchestrator.apply(profile)
    assert docker.containers["k3-test"]["Id"] != launched
    assert all(s.action == Action.NOOP for s in orchestrator.plan(profile).steps if s.kind != "verify")


def test_a_file_changed_between_plan_and_apply_stops_before_the_launch(world) -> None:
    orchestrator, ports, docker, tmp = world
    model = gguf(tmp / "models" / "reap770.gguf", "one")
    step = model_step(orchestrator, local_profile("models/reap770.gguf"))
    gguf(model, "two")
    with pytest.raises(InputError, match="changed after this plan hashed it") as refused:
        verify_local_model(step.spec, ports, NullReporter())
    assert refused.value.fields == (("model", "local_path"),)
    assert ports.state.read(local_model_key(str(model))) is None and docker.containers == {}


def test_a_folder_of_shards_is_served_from_its_first_shard(tmp_path: Path) -> None:
    folder = tmp_path / "reap770"
    for i in (2, 1, 3):
        gguf(folder / f"K3-REAP-0000{i}-of-00003.gguf", f"shard{i}")
    (folder / "README.md").write_text("made with llama-gguf-split\n")
    host = FakeHost()
    fact = collect_local_model(local_profile("reap770").profile, MemoryState(), MemoryCache(), tmp_path, host)
    assert [f.path for f in fact.files] == [f"{QUANT}/K3-REAP-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert fact.cache_dir == fact.local_path == str(folder) and fact.recorded_digest is None
    assert engine_for("llamacpp").model_entry(fact) == f"{QUANT}/K3-REAP-00001-of-00003.gguf"
    assert fact.host_path(fact.files[0].path) == str(folder / "K3-REAP-00001-of-00003.gguf")
    assert sorted(host.hashed) == sorted(str(p) for p in folder.glob("*.gguf"))


def test_status_never_hashes_a_moved_file(tmp_path: Path) -> None:
    model = gguf(tmp_path / "reap770.gguf", "one")
    host, state = FakeHost(), MemoryState()
    profile = local_profile("reap770.gguf").profile
    gguf(model, "two")
    fact = collect_local_model(profile, state, None, tmp_path, host, stat_only=True)
    assert fact.changed == (f"{QUANT}/reap770.gguf",) and host.hashed == {}


def test_destroy_with_model_never_removes_the_local_file(world) -> None:
    orchestrator, _, docker, tmp = world
    model = gguf(tmp / "models" / "reap770.gguf", "one")
    profile = local_profile("models/reap770.gguf")
    orchestrator.apply(profile)
    teardown = orchestrator.destroy(profile, images=True, model=True)
    step = next(s for s in teardown.steps if s.kind == "model")
    assert step.action == Action.NOOP and "never removes" in step.reason
    assert model.is_file() and "k3-test" not in docker.containers


def test_an_unvetted_iq_quant_from_a_local_file_is_refused_by_the_gate(world) -> None:
    orchestrator, _, _, tmp = world
    gguf(tmp / "models" / "k3-iq2m.gguf", "iq")
    gated = parse_profile(
        FAKE_PROFILE.replace("quant: UD-Q2_K_XL}", "quant: UD-IQ2_M, local_path: models/k3-iq2m.gguf}").replace(
            "gate: {smoke: false}", "gate: {smoke: false, quant: {reference_quant: UD-Q2_K_XL}}"
        ),
        "k3.yaml",
    )
    assert gated.profile.gate.quant is not None
    with pytest.raises(PlanError, match="runs only on quants of the hub cache") as refused:
        orchestrator.plan(gated)
    assert ("model", "local_path") in refused.value.fields


def test_bad_input_exits_2_naming_the_field_and_changes_nothing(world) -> None:
    orchestrator, ports, docker, tmp = world
    (tmp / "models").mkdir()
    (tmp / "empty").mkdir()
    (tmp / "models" / "reap770.gguf").write_text("version https://git-lfs.github.com/spec/v1\n")
    for path, said in (
        ("models/absent.gguf", "not found"),
        ("models/reap770.gguf", "is not a GGUF file"),
        ("empty", "is a folder with no GGUF shards"),
    ):
        with pytest.raises(InputError, match=said) as refused:
            orchestrator.apply(local_profile(path))
        assert refused.value.exit_code == 2 and str(refused.value).startswith(f"model.local_path: {path} ")
    assert docker.containers == {} and ports.state.read(local_model_key(str(tmp / "models" / "reap770.gguf"))) is None


def test_verify_rehashes_every_file_and_a_plain_plan_none(tmp_path: Path) -> None:
    folder = tmp_path / "reap770"
    shards = [gguf(folder / f"K3-REAP-0000{i}-of-00002.gguf", f"shard{i}") for i in (1, 2)]
    state, cache = MemoryState(), MemoryCache()
    profile = local_profile("reap770").profile
    first = collect_local_model(profile, state, cache, tmp_path, FakeHost())
    step = verify_step(first)
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, {}, tmp_path / "hub"))
    ports.state = state  # the manifest this test reads back
    verify_local_model(step, ports, NullReporter())
    plain, verifying = FakeHost(), FakeHost()
    assert collect_local_model(profile, state, cache, tmp_path, plain).recorded_digest == first.digest
    assert plain.hashed == {}
    # --verify: every byte read again, the memo in the cache dir ignored (it is what --verify distrusts)
    again = collect_local_model(profile, state, cache, tmp_path, verifying, rehash=True)
    assert verifying.hashed == {str(p): p.stat().st_size for p in shards} and not again.drifted


def test_a_shard_removed_from_the_folder_is_drift(tmp_path: Path) -> None:
    folder = tmp_path / "reap770"
    for name in ("k3-q2.gguf",):
        gguf(folder / name, name)
    state = MemoryState()
    profile = local_profile("reap770").profile
    first = collect_local_model(profile, state, None, tmp_path, FakeHost())
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, {}, tmp_path / "hub"))
    ports.state = state
    verify_local_model(
        verify_step(first),
        ports,
        NullReporter(),
    )
    (folder / "k3-q2.gguf").unlink()
    for i in (1, 2):  # converted again, now as a split
        gguf(folder / f"k3-q2-0000{i}-of-00002.gguf", f"split{i}")
    now = collect_local_model(profile, state, None, tmp_path, FakeHost())
    assert now.drifted and f"{QUANT}/k3-q2.gguf" in now.unrecorded
    assert [f.path for f in now.files] == [f"{QUANT}/k3-q2-0000{i}-of-00002.gguf" for i in (1, 2)]


GGUF_LOG = (
    "gguf_init_from_file_impl: failed to read tensor data\nllama_model_load: error loading model\n"
    "srv  llama_server: exiting due to model loading error\n"
)


def test_a_local_file_that_fails_to_load_gets_advice_that_can_help(world) -> None:
    """Issue 38 item 4: the advice was `apply --verify`, which re-hashes the bytes kimik3 recorded; the file is the
    user's own, nothing to download. The failed launch, `plan` and `status` name the file to make again instead."""
    orchestrator, _, docker, tmp = world
    model = gguf(tmp / "models" / "reap770.gguf", "one")
    docker.crash_on_start, docker.logs = True, GGUF_LOG
    with pytest.raises(LoadFailed) as failed:
        orchestrator.apply(local_profile("models/reap770.gguf"))
    message = str(failed.value)
    assert "[bad-gguf" in message and f"model.local_path ({model})" in message and "Make or copy it again" in message
    assert "`kimik3 apply --verify` re-hashes" not in message
    docker.containers["k3-test"]["State"]["ExitCode"] = 1  # `docker stop` of an exited container keeps its code
    crash = orchestrator.observe(local_profile("models/reap770.gguf")).container.crash
    assert f"model.local_path ({model})" in crash and "re-hashes the cached files" not in crash


def test_a_hub_file_that_fails_to_load_still_gets_the_rehash_advice(tmp_path: Path) -> None:
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, docker = fake_ports(
        FakeHub("org/k3", FAKE_REVISION, {"UD-Q2_K_XL/k3.gguf": gguf_bytes({})}, tmp_path / "hub")
    )
    docker.crash_on_start, docker.logs = True, GGUF_LOG
    with pytest.raises(LoadFailed, match=r"`kimik3 apply --verify` re-hashes the cached files"):
        Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp").apply(
            parse_profile(FAKE_PROFILE, "k3.yaml")
        )
