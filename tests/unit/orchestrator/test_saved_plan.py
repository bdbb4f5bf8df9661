"""`plan -out` / `apply PLAN` on in-memory fakes: exactly the saved steps run; a moved host or profile refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports
from test_orchestrator import FIRST_APPLY

from kimik3_reconciler.errors import StalePlan
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.plan_file import content_digest, read_saved_plan, write_saved_plan
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter

FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard-one" * 10}


@pytest.fixture
def world(tmp_path: Path):
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    (tmp_path / "profile.yaml").write_text(FAKE_PROFILE)
    ports, docker = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), docker, tmp_path


def save(orchestrator: Orchestrator, work: Path):
    """As the CLI does: plan, write the file, read it back (what apply gets is what the file holds)."""
    source = str(work / "profile.yaml")
    _, saved = orchestrator.save_plan(parse_profile(FAKE_PROFILE, source), source)
    return read_saved_plan(write_saved_plan(saved), "plan.json")


def apply_saved(orchestrator: Orchestrator, saved):
    loaded = parse_profile(saved.profile_text, saved.profile_source)
    return orchestrator.apply_saved(loaded, saved, Path(saved.profile_source).read_text())


def test_a_saved_plan_runs_exactly_its_steps_and_converges(world):
    orchestrator, docker, work = world
    saved = save(orchestrator, work)
    assert [(s.kind, s.action) for s in saved.changes] == FIRST_APPLY
    assert saved.changes[1].spec.preread is not None  # the build's pre-read went through the file
    result = apply_saved(orchestrator, saved)
    assert [s.spec for s in result.executed] == [s.spec for s in saved.changes]
    assert result.final.converged and docker.containers["k3-test"]["State"]["Status"] == "running"
    again = save(orchestrator, work)  # converged: a saved plan with nothing to do applies as a no-op
    assert apply_saved(orchestrator, again).executed == []


def test_a_removed_container_makes_the_plan_stale_naming_it_and_nothing_runs(world):
    orchestrator, docker, work = world
    apply_saved(orchestrator, save(orchestrator, work))
    docker.containers["k3-test"]["State"]["Status"] = "exited"  # stopped by hand: the plan would start it
    saved = save(orchestrator, work)
    del docker.containers["k3-test"]
    calls = list(docker.calls)
    with pytest.raises(StalePlan) as stale:
        apply_saved(orchestrator, saved)
    assert stale.value.exit_code == 7 and docker.calls == calls
    moved = "\n".join(stale.value.moved)
    assert "container k3-test: exited " in moved and "→ (none)" in moved
    assert "step + container k3-test: planned now, not in the saved plan" in moved
    assert "step ~ container k3-test: no longer planned" in moved
    assert "nothing was changed" in str(stale.value) and f"kimik3 plan {work / 'profile.yaml'} -out" in str(stale.value)


def test_an_edited_profile_makes_the_plan_stale_naming_the_field(world):
    orchestrator, docker, work = world
    saved = save(orchestrator, work)
    (work / "profile.yaml").write_text(FAKE_PROFILE.replace("port: 18999", "port: 19000"))
    with pytest.raises(StalePlan) as stale:
        apply_saved(orchestrator, saved)
    assert stale.value.moved == (f"profile {work / 'profile.yaml'}: serve.port: 18999 → 19000",)
    assert docker.calls == []
    (work / "profile.yaml").write_text(FAKE_PROFILE + "# a comment\n")
    with pytest.raises(StalePlan, match="edited \\(comments or layout only\\)"):
        apply_saved(orchestrator, saved)
    (work / "profile.yaml").unlink()
    with pytest.raises(StalePlan, match="no longer readable"):
        orchestrator.apply_saved(parse_profile(saved.profile_text, saved.profile_source), saved, None)


def test_a_model_fetched_since_makes_the_plan_stale(world):
    orchestrator, _, work = world
    saved = save(orchestrator, work)
    orchestrator.apply(parse_profile(FAKE_PROFILE, str(work / "profile.yaml")))  # someone else converged meanwhile
    with pytest.raises(StalePlan) as stale:
        apply_saved(orchestrator, saved)
    moved = "\n".join(stale.value.moved)
    assert "model.missing: UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf → none" in moved
    assert "container k3-test: (none) → running" in moved


def test_another_profile_coming_and_going_on_a_shared_host_does_not_make_it_stale(world):
    orchestrator, docker, work = world
    apply_saved(orchestrator, save(orchestrator, work))
    docker.containers["k3-test"]["State"]["Status"] = "exited"
    saved = save(orchestrator, work)
    other = FAKE_PROFILE.replace("name: k3-test", "name: k3-other").replace("port: 18999", "port: 19001")
    orchestrator.apply(parse_profile(other, "other.yaml"))  # another team's deployment: other port, no GPUs
    result = apply_saved(orchestrator, saved)
    assert [s.kind for s in result.executed] == ["container", "health"]


def test_the_plan_file_holds_no_secret(world):
    orchestrator, _, work = world
    (work / "api.key").write_text("sk-very-secret-key-123\n")
    text = FAKE_PROFILE.replace("parallel: 2}", "parallel: 2, api_key_file: api.key}")
    (work / "profile.yaml").write_text(text)
    source = str(work / "profile.yaml")
    _, saved = orchestrator.save_plan(parse_profile(text, source), source)
    written = write_saved_plan(saved)
    assert "sk-very-secret-key-123" not in written and str(work / "api.key") in written


def test_health_is_not_a_decision_a_load_in_progress_is_waited_for_either_way(world):
    orchestrator, docker, work = world
    apply_saved(orchestrator, save(orchestrator, work))
    http = orchestrator.ports.http
    http.loading_polls = 1  # the plan is made while the model loads: it holds a health wait
    saved = save(orchestrator, work)
    assert [s.kind for s in saved.changes] == ["health"]
    assert [s.kind for s in apply_saved(orchestrator, saved).executed] == ["health"]  # healthy by now: not stale
    saved = save(orchestrator, work)  # made when healthy: nothing to do ...
    http.loading_polls = 2  # ... but the server is loading again when it is applied: apply waits, as apply does
    result = apply_saved(orchestrator, saved)
    assert [s.kind for s in result.executed] == ["health"] and result.final.converged


def test_the_preread_is_not_a_decision_memory_that_moved_does_not_make_a_plan_stale(world):
    """A knob change saved with a pre-read (RAM was free) still applies when MemAvailable has dropped since:
    the pre-read only speeds the load up, and RAM moves on its own (planning/basis.py)."""
    orchestrator, docker, work = world
    apply_saved(orchestrator, save(orchestrator, work))
    text, source = FAKE_PROFILE.replace("parallel: 2", "parallel: 3"), str(work / "profile.yaml")
    (work / "profile.yaml").write_text(text)
    saved = read_saved_plan(
        write_saved_plan(orchestrator.save_plan(parse_profile(text, source), source)[1]), "plan.json"
    )
    assert [s.kind for s in saved.changes] == ["preread", "container", "health"]
    orchestrator.ports.host.meminfo = lambda: "MemTotal:       24683584 kB\nMemAvailable:     102400 kB\n"
    now = orchestrator.plan(parse_profile(text, source))
    assert [s.action for s in now.steps if s.kind == "preread"] == [Action.NOOP]  # it would not pre-read now
    result = apply_saved(orchestrator, saved)
    assert [s.kind for s in result.executed] == ["preread", "container", "health"] and result.final.converged


def test_a_build_saved_with_its_preread_still_applies_when_memory_dropped(world):
    """The image build's pre-read (issue 15) is not a decision either: saved while RAM was free, the plan still
    applies after MemAvailable dropped, and the build reads the model as saved."""
    orchestrator, docker, work = world
    saved = save(orchestrator, work)
    assert saved.changes[1].kind == "image" and saved.changes[1].spec.preread is not None
    orchestrator.ports.host.meminfo = lambda: "MemTotal:       24683584 kB\nMemAvailable:     102400 kB\n"
    now = orchestrator.plan(parse_profile(FAKE_PROFILE, str(work / "profile.yaml")))
    image = next(s for s in now.steps if s.kind == "image")
    assert image.spec.preread is None  # it would not pre-read during the build now
    result = apply_saved(orchestrator, saved)
    assert [s.spec for s in result.executed] == [s.spec for s in saved.changes] and result.final.converged
    assert len(orchestrator.ports.host.preread_calls) == 1 and docker.builds[0].preread is None


def test_a_saved_plan_with_an_owed_verify_runs_it_through_the_verifier(world):
    """A launch an interrupted apply left unverified: the saved plan holds `<= verify`, and apply PLAN runs it."""
    orchestrator, _, work = world
    orchestrator.ports.verifier = lambda: None  # an apply that meant to verify, and died before it could
    apply_saved(orchestrator, save(orchestrator, work))
    orchestrator.ports.verifier = None
    saved = save(orchestrator, work)
    assert [(s.kind, s.action) for s in saved.changes] == [("verify", Action.READ)]
    checks: list[str] = []
    loaded = parse_profile(saved.profile_text, saved.profile_source)
    result = orchestrator.apply_or_revert(
        loaded,
        lambda: checks.append("verify"),
        run=lambda check: orchestrator.apply_saved(loaded, saved, FAKE_PROFILE, check),
    )
    assert checks == ["verify"] and [s.kind for s in result.executed] == ["verify"]
    assert orchestrator.plan(loaded).converged


class EditingHolder:
    """A lock port whose holder, an apply holding the lock for one more try, edits the profile file meanwhile."""

    def __init__(self, profile: Path):
        self.profile, self.tries = profile, 0

    def try_acquire(self, holder):  # noqa: ANN001, ANN201
        from kimik3_reconciler.model.host_lock import LockAttempt

        self.tries += 1
        if self.tries == 1:
            self.profile.write_text(self.profile.read_text().replace("parallel: 2", "parallel: 2, ubatch: 2048"))
            return LockAttempt(acquired=False)
        return LockAttempt(acquired=True)

    def release(self, holder) -> None:  # noqa: ANN001
        pass

    def holder(self):  # noqa: ANN201
        return None, False


def test_apply_plan_reads_the_profile_after_waiting_for_the_lock(world, monkeypatch):
    """The staleness check sees the profile as it is once the lock is held, not as it was before the wait."""
    from click.testing import CliRunner

    import kimik3_reconciler.adapters as adapters
    from kimik3_reconciler import cli

    orchestrator, docker, work = world
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: orchestrator.ports)
    base = ["--dockerfile", str(work / "Dockerfile.llamacpp")]
    planned = CliRunner().invoke(cli.main, [*base, "plan", str(work / "profile.yaml"), "-out", str(work / "p.plan")])
    assert planned.exit_code == 0, planned.output
    orchestrator.ports.lock = EditingHolder(work / "profile.yaml")
    applied = CliRunner().invoke(cli.main, [*base, "apply", "--lock-timeout", "1m", str(work / "p.plan")])
    assert applied.exit_code == 7, applied.output  # StalePlan: the holder's edit is seen
    assert "serve.ubatch" in applied.output and orchestrator.ports.lock.tries == 2
    assert docker.containers == {}  # nothing ran


@pytest.mark.parametrize("breakage", ["basis-list", "observed-list", "action-number", "diff-strings"])
def test_a_plan_file_with_fields_of_the_wrong_type_is_refused_as_input(world, breakage):
    import json

    from kimik3_reconciler.errors import InputError

    orchestrator, _, work = world
    data = json.loads(write_saved_plan(save(orchestrator, work)))
    if breakage == "basis-list":
        data["observed"]["basis"] = ["container k3"]
    elif breakage == "observed-list":
        data["observed"] = []
    elif breakage == "action-number":
        data["steps"][0]["action"] = 3
    else:
        data["steps"][0]["diff"] = ["serve.port"]
    with pytest.raises(InputError, match="plan.json: not a readable kimik3 saved plan") as refused:
        read_saved_plan(json.dumps(_resealed(data)), "plan.json")
    assert refused.value.exit_code == 2


WITH_WORKER = FAKE_PROFILE + "rpc: {workers: [{name: w1, docker: 'ssh://k3@10.0.0.2', bind: 10.0.0.2}]}\n"


@pytest.fixture
def with_worker(world):
    """The world with one RPC worker host (its own fake Docker), converged with WITH_WORKER."""
    from support.fakes import FakeDocker

    class WorkerDocker(FakeDocker):
        def info(self) -> dict[str, object]:
            return {"ID": "worker-daemon"}

        def exec_output(self, name: str, argv: list[str]) -> str:
            return ""

    orchestrator, docker, work = world
    worker = WorkerDocker()
    orchestrator.ports.worker_docker = lambda host: worker
    orchestrator.ports.host.tcp_connect = lambda address, port, timeout_s=2.0: True
    (work / "profile.yaml").write_text(WITH_WORKER)
    orchestrator.apply_or_revert(parse_profile(WITH_WORKER, str(work / "profile.yaml")))
    assert worker.containers["k3-test-rpc-w1"]["State"]["Status"] == "running"
    return orchestrator, worker, work


def save_text(orchestrator: Orchestrator, work: Path, text: str):
    (work / "profile.yaml").write_text(text)
    source = str(work / "profile.yaml")
    _, saved = orchestrator.save_plan(parse_profile(text, source), source)
    return read_saved_plan(write_saved_plan(saved), "plan.json")


def test_a_worker_removed_since_the_plan_makes_it_stale_naming_the_worker(with_worker):
    orchestrator, worker, work = with_worker
    saved = save_text(orchestrator, work, WITH_WORKER)  # converged: nothing to do, on these facts
    del worker.containers["k3-test-rpc-w1"]
    calls = list(worker.calls)
    with pytest.raises(StalePlan) as stale:
        apply_saved(orchestrator, saved)
    moved = "\n".join(stale.value.moved)
    assert "worker w1: rpc-server running " in moved and "→ no rpc-server" in moved
    assert worker.calls == calls  # nothing ran on the worker


def test_a_worker_relaunched_since_the_plan_makes_it_stale_even_where_the_steps_read_alike(with_worker):
    orchestrator, worker, work = with_worker
    saved = save_text(orchestrator, work, WITH_WORKER)
    container = worker.containers["k3-test-rpc-w1"]
    container["Id"], container["State"]["StartedAt"] = "f" * 64, "2030-01-01T00:00:00.000000000Z"
    with pytest.raises(StalePlan) as stale:
        apply_saved(orchestrator, saved)
    (line,) = [m for m in stale.value.moved if m.startswith("worker w1:")]
    assert "rpc-server running ffffffffffff since 2030-01-01" in line


def test_a_dropped_worker_that_moved_since_the_plan_makes_it_stale_naming_it(with_worker):
    orchestrator, worker, work = with_worker
    saved = save_text(orchestrator, work, FAKE_PROFILE)  # the rpc section dropped: the plan removes w1's rpc-server
    assert ("worker", Action.DELETE) in [(s.kind, s.action) for s in saved.changes]
    del worker.containers["k3-test-rpc-w1"]  # removed by hand meanwhile
    with pytest.raises(StalePlan) as stale:
        apply_saved(orchestrator, saved)
    assert any(
        m.startswith("dropped worker w1 (ssh://k3@10.0.0.2): rpc-server running ") and m.endswith("→ no rpc-server")
        for m in stale.value.moved
    ), stale.value.moved


def _resealed(data: dict) -> dict:
    """The file's content digests recomputed after an edit: a file edited by someone who also rewrote them (the
    digests catch edits, not forgeries), so what apply checks behind them is reached."""
    return {**data, "content_digest": content_digest({k: v for k, v in data.items() if k != "content_digest"})}


def _edited(saved, edit) -> object:
    """The saved plan as its file reads after `edit(steps_json)` changed it by hand and the digests were rewritten."""
    import json

    data = json.loads(write_saved_plan(saved))
    edit(data["steps"])
    return read_saved_plan(json.dumps(_resealed(data)), "plan.json")


def _spec_of(steps: list[dict], kind: str) -> dict:
    return next(s["spec"]["fields"] for s in steps if s["kind"] == kind and s["action"] != "noop")


@pytest.mark.parametrize(
    "field, value",
    [
        ("container", "someone-elses-db"),
        ("unit", "sshd.service"),
        ("url", "http://127.0.0.1:1/health"),
        ("model_bytes", 1),
    ],
)
def test_a_hand_edited_health_wait_makes_the_plan_stale_and_nothing_runs(world, field, value):
    """Health waits are not decisions (they are left out of the step comparison), but their payload acts: a failed
    load stops `container` and `unit`. Found by the held-back review: an edited wait ran unchecked."""
    orchestrator, docker, work = world
    saved = _edited(save(orchestrator, work), lambda steps: _spec_of(steps, "health").update({field: value}))
    with pytest.raises(StalePlan, match=r"step <= health .*: its health wait differs from the one planned now"):
        apply_saved(orchestrator, saved)
    assert "k3-test" not in docker.containers and docker.builds == []


def test_a_hand_edited_timeout_still_applies(world):
    """The timeout follows the measured load rate (it moves on its own): not an edit to refuse."""
    orchestrator, docker, work = world
    saved = _edited(save(orchestrator, work), lambda steps: _spec_of(steps, "health").update({"timeout_s": 999.0}))
    assert apply_saved(orchestrator, saved).final.converged


@pytest.mark.parametrize("kind", ["preread", "image"])
def test_a_hand_edited_preread_makes_the_plan_stale(world, kind):
    orchestrator, docker, work = world

    def edit(steps: list[dict]) -> None:
        spec = _spec_of(steps, kind)
        (spec["preread"] if kind == "image" else spec)["files"] = ["/etc/shadow"]

    saved = save(orchestrator, work)
    if kind == "preread":  # a pre-read step of its own comes with a swap: make one
        apply_saved(orchestrator, saved)
        text, source = FAKE_PROFILE.replace("parallel: 2", "parallel: 3"), str(work / "profile.yaml")
        (work / "profile.yaml").write_text(text)
        saved = read_saved_plan(
            write_saved_plan(orchestrator.save_plan(parse_profile(text, source), source)[1]), "p.json"
        )
    reads = list(orchestrator.ports.host.preread_calls)
    with pytest.raises(StalePlan, match=rf"step \S+ {kind} .*: its pre-read differs from the model's files now"):
        apply_saved(orchestrator, _edited(saved, edit))
    assert orchestrator.ports.host.preread_calls == reads


@pytest.mark.parametrize("made_by", ["", "0.1.0 (code 0000000000000000)"], ids=["older", "other-code"])
def test_a_plan_made_by_another_kimik3_is_stale_before_anything_is_observed(world, made_by):
    """Held-back review: a plan made by another kimik3 (an upgrade, a checkout moved between plan and apply) ran
    with this kimik3's executors, or failed as unreadable when a payload's shape had moved. Now exit 7, at once."""
    import dataclasses

    from kimik3_reconciler.cli.inputs import check_made_by, kimik3_identity

    orchestrator, docker, work = world
    saved = save(orchestrator, work)
    check_made_by(dataclasses.replace(saved, made_by=kimik3_identity()), "plan.json")  # this kimik3's: runs
    back = read_saved_plan(write_saved_plan(dataclasses.replace(saved, made_by=made_by)), "plan.json")
    with pytest.raises(
        StalePlan,
        match=r"^the saved plan plan.json \(made .*\) was made by (kimik3 0\.1\.0 \(code 0+\)"
        r"|an older kimik3 \(the plan names none\)); this is kimik3 .*: nothing was "
        r"changed",
    ) as stale:
        check_made_by(back, "plan.json")
    assert stale.value.exit_code == 7


def test_what_makes_a_kimik3_is_what_it_ships_not_stray_files_beside_it(tmp_path: Path) -> None:
    """An editor's swap file or a patch's *.orig in a development checkout made a plan saved a second earlier
    stale (exit 7): the identity hashes the code and the package data only."""
    from kimik3_reconciler.cli.inputs import _is_shipped

    for name, shipped in [
        ("orchestrator.py", True),
        ("patches/x.patch", True),
        ("gate_text.txt", True),
        ("Dockerfile.llamacpp", True),
        (".orchestrator.py.swp", False),
        ("orchestrator.py.orig", False),
        ("patches/x.patch.rej", False),
        ("__pycache__/orchestrator.cpython-311.py", False),
    ]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        assert _is_shipped(path) is shipped, name


@pytest.mark.parametrize("edit", ["duplicate", "reorder"])
def test_a_step_listed_twice_or_moved_makes_the_plan_stale(world, edit):
    """The per-step comparison is by (kind, target, action): a copied step or a launch moved before its download
    read alike there, and would have run twice or out of order."""
    orchestrator, docker, work = world

    def change(steps: list[dict]) -> None:
        at = next(i for i, s in enumerate(steps) if s["kind"] == "container")
        if edit == "duplicate":
            steps.insert(at, dict(steps[at]))
        else:
            steps.insert(0, steps.pop(at))

    with pytest.raises(
        StalePlan,
        match="listed 2 times in the saved plan" if edit == "duplicate" else "in another order than the planner's",
    ):
        apply_saved(orchestrator, _edited(save(orchestrator, work), change))
    assert "k3-test" not in docker.containers and docker.builds == []


def test_an_out_path_in_a_missing_folder_is_refused_before_the_host_is_read(tmp_path: Path, monkeypatch) -> None:
    """Was: the whole plan was made (host, hub), then exit 8 with a hint about KIMIK3_STATE_DIR and the profile's
    paths. Now exit 8 (README: a missing local path) naming -out and the folder, before the orchestrator is built."""
    from click.testing import CliRunner

    from kimik3_reconciler import cli

    profile = tmp_path / "k3.yaml"
    profile.write_text(FAKE_PROFILE)
    monkeypatch.setenv("KIMIK3_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(cli, "load", lambda *a, **k: pytest.fail("the profile and host were read"))
    result = CliRunner().invoke(cli.main, ["plan", str(profile), "-out", str(tmp_path / "nope" / "k3.plan")])
    assert result.exit_code == 8, result.output
    assert "-out" in result.output and "nope: -out" in result.output and "KIMIK3_STATE_DIR" not in result.output
