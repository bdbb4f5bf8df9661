"""Quant gate executor: the engine's scorer (llama.cpp: llama-perplexity) from the profile's own image, reference
logits once, then the candidate's KLD and top-token agreement against them; the verdict (planning/quant_gate.py) is
recorded per image."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import QuantScorer
from kimik3_reconciler.errors import GateFailed
from kimik3_reconciler.model.profile import QuantGate
from kimik3_reconciler.model.specs import ContainerSpec, Mount, QuantGateRun
from kimik3_reconciler.planning.quant_gate import CHUNKS, CTX, RUN_TIMEOUT_S, TEXT, gate_verdict
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def _scorer(run: QuantGateRun) -> QuantScorer:
    scorer = engine_for(run.engine).quant_scorer  # the registry: the engine whose quant is gated
    assert scorer is not None, f"engine {run.engine} scores no quants"
    return scorer


def _score(
    run: QuantGateRun, ports: Ports, name: str, argv: tuple[str, ...], mounts: tuple[Mount, ...]
) -> tuple[int, str, str]:
    spec = ContainerSpec(
        name=name,
        image=run.image,
        entrypoint=_scorer(run).entrypoint,
        command=argv,
        env=(),
        mounts=mounts,
        gpu_request=run.gpu_request,
        gpus=run.gpus,
        labels=(("kimik3.role", "gate"),),
        restart_policy="no",
    )
    return ports.docker.run_to_completion(spec, RUN_TIMEOUT_S)


def _tail(text: str) -> str:
    return "\n".join(text.splitlines()[-20:])


def _gate_text(ports: Ports) -> Path:
    """The fixed text shipped with the package (TEXT_VERSION names it in the logits' key), as a file to mount."""
    key = f"gate-text/{TEXT}"
    return ports.state.artifact(key) or ports.state.produce(
        key, lambda staging: staging.write_text((resources.files("kimik3_reconciler") / TEXT).read_text())
    )


def _reference_logits(run: QuantGateRun, ports: Ports, reporter: Reporter, models: tuple[Mount, ...]) -> Path:
    """The reference quant's logits, computed once; renamed into place only when the scorer wrote them."""
    kept = ports.state.artifact(run.logits_key)
    if kept is not None:
        return kept

    def compute(staging: Path) -> None:
        reporter.event("gate-reference-logits", file=Path(run.logits_key).name)
        code, _, err = _score(
            run,
            ports,
            "kimik3-gate-reference",
            _scorer(run).argv(
                f"/ref/snapshots/{run.reference_model}",
                f"/gate/{staging.name}",
                run.reference_flags,
                CTX,
                CHUNKS,
                f"/text/{TEXT}",
            ),
            (*models, Mount(str(staging.parent), "/gate", read_only=False)),
        )
        if code != 0 or not staging.is_file() or staging.stat().st_size == 0:
            program = _scorer(run).program
            raise GateFailed(f"the reference logits could not be computed ({program} exit {code})", _tail(err))

    return ports.state.produce(run.logits_key, compute)


def run_quant_gate(run: QuantGateRun, ports: Ports, reporter: Reporter) -> None:
    text = _gate_text(ports)
    models = (
        Mount(run.reference_repo_dir, "/ref"),
        Mount(run.candidate_repo_dir, "/cand"),
        Mount(str(text.parent), "/text"),
    )
    logits = _reference_logits(run, ports, reporter, models)
    scorer = _scorer(run)
    code, out, err = _score(
        run,
        ports,
        "kimik3-gate-candidate",
        scorer.argv(f"/cand/snapshots/{run.candidate_model}", f"/gate/{logits.name}", run.candidate_flags, CTX, CHUNKS),
        (*models, Mount(str(logits.parent), "/gate", read_only=False)),
    )
    report = scorer.report(out)
    passed, why = gate_verdict(
        report, QuantGate(max_kld=run.max_kld, min_top_token_agreement=run.min_top_token_agreement), scorer.program
    )
    records = ports.state.read(run.record_key) or {}
    records[run.image_fingerprint] = {
        "passed": passed,
        "why": why,
        "image": run.image,
        "exit_code": code,
        "report": report._asdict() if report else None,
        "date": ports.clock.now().isoformat(timespec="seconds"),
    }
    ports.state.write(run.record_key, records)
    if not passed:
        raise GateFailed(f"quant gate failed: {why}; the quant is never served", _tail(err))
    reporter.event("gate-passed", why=why)
