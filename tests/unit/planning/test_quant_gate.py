"""The quant gate's measurement parser and verdict, on llama-perplexity outputs recorded from the
real CPU image (tiny kimi-k3 models; see tests/fixtures/perplexity/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3_reconciler.engines.base import KldReport
from kimik3_reconciler.engines.llamacpp.perplexity import parse_kld_report
from kimik3_reconciler.model.profile_schema import QuantGate, values_of
from kimik3_reconciler.planning.quant_gate import gate_verdict

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "perplexity"
GATE = values_of(QuantGate())  # seed defaults: max_kld 0.5, min_top_token_agreement 0.80


REV = "ab" * 20


def fake_world(tmp_path: Path, quants: tuple[str, ...]):
    """An orchestrator on fakes whose hub holds `quants` of org/k3 (2 shards each)."""
    from support.fakes import FakeHub, fake_ports

    from kimik3_reconciler.orchestrator import Orchestrator
    from kimik3_reconciler.steps.report import NullReporter

    files = {f"{q}/k3-{q}-0000{i}-of-00002.gguf": f"{q}{i}".encode() * 10 for q in quants for i in (1, 2)}
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, docker = fake_ports(FakeHub("org/k3", REV, files, tmp_path / "hub"))
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), docker


def gated(quant: str, build: str, gpus: str, serve: str = ""):
    from kimik3_reconciler.model.profile_source import parse_profile

    return parse_profile(f"""
apiVersion: kimik3/v1
name: k3-test
model: {{repo: org/k3, revision: {REV}, quant: {quant}}}
build: {{source: mainline, archive: src.tar.gz, {build}}}
gpus: {gpus}
serve: {{port: 18999, ctx_size: 4096, parallel: 2{", " + serve if serve else ""}}}
gate: {{smoke: false, quant: {{reference_quant: UD-Q2_K_XL}}}}
""")


def report(name: str):
    return parse_kld_report((FIXTURES / name).read_text())


def test_the_same_weights_pass() -> None:
    same = report("kld-same-weights.out")
    assert (same.mean_kld, same.same_top_p) == (0.0, 1.0) and same.ppl == 257.603826
    assert gate_verdict(same, GATE) == (True, "KLD 0.000, top-token agreement 100.0%")


def test_other_weights_fail_on_agreement_even_with_a_low_kld() -> None:
    # Random tiny models: both distributions are near uniform, so KLD is small, but the top token
    # never agrees: the gate needs both numbers (seed 000: IQ2_XXS 0.37 / 84.6 % vs Q2_K_XL).
    other = report("kld-other-weights.out")
    assert other.mean_kld == 0.025575 and other.same_top_p == 0.0
    assert gate_verdict(other, GATE) == (False, "top-token agreement 0.0% < 80%")


def test_a_run_that_bails_out_is_a_failure() -> None:
    assert "failed to open /g/missing.kld" in (FIXTURES / "kld-missing-base.err").read_text()
    assert report("kld-missing-base.out") is None  # llama-perplexity exited 0 anyway
    passed, why = gate_verdict(None, GATE)
    assert not passed and "bailed out" in why


def test_seed_figures_against_the_defaults() -> None:

    assert gate_verdict(KldReport(mean_kld=0.37, same_top_p=0.846), GATE)[0]  # UD-IQ2_XXS
    assert not gate_verdict(KldReport(mean_kld=1.9, same_top_p=0.41), GATE)[0]  # "KLD >> 1": a broken kernel


def test_the_gate_step_on_fakes_inserted_skipped_recorded_and_refusing(tmp_path) -> None:
    from kimik3_reconciler.errors import GateFailed, PlanError

    orchestrator, docker = fake_world(tmp_path, ("UD-Q2_K_XL", "UD-IQ2_M", "UD-IQ2_XXS"))

    def profile(quant: str):
        return gated(quant, "variant: cpu, cpu_features: []", "none")

    vetted = orchestrator.plan(profile("UD-IQ2_XXS"))
    assert [s.action.name for s in vetted.steps if s.kind == "gate"] == ["NOOP"]
    assert not [s for s in vetted.steps if s.kind == "reference"]  # nothing to compare: no reference fetched
    docker.perplexity_outputs["UD-IQ2_M"] = (FIXTURES / "kld-other-weights.out").read_text()
    kinds = [s.kind for s in orchestrator.plan(profile("UD-IQ2_M")).changes]
    assert kinds[:3] == ["model", "reference", "image"] and kinds.index("gate") < kinds.index("container")
    with pytest.raises(GateFailed, match="top-token agreement 0.0% < 80%"):
        orchestrator.apply(profile("UD-IQ2_M"))
    assert "run k3-test" not in docker.calls  # never launched
    with pytest.raises(PlanError, match="failed its quant gate on this image"):
        orchestrator.plan(profile("UD-IQ2_M"))


def test_a_vetted_quant_shows_its_catalog_results_instead_of_a_gate() -> None:
    from support.observed import observed

    from kimik3_reconciler.model.profile_source import parse_profile
    from kimik3_reconciler.planning import render_desired
    from kimik3_reconciler.planning.quant_gate import plan_gate

    profile = parse_profile("""
apiVersion: kimik3/v1
name: kimi-k3
model: {repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: UD-IQ2_XXS}
serve: {ubatch: 2048}
gate: {quant: {reference_quant: UD-Q2_K_XL}}
""").profile
    facts = observed(profile)
    (step,) = plan_gate(render_desired(profile, facts), facts)
    assert step.reason == "vetted in the catalog: KLD 0.37 / top-token agreement 84.6% vs UD-Q2_K_XL (seed 000)"


def test_on_gpus_the_serving_container_stops_before_the_gate_and_a_failure_starts_it_again(tmp_path, monkeypatch):
    import json as _json

    from kimik3_reconciler.errors import GateFailed

    orchestrator, docker = fake_world(tmp_path, ("UD-Q2_K_XL", "UD-IQ2_M"))
    orchestrator.ports.host.nvml_dump = _json.loads((FIXTURES.parent / "h200" / "nvml.json").read_text())
    monkeypatch.setattr(docker, "info", lambda: {"Runtimes": {"nvidia": {}}})

    def profile(quant: str):
        return gated(quant, 'cuda_architectures: ["90"]', "[0]")

    orchestrator.apply_or_revert(profile("UD-Q2_K_XL"))  # serving, recorded as the last good profile
    plan = orchestrator.plan(profile("UD-IQ2_M"))
    kinds = [s.kind for s in plan.changes]
    assert kinds.index("stop") < kinds.index("gate") < kinds.index("container")
    assert (
        "downtime from now until the new container is healthy" in next(s for s in plan.changes if s.kind == "stop").cost
    )
    docker.perplexity_outputs["UD-IQ2_M"] = (FIXTURES / "kld-other-weights.out").read_text()
    with pytest.raises(GateFailed, match="reverted to the last good profile"):
        orchestrator.apply_or_revert(profile("UD-IQ2_M"))
    assert docker.calls.index("stop k3-test") < docker.calls.index("oneshot kimik3-gate-candidate")
    assert docker.containers["k3-test"]["State"]["Status"] == "running"  # started again by the revert


def test_llama_perplexity_gets_the_servers_owned_flags_from_the_same_function(tmp_path) -> None:
    """Seed 000: --numa distribute, f16 K/V, threads = physical cores and --load-mode none are requirements
    of any process loading the real quant; without them the gate's load is the 20-minute stall."""
    from kimik3_reconciler.engines.llamacpp.launch import owned_flags, placement_flags
    from kimik3_reconciler.errors import GateFailed

    orchestrator, docker = fake_world(tmp_path, ("UD-Q2_K_XL", "UD-IQ2_M"))
    orchestrator.ports.host.cores = 12
    docker.perplexity_outputs["UD-IQ2_M"] = (FIXTURES / "kld-other-weights.out").read_text()
    profile = gated("UD-IQ2_M", "variant: cpu, cpu_features: []", "none", "n_cpu_moe: 3, fit_target: 2048")
    with pytest.raises(GateFailed):
        orchestrator.apply(profile)
    reference, candidate = docker.one_shots
    owned = (
        "--numa",
        "distribute",
        "--cache-type-k",
        "f16",
        "--cache-type-v",
        "f16",
        "--load-mode",
        "none",
        "--threads",
        "12",
        "--threads-batch",
        "12",
    )
    assert owned_flags(12) == owned
    assert reference.entrypoint == candidate.entrypoint == ("/app/llama-perplexity",)
    # The reference is another quant: --fit with the profile's margins; the candidate: the served split.
    assert reference.command == (
        "-m",
        reference.command[1],
        "-f",
        "/text/gate_text.txt",
        "--chunks",
        "8",
        "--kl-divergence-base",
        reference.command[7],
        "-c",
        "512",
        *owned,
        "--fit",
        "on",
        "--fit-target",
        "2048",
    )
    assert candidate.command == (
        "-m",
        candidate.command[1],
        "--kl-divergence-base",
        candidate.command[3],
        "--kl-divergence",
        "-c",
        "512",
        *owned,
        "--fit",
        "off",
        "-ngl",
        "999",
        "--n-cpu-moe",
        "3",
    )
    assert placement_flags(profile.profile.serve) == candidate.command[-6:]


def test_the_server_and_the_gate_render_the_owned_flags_alike() -> None:
    """Both come from the engine's owned_flags (engines/llamacpp/launch.py): the server's argv holds the very same
    stretch."""
    from support.observed import observed

    from kimik3_reconciler.engines.llamacpp.launch import owned_flags
    from kimik3_reconciler.model.facts import HostFacts
    from kimik3_reconciler.planning import render_desired
    from kimik3_reconciler.planning.quant_gate import gate_flags

    profile = gated("UD-IQ2_M", 'cuda_architectures: ["90"]', "[0]").profile
    facts = observed(profile, host=HostFacts(physical_cores=48))
    argv = render_desired(profile, facts).launch.spec.command
    owned = owned_flags(48)
    start = argv.index("--numa")
    assert argv[start : start + len(owned)] == owned
    desired = render_desired(profile, facts)
    launch = desired.launch.input
    assert gate_flags(desired.engine, launch.serve, launch.threads, candidate=True) == (
        *owned,
        *argv[argv.index("--fit") :][:4],
    )
