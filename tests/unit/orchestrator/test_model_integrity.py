"""No corrupt shard is served (orchestrator on fakes): stat fingerprints in the manifest, re-hash of what
moved, refetch before any (re)start, and a running server replaced after its files were refetched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, converged_fake, fake_ports
from test_orchestrator import RELAUNCH

from kimik3_reconciler.model.model_files import file_stat, manifest_key, manifest_record, parse_manifest
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.steps.report import NullReporter

SHARD = "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf"
FILES = {SHARD: b"shard-one" * 10, "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf": b"shard-two" * 10}


@pytest.fixture
def world(tmp_path: Path):
    return converged_fake(tmp_path, FILES)


def flip_one_byte(path: Path, keep_mtime: bool) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_mtime:  # an edit that restores mtime (rsync -t, touch -r): ctime still moves
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def changes(plan) -> list[tuple[str, Action]]:
    return [(s.kind, s.action) for s in plan.changes]


def test_the_manifest_records_a_stat_fingerprint_per_file(world):
    orchestrator, _, hub, profile = world
    record = orchestrator.ports.state.read(manifest_key(profile.profile, str(hub.root)))
    assert set(record["stats"]) == set(FILES)
    assert record["stats"][SHARD] == file_stat(SHARD, (hub.root / "cache" / SHARD).stat()).model_dump(exclude={"path"})


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["plain-edit", "mtime-restored"])
def test_an_edited_blob_is_rehashed_and_refetched_before_the_stopped_server_starts(world, keep_mtime):
    orchestrator, docker, hub, profile = world
    docker.stop_container("k3-test")
    flip_one_byte(hub.root / "cache" / SHARD, keep_mtime)
    plan = orchestrator.plan(profile)
    model = plan.steps[0]
    assert (model.kind, model.action) == ("model", Action.CREATE)
    assert f"1 of 2 changed since verified: re-hashed, sha256 mismatch ({SHARD})" in model.reason
    assert model.spec.missing == (SHARD,)
    assert changes(plan) == [("model", Action.CREATE), ("container", Action.UPDATE), ("health", Action.READ)]
    hub.downloads.clear()
    orchestrator.apply(profile)
    assert hub.downloads == [(SHARD,)] and (hub.root / "cache" / SHARD).read_bytes() == FILES[SHARD]
    assert orchestrator.plan(profile).converged


def test_a_running_server_is_replaced_after_its_files_were_refetched(world):
    orchestrator, docker, hub, profile = world
    before = docker.containers["k3-test"]["Id"]
    flip_one_byte(hub.root / "cache" / SHARD, keep_mtime=False)
    plan = orchestrator.plan(profile)
    assert changes(plan) == [("model", Action.CREATE), *RELAUNCH]
    container = plan.changes[2]
    assert container.reason.startswith(
        f"the model files it loaded were re-fetched (sha256 mismatch: {SHARD}); each request gets "
    )
    orchestrator.apply(profile)
    assert docker.calls[-2:] == ["rm k3-test", "run k3-test"]
    assert docker.containers["k3-test"]["Id"] != before


def test_bit_rot_is_caught_by_verify_only(world):
    """Corruption below the filesystem moves no stat field: only `--verify` re-hashes, and says "sha256 mismatch"."""
    orchestrator, docker, hub, profile = world
    cached = hub.root / "cache" / SHARD
    flip_one_byte(cached, keep_mtime=False)
    key = manifest_key(profile.profile, str(hub.root))
    files, _ = parse_manifest(orchestrator.ports.state.read(key))
    orchestrator.ports.state.write(
        key,
        manifest_record(
            files, tuple(file_stat(f.path, (hub.root / "cache" / f.path).stat()) for f in files), str(hub.root)
        ),
    )  # as if no stat had moved
    assert orchestrator.plan(profile).converged
    plan = orchestrator.plan(profile, rehash=True)
    assert plan.steps[0].reason == f"1 of 2 re-hashed (--verify): sha256 mismatch ({SHARD})"
    assert "missing" not in plan.steps[0].reason
    before = docker.containers["k3-test"]["Id"]
    orchestrator.apply(profile, rehash=True)
    assert cached.read_bytes() == FILES[SHARD] and docker.containers["k3-test"]["Id"] != before


def test_a_touched_blob_is_rehashed_once_and_its_new_fingerprint_recorded(world):
    orchestrator, docker, hub, profile = world
    cached = hub.root / "cache" / SHARD
    os.utime(cached, ns=(1, 1))  # content unchanged
    plan = orchestrator.plan(profile)
    assert changes(plan) == [("model", Action.UPDATE)]
    assert "changed since verified (re-hashed: sha256 matches): record their stat fingerprint" in plan.steps[0].reason
    hub.downloads.clear()
    before = docker.containers["k3-test"]["Id"]
    orchestrator.apply(profile)
    assert hub.downloads == [] and docker.containers["k3-test"]["Id"] == before
    assert orchestrator.plan(profile).converged


def test_a_manifest_from_before_stats_is_trusted_and_upgraded(world):
    orchestrator, _, hub, profile = world
    key = manifest_key(profile.profile, str(hub.root))
    legacy = {k: v for k, v in orchestrator.ports.state.read(key).items() if k != "stats"}
    orchestrator.ports.state.write(key, legacy)
    plan = orchestrator.plan(profile)
    assert changes(plan) == [("model", Action.UPDATE)]
    assert "the manifest predates them" in plan.steps[0].reason
    orchestrator.apply(profile)
    assert set(orchestrator.ports.state.read(key)["stats"]) == set(FILES) and orchestrator.plan(profile).converged


def test_a_file_that_moves_between_plan_and_apply_is_not_recorded(world):
    from kimik3_reconciler.steps import execute

    orchestrator, _, hub, profile = world
    key = manifest_key(profile.profile, str(hub.root))
    orchestrator.ports.state.write(key, {k: v for k, v in orchestrator.ports.state.read(key).items() if k != "stats"})
    step = orchestrator.plan(profile).steps[0]  # ~ model: record the fingerprints observed now
    os.utime(hub.root / "cache" / SHARD, ns=(5, 5))  # moves after the observation
    execute(step, orchestrator.ports, NullReporter())
    assert SHARD not in orchestrator.ports.state.read(key)["stats"]  # never vouched for: re-hashed next time
    again = orchestrator.plan(profile).steps[0]
    assert again.action is Action.UPDATE and "changed since verified (re-hashed: sha256 matches)" in again.reason


def test_status_only_stats_a_moved_file_and_says_so_without_hashing(world, monkeypatch):
    """`kimik3 status` must not read a 50 GB shard: a moved stat is reported "changed since verified", unhashed."""
    from click.testing import CliRunner

    import kimik3_reconciler.adapters as adapters
    from kimik3_reconciler import cli

    orchestrator, _, hub, profile = world
    flip_one_byte(hub.root / "cache" / SHARD, keep_mtime=False)
    hashed = orchestrator.ports.host.hashed  # path -> bytes re-hashed (HostPort.file_digest)
    hashed.clear()
    observed = orchestrator.observe(profile, stat_only=True)
    assert observed.model.changed == (SHARD,) and observed.model.corrupt == () and hashed == {}
    work = Path(orchestrator.base_dir)
    (work / "p.yaml").write_text(FAKE_PROFILE)
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: orchestrator.ports)
    shown = CliRunner().invoke(
        cli.main, ["--dockerfile", str(work / "Dockerfile.llamacpp"), "status", str(work / "p.yaml")]
    )
    assert shown.exit_code == 0, shown.output
    assert "1 changed since verified (stat moved; not re-hashed here" in shown.output and hashed == {}
    assert orchestrator.observe(profile).model.corrupt == (SHARD,)  # a plan does re-hash it
    assert hashed == {str(hub.root / "cache" / SHARD): len(FILES[SHARD])}


def test_status_with_no_manifest_and_the_hub_down_says_the_file_list_is_unknown(tmp_path: Path, monkeypatch):
    """Adversary review (new-user session): `kimik3 status` of a profile never applied here, hub unreachable,
    printed "0/0 files", which reads as an empty quant folder; it says the list is unknown, and why."""
    from click.testing import CliRunner

    import kimik3_reconciler.adapters as adapters
    from kimik3_reconciler import cli
    from kimik3_reconciler.errors import HubError

    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    hub = FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub")

    def unreachable(*args, **kwargs):
        raise HubError("hub https://hub.example not reachable: [Errno -2] Name or service not known")

    monkeypatch.setattr(hub, "list_files", unreachable)
    monkeypatch.setattr(hub, "list_repo", unreachable)
    ports, _ = fake_ports(hub)
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: ports)
    (tmp_path / "p.yaml").write_text(FAKE_PROFILE)
    shown = CliRunner().invoke(
        cli.main,
        [
            "--state-dir",
            str(tmp_path / "state"),
            "--dockerfile",
            str(tmp_path / "Dockerfile.llamacpp"),
            "status",
            str(tmp_path / "p.yaml"),
        ],
    )
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.output.splitlines() if x.startswith("model"))
    assert "0/0 files" not in line and "file list unknown" in line and "[Errno -2] Name or service not known" in line


@pytest.mark.parametrize("blob", ["same", "cut", "none"])
def test_an_unlinked_file_whose_blob_is_cached_costs_nothing_to_fetch(world, blob):
    """A file gone from the snapshot with its blob still cached is re-hashed and linked, not fetched: the plan
    prices 0 for it (issue 30); a blob of another size, or none, is priced and fetched as before."""
    import hashlib

    orchestrator, _, hub, profile = world
    (hub.root / "cache" / SHARD).unlink()
    if blob != "none":
        stored = hub.root / "blobs" / hashlib.sha256(FILES[SHARD]).hexdigest()
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_bytes(FILES[SHARD] if blob == "same" else FILES[SHARD][:-1])
    model = orchestrator.observe(profile).model
    assert model.missing == (SHARD,) and model.in_blobs == ((SHARD,) if blob == "same" else ())
    step = next(s for s in orchestrator.plan(profile).steps if s.kind == "model")
    assert step.cost.startswith("0 B to fetch" if blob == "same" else f"{len(FILES[SHARD])} B to fetch")
    fetched = hub.download(step.spec, lambda *_: None)
    assert fetched == (0 if blob == "same" else len(FILES[SHARD]))  # as priced
