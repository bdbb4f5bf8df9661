"""Quant gate: llama-perplexity from the profile's own image, reference logits once, then the
candidate's KLD and top-token agreement against them; the result is recorded per image."""

from __future__ import annotations

import datetime
import os
from importlib import resources

from kimik3_reconciler.errors import GateFailed
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.profile import QuantGate
from kimik3_reconciler.model.specs import ContainerSpec, Mount
from kimik3_reconciler.observe.perplexity import parse_kld_report
from kimik3_reconciler.planning.gate_step import CHUNKS, CTX, GateRun
from kimik3_reconciler.planning.quant_gate import gate_verdict
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter

RUN_TIMEOUT_S = 3 * 3600.0  # two passes over 8 x 512 tokens of an 800 GB model; tiny ones take a second
TEXT = "gate_text.txt"


def _perplexity(run: GateRun, ports: Ports, name: str, args: tuple[str, ...], mounts: tuple[Mount, ...]):
    spec = ContainerSpec(name=name, image=run.image, entrypoint=("/app/llama-perplexity",),
                         command=(*args, "-c", str(CTX), "-t", str(run.threads)), env=(), mounts=mounts,
                         gpus=run.gpus, labels=(("kimik3.role", "gate"),), restart_policy="no")
    return ports.docker.run_to_completion(spec, RUN_TIMEOUT_S)


def run_quant_gate(step: Step, ports: Ports, reporter: Reporter) -> None:
    run: GateRun = step.spec
    logits = ports.state.path(run.logits_key)
    text = ports.state.path(f"gate-text/{TEXT}")
    if not text.is_file():  # the fixed text shipped with the package (TEXT_VERSION names it in the logits' key)
        text.write_text((resources.files("kimik3_reconciler") / TEXT).read_text())
    mounts = (Mount(run.reference_repo_dir, "/ref"), Mount(run.candidate_repo_dir, "/cand"),
              Mount(str(text.parent), "/text"), Mount(str(logits.parent), "/gate", read_only=False))
    if not logits.is_file():
        reporter.event("gate-reference-logits", file=logits.name)
        partial = f"{logits.name}.partial"
        code, _, err = _perplexity(run, ports, "kimik3-gate-reference", (
            "-m", f"/ref/snapshots/{run.reference_model}", "-f", f"/text/{TEXT}", "--chunks", str(CHUNKS),
            "--kl-divergence-base", f"/gate/{partial}"), mounts)
        produced = logits.with_name(partial)
        if code != 0 or not produced.is_file() or produced.stat().st_size == 0:
            raise GateFailed("the reference logits could not be computed (llama-perplexity exit "
                             f"{code})", "\n".join(err.splitlines()[-20:]))
        os.replace(produced, logits)
    code, out, err = _perplexity(run, ports, "kimik3-gate-candidate", (
        "-m", f"/cand/snapshots/{run.candidate_model}", "--kl-divergence-base", f"/gate/{logits.name}",
        "--kl-divergence"), mounts)
    report = parse_kld_report(out)
    passed, why = gate_verdict(report, QuantGate(max_kld=run.max_kld,
                                                 min_top_token_agreement=run.min_top_token_agreement))
    records = ports.state.read(run.record_key) or {}
    records[run.image_fingerprint] = {
        "passed": passed, "why": why, "image": run.image, "exit_code": code,
        "report": report.model_dump() if report else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    ports.state.write(run.record_key, records)
    if not passed:
        raise GateFailed(f"quant gate failed: {why}; the quant is never served", "\n".join(err.splitlines()[-20:]))
    reporter.event("gate-passed", why=why)
