"""Orchestrator unit tests on in-memory fakes: convergence, idempotence, partial states, failures."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, fake_orchestrator

from kimik3_reconciler.errors import ConvergenceError, DownloadFailed, LoadFailed, VerifyFailed
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile

REV, PROFILE = FAKE_REVISION, FAKE_PROFILE
FILES = {
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf": b"shard-one" * 10,
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf": b"shard-two" * 10,
    "UD-Q4_K_XL/k3-UD-Q4_K_XL-00001-of-00001.gguf": b"other-quant",
}


# What an apply from nothing runs (the build pre-reads the model meanwhile, RAM holding it), and what a change of the
# server's launch runs: the model pre-read while the old server still serves, the container replaced, the wait.
FIRST_APPLY = [
    ("model", Action.CREATE),
    ("image", Action.CREATE),
    ("preread", Action.READ),
    ("container", Action.CREATE),
    ("health", Action.READ),
]
RELAUNCH = [("preread", Action.READ), ("container", Action.REPLACE), ("health", Action.READ)]


def verify_failing(check: str) -> Callable[[], None]:
    """A verify whose `check` fails on k3-test."""

    def failing() -> None:
        raise VerifyFailed(f"verify failed ({check}) for k3-test")

    return failing


@pytest.fixture
def world(tmp_path: Path):
    orchestrator, _, docker, hub = fake_orchestrator(tmp_path, FILES, REV)
    return orchestrator, docker, hub, tmp_path


def load(text: str = PROFILE, **replacements: str):
    for old, new in replacements.items():
        text = text.replace(old, new)
    return parse_profile(text, "test.yaml")


def kinds(plan) -> list[tuple[str, Action]]:
    return [(s.kind, s.action) for s in plan.steps]


def test_first_apply_downloads_builds_launches_and_waits(world):
    orchestrator, docker, hub, _ = world
    result = orchestrator.apply(load())
    # The build pre-reads the model meanwhile (RAM holds it): the pre-read step before the launch finds it resident.
    assert [(s.kind, s.action) for s in result.executed] == FIRST_APPLY
    assert result.executed[1].spec.preread is not None and len(orchestrator.ports.host.preread_calls) == 1
    assert docker.calls == [
        "pull nvidia/cuda:13.0.0-devel-ubuntu24.04",
        "pull nvidia/cuda:13.0.0-runtime-ubuntu24.04",
        "build kimi-k3-llamacpp:mainline-ad1de39-cpu",
        "run k3-test",
    ]
    assert hub.downloads == [tuple(sorted(p for p in FILES if p.startswith("UD-Q2_K_XL/")))]
    assert result.final.converged


def test_second_apply_touches_nothing_and_lists_nothing(world):
    orchestrator, docker, hub, _ = world
    orchestrator.apply(load())
    before = (dict(docker.containers["k3-test"]["State"]), docker.containers["k3-test"]["Id"], len(docker.calls))
    listings = hub.listings
    result = orchestrator.apply(load())
    assert not result.changed
    assert (docker.containers["k3-test"]["State"], docker.containers["k3-test"]["Id"], len(docker.calls)) == before
    # the verified manifest answers: a no-op plan makes no hub request
    assert hub.listings == listings


def test_ubatch_change_replaces_only_the_container(world):
    orchestrator, docker, _, _ = world
    orchestrator.apply(load())
    plan = orchestrator.plan(load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")))
    changes = plan.changes
    # the serving container is swapped: its model is pre-read first (issue 15), while it still serves
    assert [(s.kind, s.action) for s in changes] == RELAUNCH
    assert [str(d) for d in changes[1].diff] == ["serve.ubatch: 4096 → 2048"]


def test_quant_change_downloads_and_replaces_without_building(world):
    orchestrator, docker, hub, _ = world
    orchestrator.apply(load())
    calls = len(docker.calls)
    result = orchestrator.apply(load(PROFILE.replace("UD-Q2_K_XL", "UD-Q4_K_XL")))
    assert [(s.kind, s.action) for s in result.executed] == [("model", Action.CREATE), *RELAUNCH]
    assert docker.calls[calls:] == ["rm k3-test", "run k3-test"]


def test_killed_container_is_started_again(world):
    orchestrator, docker, _, _ = world
    orchestrator.apply(load())
    docker.containers["k3-test"]["State"].update(Status="exited", ExitCode=137)
    plan = orchestrator.plan(load())
    assert plan.changes[0].kind == "container" and plan.changes[0].action is Action.UPDATE
    assert "exit code 137" in plan.changes[0].reason
    orchestrator.apply(load())
    assert docker.containers["k3-test"]["State"]["Status"] == "running"


def test_removed_blob_is_refetched(world):
    orchestrator, _, hub, _ = world
    orchestrator.apply(load())
    (hub.root / "cache" / "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf").unlink()
    plan = orchestrator.plan(load())
    assert plan.steps[0].action is Action.CREATE and "1 of 2 files missing" in plan.steps[0].reason


def test_corrupt_download_is_refused_removed_and_never_launched(world):
    orchestrator, docker, hub, _ = world
    hub.corrupt.add("UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf")
    with pytest.raises(DownloadFailed, match="sha256"):
        orchestrator.apply(load())
    assert docker.calls == []
    assert not (hub.root / "cache" / "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf").exists()
    hub.corrupt.clear()
    assert orchestrator.apply(load()).final.converged


def test_crash_while_loading_fails_with_log_tail(world):
    orchestrator, docker, _, _ = world
    docker.crash_on_start = True
    with pytest.raises(LoadFailed, match="exiting due to model loading error"):
        orchestrator.apply(load())


def test_load_that_never_finishes_times_out(world):
    orchestrator, docker, _, _ = world
    orchestrator.ports.http.loading_polls = 10**9
    with pytest.raises(LoadFailed, match="not healthy after"):
        orchestrator.apply(load())


def test_round_limit_names_what_did_not_converge(world, monkeypatch):
    orchestrator, docker, _, _ = world
    real_run = docker.run_container

    def run_without_labels(spec):  # something strips our labels: the fingerprint never matches
        cid = real_run(spec)
        docker.containers[spec.name]["Config"]["Labels"] = {}
        return cid

    monkeypatch.setattr(docker, "run_container", run_without_labels)
    with pytest.raises(ConvergenceError, match="container k3-test"):
        orchestrator.apply(load(), max_rounds=2)


def test_destroy_keeps_image_and_model_unless_asked(world):
    orchestrator, docker, hub, tmp = world
    orchestrator.apply(load())
    orchestrator.destroy(load(), images=False, model=False)
    assert "k3-test" not in docker.containers and docker.images
    assert (hub.root / "cache" / "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf").exists()
    orchestrator.apply(load())
    orchestrator.destroy(load(), images=True, model=True)
    assert not docker.images
    assert not (hub.root / "cache" / "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf").exists()


def test_destroy_images_never_removes_another_profiles_build_under_the_same_tag(world):
    """The image tag is source-commit-variant only. Was: `destroy --images` of a profile removed whatever build held
    its tag, here another profile's (another source archive: another fingerprint), which that deployment then lacked."""
    orchestrator, docker, hub, tmp = world
    orchestrator.apply(load())  # k3-test builds kimi-k3-llamacpp:mainline-<commit>-cpu
    (tmp / "src2.tar.gz").write_bytes(b"other source")  # another archive: another build, the same tag
    other = load(
        **{
            "name: k3-test": "name: k3-other",
            "archive: src.tar.gz": "archive: src2.tar.gz, archive_sha256: "
            + hashlib.sha256(b"other source").hexdigest(),
            "port: 18999": "port: 18998",
        }
    )
    plan = orchestrator.destroy(other, images=True, model=False)
    kept = [s for s in plan.steps if s.kind == "image"]
    assert kept and kept[0].action == Action.NOOP and "another build" in kept[0].reason and "k3-test" in kept[0].reason
    assert "this profile's build is " in kept[0].reason
    assert docker.images  # k3-test's build is still there
    assert orchestrator.plan(load()).changes == ()  # and k3-test is still converged
    orchestrator.destroy(load(), images=True, model=False)  # its own profile still removes it
    assert not docker.images


def test_patch_change_rebuilds_and_replaces_without_download(world):
    orchestrator, docker, hub, tmp = world
    orchestrator.apply(load())
    (tmp / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    plan = orchestrator.plan(load(PROFILE.replace("archive: src.tar.gz", "archive: src.tar.gz, patches: [fix.patch]")))
    assert [(s.kind, s.action) for s in plan.changes] == [("image", Action.CREATE), *RELAUNCH]
    assert any(d.field == "build.patches" for d in plan.changes[0].diff)
    digest = hashlib.sha256(b"--- a/x\n+++ b/x\n").hexdigest()[:12]
    assert f"fix.patch@{digest}" in str(plan.changes[0].diff)


def test_smoke_test_runs_once_per_image_and_a_failing_image_is_never_launched(world):
    orchestrator, docker, _, _ = world
    with_smoke = load(PROFILE.replace("gate: {smoke: false}", "gate: {smoke: true}"))
    docker.crash_on_start = True
    with pytest.raises(LoadFailed, match="failed its smoke test"):
        orchestrator.apply(with_smoke)
    assert "run k3-test" not in docker.calls and "k3-test-smoke" not in docker.containers
    plan = orchestrator.plan(with_smoke)
    smoke = next(s for s in plan.steps if s.kind == "smoke")
    assert smoke.action is Action.READ and "the last smoke test failed" in smoke.reason
    docker.crash_on_start = False
    orchestrator.apply(with_smoke)
    assert docker.calls.count("run k3-test-smoke") == 2 and "run k3-test" in docker.calls
    orchestrator.apply(with_smoke)
    assert docker.calls.count("run k3-test-smoke") == 2  # passed once: not run again
    assert (
        next(s for s in orchestrator.plan(with_smoke).steps if s.kind == "smoke").reason
        == "image passed its smoke test"
    )


def test_prune_removes_older_builds_but_not_the_current_image(world):
    orchestrator, docker, _, tmp = world
    orchestrator.apply(load())
    first = set(docker.images)
    (tmp / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    patched = load(PROFILE.replace("archive: src.tar.gz", "archive: src.tar.gz, patches: [fix.patch]"))
    orchestrator.apply(patched)
    assert len(docker.images) == 2  # the old build stays as a rollback target
    pruning = orchestrator.prune(patched)
    assert [s.action for s in pruning.steps if s.changes] == [Action.DELETE]
    assert set(docker.images).isdisjoint(first) and len(docker.images) == 1


def test_going_back_to_a_kept_build_retags_it_without_compiling(world):
    orchestrator, docker, _, tmp = world
    orchestrator.apply(load())
    (tmp / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    orchestrator.apply(load(PROFILE.replace("archive: src.tar.gz", "archive: src.tar.gz, patches: [fix.patch]")))
    builds = len(docker.builds)
    plan = orchestrator.plan(load())
    image = next(s for s in plan.steps if s.kind == "image")
    assert image.action is Action.UPDATE and "no rebuild" in image.reason
    assert [s.kind for s in plan.changes] == ["image", "preread", "container", "health"]
    orchestrator.apply(load())
    assert len(docker.builds) == builds and "tag kimi-k3-llamacpp:mainline-ad1de39-cpu" in docker.calls
    running = docker.containers["k3-test"]
    assert running["Image"] == docker.image_id("kimi-k3-llamacpp:mainline-ad1de39-cpu")


def test_conflicting_profiles_stop_each_other_first(world):
    orchestrator, docker, _, _ = world
    main = load()
    interactive = load(PROFILE.replace("name: k3-test", "name: k3-interactive"))
    orchestrator.apply(main)
    plan = orchestrator.plan(interactive)
    conflict = [s for s in plan.changes if s.kind == "conflict"]
    assert [(s.target, s.action) for s in conflict] == [("k3-test", Action.UPDATE)]
    assert "it listens on port 18999 too" in conflict[0].reason
    orchestrator.apply(interactive)
    assert docker.containers["k3-test"]["State"]["Status"] == "exited"
    assert docker.containers["k3-interactive"]["State"]["Status"] == "running"
    assert docker.calls.index("stop k3-test") < docker.calls.index("run k3-interactive")
    orchestrator.apply(main)  # and back: the other one stops, ours starts again (same container)
    assert docker.containers["k3-interactive"]["State"]["Status"] == "exited"
    assert docker.containers["k3-test"]["State"]["Status"] == "running"


def test_profiles_on_other_gpus_and_ports_do_not_conflict(world):
    orchestrator, docker, _, _ = world
    orchestrator.apply(load())
    other = load(PROFILE.replace("name: k3-test", "name: k3-b").replace("port: 18999", "port: 18998"))
    assert not [s for s in orchestrator.plan(other).steps if s.kind == "conflict"]


def test_sizing_gate_refuses_with_the_numbers_before_any_byte(world):
    from kimik3_reconciler.errors import PlanError

    orchestrator, docker, hub, _ = world
    orchestrator.ports.host.free_bytes = 100  # the two shards need 180 bytes (+10 % headroom = 198)
    with pytest.raises(PlanError) as refused:
        orchestrator.apply(load())
    message = str(refused.value)
    assert "180 B to fetch (+10% headroom: 198 B) but only 100 B free" in message
    assert "short by 98 B" in message and "[UD-Q2_K_XL/ 2 file(s) 180 B]" in message
    assert hub.downloads == [] and docker.calls == []


def test_reload_downtime_is_predicted_from_the_last_measured_load(world):
    orchestrator, _, _, _ = world
    before = orchestrator.plan(load()).steps[-1].cost
    assert "seed 000's 802 GB in ~17 min" in before
    orchestrator.ports.host.meminfo = lambda: "MemTotal:       24683584 kB\nMemAvailable:     102400 kB\n"
    orchestrator.apply(load())  # one 503 poll, then 200: 0.2 s for 180 bytes on the fake clock; no RAM: a cold load
    del orchestrator.ports.host.meminfo
    changed = orchestrator.plan(load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")))
    cost = changed.steps[-1].cost
    # the swap pre-reads: the cold rate measured here, scaled by issue 15's warm/cold ratio
    assert cost.startswith("predicted downtime ~0 s (pre-read: ") and "measured here" in cost
    launch = orchestrator.ports.docker.run_container

    def launch_then_load(spec):  # the new server answers 503 once (the observation before saw the old one: 200)
        orchestrator.ports.http.loading_polls = 1
        return launch(spec)

    orchestrator.ports.docker.run_container = launch_then_load
    orchestrator.apply(load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")))  # a warm load, recorded
    back = orchestrator.plan(load()).steps[-1].cost
    assert "from the page cache at" in back and "measured here" in back


def test_two_profiles_on_one_pin_do_not_relaunch_each_other(world):
    orchestrator, docker, _, tmp = world
    (tmp / "fix.patch").write_text("--- a/x\n+++ b/x\n")
    a = load()
    b = load(
        PROFILE.replace("name: k3-test", "name: k3-b")
        .replace("port: 18999", "port: 18998")
        .replace("archive: src.tar.gz", "archive: src.tar.gz, patches: [fix.patch]")
    )
    orchestrator.apply(a)
    orchestrator.apply(b)  # moves the shared tag to B's build
    assert orchestrator.plan(a).converged and orchestrator.plan(b).converged
    changed = orchestrator.plan(load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")))
    image = next(s for s in changed.steps if s.kind == "image")
    assert image.action is Action.UPDATE  # a new container of A must start from A's build: re-tag first
    orchestrator.apply(load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")))
    fp_a = docker.containers["k3-test"]["Config"]["Labels"]["kimik3.inputs"]
    assert docker.containers["k3-test"]["Image"] != docker.containers["k3-b"]["Image"] and "fix.patch" not in fp_a


def test_apply_verifies_after_a_change_unless_told_not_to(world, monkeypatch):
    from click.testing import CliRunner

    import kimik3_reconciler.adapters as adapters
    import kimik3_reconciler.verify as verify_module
    from kimik3_reconciler import cli

    orchestrator, _, _, tmp = world
    (tmp / "p.yaml").write_text(PROFILE)
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: orchestrator.ports)
    calls = []
    monkeypatch.setattr(
        verify_module,
        "verify",
        lambda eng, loaded: (
            calls.append(loaded.profile.name) or verify_module.VerifyReport(profile=loaded.profile.name)
        ),
    )
    args = ["--dockerfile", str(tmp / "Dockerfile.llamacpp"), "apply", str(tmp / "p.yaml")]
    assert CliRunner().invoke(cli.main, [*args, "--no-verify-server"]).exit_code == 0
    assert calls == []  # changed, but told not to verify
    orchestrator.ports.docker.containers.clear()
    assert CliRunner().invoke(cli.main, args).exit_code == 0
    assert calls == ["k3-test"]


def test_an_unreachable_hub_is_a_hub_error_and_the_gate_speaks_before_any_hub_request(world, monkeypatch):
    from kimik3_reconciler.errors import HubError, PlanError

    orchestrator, docker, hub, _ = world
    asked = []

    def down(*args, **kwargs):
        asked.append(args)
        raise HubError("hub http://127.0.0.1:9 not reachable: connection refused")

    monkeypatch.setattr(hub, "list_files", down)
    with pytest.raises(HubError, match="cannot plan the download of org/k3: hub http://127.0.0.1:9 not reach") as e:
        orchestrator.plan(load())
    assert e.value.exit_code == 6 and len(asked) == 1
    orchestrator.ports.host.numa = "1\n"  # a host the gate refuses: that refusal comes first, the hub is never asked
    with pytest.raises(PlanError, match="numa_balancing = 1") as refused:
        orchestrator.plan(load())
    assert refused.value.exit_code == 3 and len(asked) == 1
    assert docker.calls == []


def test_a_failed_load_relaunches_the_last_good_profile(world):
    orchestrator, docker, _, _ = world
    good = load()
    orchestrator.apply_or_revert(good)  # converged: recorded as the last good profile
    bad = load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048"))
    plan = orchestrator.plan(bad)
    assert any("relaunches the last good profile" in w for w in plan.warnings)  # said up front
    real_run = docker.run_container

    def crash_the_new_one(spec):  # the new launch spec dies while loading; the old one is fine
        docker.crash_on_start = "2048" in spec.command
        return real_run(spec)

    docker.run_container = crash_the_new_one
    with pytest.raises(LoadFailed, match="reverted to the last good profile"):
        orchestrator.apply_or_revert(bad)
    assert docker.containers["k3-test"]["State"]["Status"] == "running"
    cmd = docker.containers["k3-test"]["Config"]["Cmd"]
    assert cmd[cmd.index("--ubatch-size") + 1] == "4096"  # the last good launch spec runs


def test_a_failed_check_reverts_and_says_why(world):

    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    bad = load(PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048"))

    with pytest.raises(VerifyFailed, match="reverted to the last good profile"):
        orchestrator.apply_or_revert(bad, verify_failing("tool_call"))
    cmd = docker.containers["k3-test"]["Config"]["Cmd"]
    assert cmd[cmd.index("--ubatch-size") + 1] == "4096"


def test_a_plan_writes_no_state(world):
    """`plan` is read-only (CI runs it without the apply lock): records are written by steps only. Its caches
    (the source archive's sha256 by stat) go to the cache dir, never the state dir."""
    orchestrator, _, _, _ = world
    state = orchestrator.ports.state
    orchestrator.plan(load())
    assert state.records == {}
    assert list(orchestrator.ports.cache.entries) and all(
        k.startswith("sha256/") for k in orchestrator.ports.cache.entries
    )
    orchestrator.apply(load())
    before = copy.deepcopy(state.records)
    orchestrator.plan(load())
    assert state.records == before
