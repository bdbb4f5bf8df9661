"""The quant gate with the real image (llama-perplexity) and tiny kimi-k3 models: a candidate with
the reference's weights re-typed to F16 passes, one with other weights fails and is never launched."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import fresh_work
from support.realparts import demo_profile, docker, kimik3, require_docker_and_demo_hub, write_profile

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_demo.prepare import DEMO_REPO, DEMO_REVISION, demo_repos
from kimik3_reconciler.engines.llamacpp.gguf_header import parse_gguf_header
from kimik3_reconciler.engines.llamacpp.smoke_model import write_tiny_kimi_k3

pytestmark = pytest.mark.docker
NAME, PORT = "kimi-k3-gtest", 18686


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureHub]:
    files = demo_repos(require_docker_and_demo_hub())[0].files
    q4 = {p: f for p, f in files.items() if p.startswith("UD-Q4_K_XL/")}
    # The reference's weights (UD-Q2_K_XL is seed 0), re-typed: matrices F16, as a real requant would.
    retyped = write_tiny_kimi_k3(tmp_path_factory.mktemp("f16"), "Kimi-K3-tiny-UD-IQ2_M", shards=2, seed=0, f16=True)
    assert any(t.ggml_type == 1 for t in parse_gguf_header(retyped[0].read_bytes()[: 1 << 20]).tensors)  # F16 inside
    extra = {f"UD-IQ2_M/{p.name}": p for p in retyped}
    extra.update({p.replace("UD-Q4_K_XL", "UD-IQ1_S"): f for p, f in q4.items()})  # other weights
    with FixtureHub([FixtureRepo(DEMO_REPO, DEMO_REVISION, {**files, **extra})]) as running:
        yield running


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = fresh_work(tmp_path_factory, "kimik3-gate", NAME)
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["model"]["quant"] = "UD-IQ2_M"
    profile["gate"] = {"smoke": False, "quant": {"reference_quant": "UD-Q2_K_XL"}}
    write_profile(work, profile)
    profile["model"]["quant"] = "UD-IQ1_S"
    write_profile(work, profile, "other.yaml")
    yield work
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


@pytest.fixture(scope="module")
def first_apply(workdir: Path) -> dict:
    """The first apply of the candidate (its report): both tests need it, whichever runs first."""
    return json.loads(kimik3(workdir, "apply", "--json", "--no-verify-server", "profile.yaml").stdout)


def test_a_candidate_with_the_reference_weights_passes_once(workdir: Path, first_apply: dict) -> None:
    applied = first_apply
    kinds = [(s["kind"], s["action"]) for s in applied["executed"]]
    assert ("reference", "create") in kinds and ("gate", "read") in kinds
    assert kinds.index(("gate", "read")) < kinds.index(("container", "create"))
    records = json.loads(next((workdir / "state" / "gate").rglob("UD-IQ2_M.json")).read_text())
    (record,) = records.values()
    assert record["passed"] is True and record["report"]["mean_kld"] <= 0.001 and record["report"]["same_top_p"] >= 0.99
    plan = json.loads(kimik3(workdir, "plan", "--json", "profile.yaml").stdout)
    gate = next(s for s in plan["steps"] if s["kind"] == "gate")
    assert gate["action"] == "noop" and gate["reason"].startswith("passed on")  # not re-run


def test_a_candidate_with_other_weights_fails_and_is_never_launched(workdir: Path, first_apply: dict) -> None:
    kimik3(workdir, "apply", "--no-verify-server", "profile.yaml")  # serving, whatever ran before (a no-op if it is)
    before = docker("inspect", "-f", "{{.Id}}", NAME)
    result = kimik3(workdir, "apply", "--no-verify-server", "other.yaml", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "quant gate failed: top-token agreement 0.0% < 80%" in result.stderr
    assert "reverted to the last good profile" in result.stderr
    assert docker("inspect", "-f", "{{.Id}}", NAME) == before  # the serving container was never touched
    again = kimik3(workdir, "plan", "other.yaml", check=False)
    assert again.returncode == 3 and "failed its quant gate on this image" in again.stderr
