"""A verified model is kept verified per cache dir (issue 30 item 3): two profiles of one quant with other
`model.cache_dir`s, or two checkouts of one GitOps repo (a relative cache_dir) on one state dir, switched back and
forth, re-hash nothing after each location's first verification. Hashed bytes are counted where every re-hash goes
(HostPort.file_digest: FakeHost.hashed); the fake hub counts downloads (a real download hashes as it lands).
Before, the one manifest per quant held the last location's stat fingerprints: every switch re-hashed every file
(~9 min a plan on 800 GB)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

from kimik3_reconciler.model.model_files import manifest_key, manifest_key_before_locations
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter

FILES = {
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf": b"shard-one" * 1000,
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf": b"shard-two" * 1000,
}


def profile_in(cache_dir: str):  # noqa: ANN201
    return parse_profile(
        FAKE_PROFILE.replace("quant: UD-Q2_K_XL}", f"quant: UD-Q2_K_XL, cache_dir: {cache_dir}}}"), "k3.yaml"
    )


def checkout(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "src.tar.gz").write_bytes(b"source")
    (root / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    return root


@pytest.fixture
def world(tmp_path: Path):
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    return ports, tmp_path


def model_step(orchestrator: Orchestrator, profile) -> tuple[Action, str]:  # noqa: ANN001
    step = next(s for s in orchestrator.plan(profile).steps if s.kind == "model")
    return step.action, step.reason


def switch(ports, orchestrators_and_profiles, rounds: int = 3) -> list[tuple[Action, str]]:  # noqa: ANN001
    """Apply each (orchestrator, profile) in turn, `rounds` times; what each plan said of the model first."""
    said = []
    for _ in range(rounds):
        for orchestrator, profile in orchestrators_and_profiles:
            said.append(model_step(orchestrator, profile))
            orchestrator.apply(profile)
    return said


def test_two_cache_dirs_of_one_quant_switched_back_and_forth_rehash_nothing(world):
    ports, tmp = world
    orchestrator = Orchestrator(ports, NullReporter(), checkout(tmp / "repo"), tmp / "repo" / "Dockerfile.llamacpp")
    a, b = profile_in(str(tmp / "nvme-a")), profile_in(str(tmp / "nvme-b"))
    orchestrator.apply(a)
    orchestrator.apply(b)  # the first visit of each location downloads (and so verifies) there once
    assert ports.hub.downloads == [tuple(FILES), tuple(FILES)]
    ports.hub.downloads.clear()
    ports.host.hashed.clear()
    said = switch(ports, [(orchestrator, a), (orchestrator, b)])
    assert ports.host.hashed == {}, f"re-hashed {sum(ports.host.hashed.values())} bytes: {said}"
    assert ports.hub.downloads == [] and len(said) == 6
    assert all(action is Action.NOOP and reason.startswith("all 2 files verified") for action, reason in said), said
    # Each location keeps its own record, naming its cache dir.
    for cache_dir in (tmp / "nvme-a", tmp / "nvme-b"):
        record = ports.state.read(manifest_key(a.profile, str(cache_dir)))
        assert record is not None and record["cache_dir"] == str(cache_dir) and set(record["stats"]) == set(FILES)


def test_two_checkouts_of_one_gitops_repo_on_one_state_dir_rehash_nothing(world):
    """`cache_dir: hub-cache` resolves against each checkout's folder: two locations, each verified once."""
    ports, tmp = world
    first, second = checkout(tmp / "ci-1"), checkout(tmp / "ci-2")
    profile = profile_in("hub-cache")
    orchestrators = [
        Orchestrator(ports, NullReporter(), root, root / "Dockerfile.llamacpp") for root in (first, second)
    ]
    for orchestrator in orchestrators:
        orchestrator.apply(profile)
    ports.hub.downloads.clear()
    ports.host.hashed.clear()
    said = switch(ports, [(orchestrator, profile) for orchestrator in orchestrators])
    assert ports.host.hashed == {} and ports.hub.downloads == [], said


def test_a_manifest_from_before_locations_still_counts_and_each_location_is_hashed_at_most_once(world):
    """The state dir of an older kimik3: one manifest per quant (no cache_dir), verified in A. A's files match its
    stats: verified, nothing hashed, nothing to record. B holds copies (another inode): re-hashed once, recorded
    under B; from then on, switching hashes nothing."""
    ports, tmp = world
    orchestrator = Orchestrator(ports, NullReporter(), checkout(tmp / "repo"), tmp / "repo" / "Dockerfile.llamacpp")
    a, b = profile_in(str(tmp / "nvme-a")), profile_in(str(tmp / "nvme-b"))
    orchestrator.apply(a)
    orchestrator.apply(b)
    key_a, key_b = (manifest_key(a.profile, str(tmp / d)) for d in ("nvme-a", "nvme-b"))
    older = {k: v for k, v in ports.state.read(key_a).items() if k != "cache_dir"}
    ports.state.delete(key_a)
    ports.state.delete(key_b)
    ports.state.write(manifest_key_before_locations(a.profile), older)
    ports.host.hashed.clear()
    ports.hub.downloads.clear()
    assert model_step(orchestrator, a)[0] is Action.NOOP and ports.host.hashed == {}
    action, reason = model_step(orchestrator, b)
    assert action is Action.UPDATE and "changed since verified (re-hashed: sha256 matches)" in reason
    assert sum(ports.host.hashed.values()) == sum(len(v) for v in FILES.values())  # B's copies, once
    orchestrator.apply(b)
    ports.host.hashed.clear()
    said = switch(ports, [(orchestrator, a), (orchestrator, b)])
    assert ports.host.hashed == {} and ports.hub.downloads == [], said
    assert ports.state.read(key_b)["cache_dir"] == str(tmp / "nvme-b")


def test_another_locations_record_copied_under_this_key_counts_as_absent(world):
    """A record names its cache dir: one copied by hand to another location's key is not that location's."""
    ports, tmp = world
    orchestrator = Orchestrator(ports, NullReporter(), checkout(tmp / "repo"), tmp / "repo" / "Dockerfile.llamacpp")
    a, b = profile_in(str(tmp / "nvme-a")), profile_in(str(tmp / "nvme-b"))
    orchestrator.apply(a)
    ports.state.write(
        manifest_key(b.profile, str(tmp / "nvme-b")), ports.state.read(manifest_key(a.profile, str(tmp / "nvme-a")))
    )
    action, reason = model_step(orchestrator, b)
    assert action is Action.CREATE and "2 of 2 files missing" in reason
