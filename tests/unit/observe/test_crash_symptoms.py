"""Seed 000 "When startup crashes": the two symptoms with known causes are named with their fix.

`CUDA error: out of memory` on the first request after an all-VRAM load → raise serve.fit_target and
use ubatch 2048 (the failed launch's message here; verify's crash report: test_verify.py). A quant that
loads and talks but scores KLD >> 1 in the gate → a broken kernel for that type, never served.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from test_quant_gate import FIXTURES as PERPLEXITY
from test_quant_gate import GATE, fake_world, gated

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import KldReport
from kimik3_reconciler.engines.llamacpp.perplexity import parse_kld_report
from kimik3_reconciler.errors import GateFailed, LoadFailed, PlanError
from kimik3_reconciler.observe.server_log import classify_load_failure
from kimik3_reconciler.planning.quant_gate import gate_verdict

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "server-logs"
CUDA_OOM = (LOGS / "cuda-oom-first-request.log").read_text()
# the same crash during the load: the startup lines only, then ggml's error lines
CUDA_OOM_LOADING = "\n".join(
    line for line in CUDA_OOM.splitlines() if "llama_server:" not in line and "slot" not in line
)


def test_a_cuda_oom_after_the_load_names_the_fit_target_and_ubatch_fix() -> None:
    assert "0.00.930.757 I srv  llama_server: model loaded" in CUDA_OOM  # recorded start, then the crash
    cause = classify_load_failure(134, False, CUDA_OOM, engine_for("llamacpp").log_signs)
    assert cause.cause == "cuda-oom"
    assert cause.headline.startswith("crashed with CUDA error: out of memory on a request after a successful load")
    assert "raise serve.fit_target" in cause.headline and "use serve.ubatch 2048" in cause.headline


def test_a_cuda_oom_while_loading_is_the_same_cause_and_fix() -> None:
    cause = classify_load_failure(134, False, CUDA_OOM_LOADING, engine_for("llamacpp").log_signs)
    assert cause.cause == "cuda-oom" and "out of memory while loading" in cause.headline
    assert "raise serve.fit_target" in cause.headline
    # verify knows the server had loaded even when the tail no longer shows it
    tail = "\n".join(CUDA_OOM.splitlines()[-5:])
    assert (
        "on a request after a successful load"
        in classify_load_failure(134, False, tail, engine_for("llamacpp").log_signs, while_serving=True).headline
    )


def test_a_host_allocation_failure_is_not_the_cuda_scratch_pool() -> None:
    log = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000 MiB: cudaMalloc failed: out of memory\n"
    assert classify_load_failure(1, False, log, engine_for("llamacpp").log_signs).cause == "oom"


def test_a_launch_that_dies_of_a_cuda_oom_fails_apply_with_the_fix(tmp_path: Path) -> None:
    orchestrator, docker = fake_world(tmp_path, ("UD-Q2_K_XL",))
    docker.crash_on_start, docker.logs = True, CUDA_OOM
    with pytest.raises(LoadFailed) as failed:
        orchestrator.apply(gated("UD-Q2_K_XL", "variant: cpu, cpu_features: []", "none"))
    assert "crashed with CUDA error: out of memory" in str(failed.value)
    assert "raise serve.fit_target" in str(failed.value) and "[cuda-oom: exited" in str(failed.value)
    assert "CUDA error: out of memory" in failed.value.log_tail


def broken_kernel_output() -> str:
    """llama-perplexity's recorded report (real format) with a broken kernel's numbers in its summary."""
    out = (PERPLEXITY / "kld-same-weights.out").read_text()
    out = re.sub(r"^Mean    KLD:.*$", "Mean    KLD:   3.214871 ±   0.041532", out, flags=re.MULTILINE)
    return re.sub(r"^Same top p:.*$", "Same top p: 12.157 ± 1.101 %", out, flags=re.MULTILINE)


def test_kld_far_above_one_is_a_broken_kernel_not_a_lossy_quant() -> None:
    report = parse_kld_report(broken_kernel_output())
    assert report is not None and report.mean_kld == pytest.approx(3.214871)
    passed, why = gate_verdict(report, GATE)
    assert not passed and why.startswith(
        "KLD 3.215 >> 1: broken kernel for that quant type on this GPU, don't serve it"
    )
    lossy = gate_verdict(KldReport(mean_kld=0.8, same_top_p=0.9), GATE)[1]
    assert lossy == "KLD 0.800 > max_kld 0.5" and "broken kernel" not in lossy


def test_a_broken_kernel_fails_the_gate_and_the_next_plan_refuses_it(tmp_path: Path) -> None:
    orchestrator, docker = fake_world(tmp_path, ("UD-Q2_K_XL", "UD-IQ2_M"))
    profile = gated("UD-IQ2_M", "variant: cpu, cpu_features: []", "none")
    docker.perplexity_outputs["UD-IQ2_M"] = broken_kernel_output()
    with pytest.raises(GateFailed, match="broken kernel for that quant type on this GPU, don't serve it"):
        orchestrator.apply(profile)
    assert "run k3-test" not in docker.calls  # never launched
    with pytest.raises(PlanError, match="failed its quant gate on this image .*broken kernel for that quant type"):
        orchestrator.plan(profile)


def test_an_exited_container_carries_the_cause_its_log_names(tmp_path: Path) -> None:
    from kimik3_reconciler.observe.docker_objects import collect_container

    orchestrator, docker = fake_world(tmp_path, ("UD-Q2_K_XL",))
    orchestrator.apply(gated("UD-Q2_K_XL", "variant: cpu, cpu_features: []", "none"))
    docker.containers["k3-test"]["State"].update(Status="exited", ExitCode=134)
    docker.logs = CUDA_OOM
    fact = collect_container(docker, orchestrator.ports.http, "k3-test", engine_for("llamacpp").log_signs)
    assert fact is not None and fact.crash is not None
    assert fact.crash.startswith("crashed with CUDA error: out of memory") and fact.crash.endswith("[cuda-oom]")
    step = next(
        s
        for s in orchestrator.plan(gated("UD-Q2_K_XL", "variant: cpu, cpu_features: []", "none")).steps
        if s.kind == "container"
    )
    assert "raise serve.fit_target" in step.reason and step.reason.endswith(": start it")
    docker.containers["k3-test"]["State"].update(ExitCode=0)  # a clean stop: its log is not read
    assert collect_container(docker, orchestrator.ports.http, "k3-test", engine_for("llamacpp").log_signs).crash is None


@pytest.mark.parametrize("printed", ["nan", "-nan", "inf", "-inf", "NaN"])
def test_a_nan_or_infinite_mean_kld_is_a_broken_kernel(printed: str) -> None:
    """Review of issue 14: glibc prints a NaN as nan/-nan; the report was dropped as 'bailed out' before.
    Non-numbers from the kernel are the broken-kernel verdict, not a missing report."""
    out = (PERPLEXITY / "kld-same-weights.out").read_text()
    out = re.sub(r"^Mean    KLD:.*$", f"Mean    KLD:   {printed} ±   {printed}", out, flags=re.MULTILINE)
    report = parse_kld_report(out)
    assert report is not None and not math.isfinite(report.mean_kld)
    passed, why = gate_verdict(report, GATE)
    assert not passed and why.startswith(
        f"KLD {report.mean_kld:.3f} >> 1: broken kernel for that quant type on this GPU, don't serve it"
    )


def test_a_request_in_the_tail_says_after_the_load_even_when_model_loaded_scrolled_out() -> None:
    """Review of issue 14: "on a request after a successful load" needed `model loaded` in the 200-line tail; a
    long-running server's tail has scrolled past it. The crashing request's own slot lines are in the tail."""
    tail = "\n".join(line for line in CUDA_OOM.splitlines() if "llama_server:" not in line)
    assert "model loaded" not in tail and "launch_slot_" in tail
    assert classify_load_failure(134, False, tail, engine_for("llamacpp").log_signs).headline.startswith(
        "crashed with CUDA error: out of memory on a request after a successful load"
    )
