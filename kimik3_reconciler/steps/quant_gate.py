"""Quant gate executor: llama-perplexity from the profile's own image, reference logits once, then the
candidate's KLD and top-token agreement against them; the verdict (planning/quant_gate.py) is recorded
per image."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from kimik3_reconciler.errors import GateFailed
from kimik3_reconciler.model.profile import QuantGate
from kimik3_reconciler.model.specs import ContainerSpec, Mount, QuantGateRun
from kimik3_reconciler.planning.quant_gate import RUN_TIMEOUT_S, TEXT, gate_verdict, parse_kld_report, perplexity_argv
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def _perplexity(
    run: QuantGateRun, ports: Ports, name: str, argv: tuple[str, ...], mounts: tuple[Mount, ...]
) -> tuple[int, str, str]:
    spec = ContainerSpec(
        name=name,
        image=run.image,
        entrypoint=("/app/llama-perplexity",),
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
    """The reference quant's logits, computed once; renamed into place only when llama-perplexity wrote them."""
    kept = ports.state.artifact(run.logits_key)
    if kept is not None:
        return kept

    def compute(staging: Path) -> None:
        reporter.event("gate-reference-logits", file=Path(run.logits_key).name)
        code, _, err = _perplexity(
            run,
            ports,
            "kimik3-gate-reference",
            perplexity_argv(
                f"/ref/snapshots/{run.reference_model}", f"/gate/{staging.name}", run.reference_flags, f"/text/{TEXT}"
            ),
            (*models, Mount(str(staging.parent), "/gate", read_only=False)),
        )
        if code != 0 or not staging.is_file() or staging.stat().st_size == 0:
            raise GateFailed(f"the reference logits could not be computed (llama-perplexity exit {code})", _tail(err))

    return ports.state.produce(run.logits_key, compute)


def run_quant_gate(run: QuantGateRun, ports: Ports, reporter: Reporter) -> None:
    text = _gate_text(ports)
    models = (
        Mount(run.reference_repo_dir, "/ref"),
        Mount(run.candidate_repo_dir, "/cand"),
        Mount(str(text.parent), "/text"),
    )
    logits = _reference_logits(run, ports, reporter, models)
    code, out, err = _perplexity(
        run,
        ports,
        "kimik3-gate-candidate",
        perplexity_argv(f"/cand/snapshots/{run.candidate_model}", f"/gate/{logits.name}", run.candidate_flags),
        (*models, Mount(str(logits.parent), "/gate", read_only=False)),
    )
    report = parse_kld_report(out)
    passed, why = gate_verdict(
        report, QuantGate(max_kld=run.max_kld, min_top_token_agreement=run.min_top_token_agreement)
    )
    records = ports.state.read(run.record_key) or {}
    records[run.image_fingerprint] = {
        "passed": passed,
        "why": why,
        "image": run.image,
        "exit_code": code,
        "report": vars(report) if report else None,
        "date": ports.clock.now().isoformat(timespec="seconds"),
    }
    ports.state.write(run.record_key, records)
    if not passed:
        raise GateFailed(f"quant gate failed: {why}; the quant is never served", _tail(err))
    reporter.event("gate-passed", why=why)
