"""The quant gate (seed 000 "Quant gate"), all of it but its executor (steps/quant_gate.py): when it
applies, the reference quant it compares against, its plan steps and the verdict on the engine's scorer's report
(llama.cpp: llama-perplexity, engines/llamacpp/perplexity.py).

UD-TQ2_0 loads and talks on these GPUs yet produces corrupted logits: "it answers" proves
nothing. A quant that is neither vetted in the catalog nor the reference is not served until its
logits are checked against the reference quant's (llama-perplexity --kl-divergence). The gate runs
once per (quant, revision, image); a pass is recorded and not re-run; a recorded failure refuses
the plan, saying why. Reference logits are computed once and cached.
"""

from __future__ import annotations

import math
from dataclasses import replace

from kimik3_reconciler.engines import ServingEngine
from kimik3_reconciler.engines.base import KldReport
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.model_files import manifest_key
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile, QuantGate, ServeSpec
from kimik3_reconciler.model.records import gate_key
from kimik3_reconciler.model.specs import QuantGateRun, StopContainer
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.health_step import predicted_load_s
from kimik3_reconciler.planning.launch import gpu_request, gpus_of, repo_dir
from kimik3_reconciler.planning.model_step import download_spec, model_step, weights_format

CTX = 512
CHUNKS = 8  # 8 x 512 tokens of the shipped text: a few minutes on a real quant
TEXT = "gate_text.txt"  # shipped in the package
TEXT_VERSION = "t1"  # names TEXT in the cached logits' key: bump it when the text changes
RUN_TIMEOUT_S = 3 * 3600.0  # two passes over 8 x 512 tokens of an 800 GB model; tiny ones take a second
# Seed 000 "When startup crashes": a quant that loads and talks but scores KLD >> 1 has a broken kernel for
# its type on this GPU. The vetted quants score 0.047-0.37; past 1 nat no quantization explains the damage.
BROKEN_KERNEL_KLD = 1.0


# --- when it applies ---------------------------------------------------------------------------


def gate_applies(profile: Profile) -> bool:
    """gate.quant is configured and the quant is neither vetted in the catalog nor the reference."""
    gate = profile.gate.quant
    if gate is None or profile.model.quant == gate.reference_quant:
        return False
    info = catalog.lookup(profile.model.quant)
    return not (info is not None and info.vetted)


def reference_profile(profile: Profile) -> Profile:
    """The same profile with the reference quant (and no mmproj): its files, manifest and layout."""
    assert profile.gate.quant is not None
    model = profile.model.model_copy(update={"quant": profile.gate.quant.reference_quant, "mmproj": None})
    return profile.model_copy(update={"model": model})


def gate_reference(profile: Profile) -> Profile | None:
    """What observation must also look at: the reference quant's profile when the gate applies."""
    return reference_profile(profile) if gate_applies(profile) else None


def _program(desired: Desired) -> str:
    """The engine's scorer, as the plan names it (the gate applies only to an engine that serves quants)."""
    scorer = desired.engine.quant_scorer
    assert scorer is not None, f"engine {desired.engine.name} scores no quants"
    return scorer.program


def _record(desired: Desired, observed: Observed) -> dict | None:
    return observed.gate_records.get(desired.build.fingerprint)


def gate_pending(desired: Desired, observed: Observed) -> bool:
    """The gate applies and has not passed on this image yet."""
    if not gate_applies(desired.profile):  # first: a pulled image (no build) has no gate records
        return False
    record = _record(desired, observed)
    return not (record is not None and record.get("passed"))


# --- the verdict on the scorer's report ----------------------------------------------------------


def gate_verdict(report: KldReport | None, gate: QuantGate, program: str = "the scorer") -> tuple[bool, str]:
    """(passed, why). A missing report is a failure: the scorer (`program`) exits 0 when it bails out."""
    if report is None:
        return False, f"{program} printed no 'Mean    KLD:' / 'Same top p:' lines (it bailed out)"
    problems = []
    # rule: kld-broken-kernel
    # Not "too lossy": the fix is another quant type or another build, never a looser max_kld.
    # A NaN or infinite mean KLD is the same verdict: the kernel produced non-numbers, not a lossy quant.
    if not math.isfinite(report.mean_kld) or report.mean_kld > BROKEN_KERNEL_KLD:
        problems.append(
            f"KLD {report.mean_kld:.3f} >> 1: broken kernel for that quant type on this GPU, "
            'don\'t serve it (seed 000 "When startup crashes")'
        )
    elif report.mean_kld > gate.max_kld:
        problems.append(f"KLD {report.mean_kld:.3f} > max_kld {gate.max_kld}")
    if not math.isfinite(report.same_top_p) or report.same_top_p < gate.min_top_token_agreement:
        problems.append(f"top-token agreement {report.same_top_p:.1%} < {gate.min_top_token_agreement:.0%}")
    if problems:
        return False, "; ".join(problems)
    return True, f"KLD {report.mean_kld:.3f}, top-token agreement {report.same_top_p:.1%}"


# --- the scorer's flags ---------------------------------------------------------------------------


def gate_flags(engine: ServingEngine, serve: ServeSpec, threads: int, candidate: bool) -> tuple[str, ...]:
    """The flags llama-perplexity gets besides its own: the server's owned ones, from the same functions.
    Seed 000 "Runtime requirements that are NOT tunable": --numa distribute, f16 K/V, threads = physical
    cores and --load-mode none; a real quant loaded without them stalls 20+ minutes (the gate would too)."""
    # rule: gate-fixed-flags
    # The placement is the server's (the launch's resolved serve section: --fit-target margins, or the manual
    # split tuned for the served quant); the reference is another quant: --fit with its own margins.
    return (*engine.owned_flags(threads, serve.load_mode), *engine.placement_flags(serve, manual_split=candidate))


def reference_serve(profile: Profile) -> ServeSpec:
    """The serve section as the reference quant would be served: its own effective --fit-target margins."""
    return profile.serve.model_copy(update={"fit_target": reference_profile(profile).effective_fit_target})


# --- its plan steps ----------------------------------------------------------------------------


def plan_reference(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Download the reference quant (gate.quant.reference_quant of the same repo) while the gate is pending."""
    fact = observed.reference
    if fact is None or not gate_pending(desired, observed):
        return ()
    spec = download_spec(
        fact, desired.profile.model.endpoint, manifest_key(reference_profile(desired.profile), fact.cache_dir)
    )
    step = model_step("reference", fact, spec, weights_format(desired))
    return (replace(step, reason=step.reason + " (the quant gate's reference)"),)


def plan_stop_for_gate(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """GPUs are shared: the serving container stops before the gate runs on them (the plan says so,
    with the downtime); a failed gate relaunches the last good profile, i.e. starts it again."""
    container = observed.container
    if not gate_pending(desired, observed) or container is None or gpus_of(desired.profile) == "none":
        return ()
    if not container.up:
        return ()
    load_s, _ = predicted_load_s(observed)
    return (
        Step(
            "stop",
            container.name,
            Action.UPDATE,
            "the quant gate runs on the GPUs this container holds: stop it first (a failed gate starts it again)",
            spec=StopContainer(container.name),
            cost=f"downtime from now until the new container is healthy: the gate's two {_program(desired)} runs "
            f"+ a load of ~{load_s / 60:.0f} min",
        ),
    )


def plan_gate(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    profile = desired.profile
    gate = profile.gate.quant
    if gate is None:
        return ()
    target = f"{profile.model.quant} vs {gate.reference_quant}"
    if not gate_applies(profile):
        info = catalog.lookup(profile.model.quant)
        if info is not None and info.kld is not None:
            why = (
                f"vetted in the catalog: KLD {info.kld} / top-token agreement {info.top_token_agreement:.1%} "
                f"vs {gate.reference_quant} (seed 000)"
            )
        else:
            why = "the reference quant itself, or vetted in the catalog: no gate needed"
        return (Step("gate", target, Action.NOOP, why),)
    record = _record(desired, observed)
    if record is not None and record.get("passed"):
        return (Step("gate", target, Action.NOOP, f"passed on {record.get('date')}: {record.get('why')}"),)
    if record is not None:
        # rule: unvetted-iq-tq
        # Seed 000 step 2: a quant must pass the gate before it is served; a recorded failure stays refused.
        raise PlanError(
            f"model.quant {profile.model.quant} failed its quant gate on this image ({record.get('why')}); "
            "it is never served: pick a vetted quant, or change the image (a new build is gated again)"
        )
    if observed.model.local_path is not None:
        # rule: local-path-not-gated
        # The gate runs llama-perplexity on quants of the HF cache (its records are per repo@revision/quant): a
        # local file has neither, and an IQ/TQ quant must not be served ungated (seed 000 step 2).
        raise PlanError(
            f"gate.quant: {profile.model.quant} from model.local_path needs the quant gate, which kimik3 "
            "runs only on quants of the hub cache so far: serve a vetted quant locally, or gate it "
            "as a hub quant",
            (("model", "local_path"), ("gate", "quant")),
        )
    reference, model, image, launch = observed.reference, observed.model, desired.build, desired.launch.input
    assert reference is not None  # observed whenever the gate applies (orchestrator: gate_reference)
    n_vocab = observed.layout.n_vocab if observed.layout else 0
    logits = CHUNKS * (CTX // 2) * n_vocab * 2  # uint16 log-probs of the scored half of each chunk
    run = QuantGateRun(
        image=image.tag,
        image_fingerprint=image.fingerprint,
        reference_repo_dir=repo_dir(reference.cache_dir, reference.repo),
        reference_model=f"{reference.revision}/{desired.engine.model_entry(reference)}",
        candidate_repo_dir=repo_dir(model.cache_dir, model.repo),
        candidate_model=f"{model.revision}/{desired.engine.model_entry(model)}",
        revision=model.revision,
        gpus=gpus_of(profile),
        reference_flags=gate_flags(desired.engine, reference_serve(profile), launch.threads, candidate=False),
        candidate_flags=gate_flags(desired.engine, launch.serve, launch.threads, candidate=True),
        gpu_request=gpu_request(observed, gpus_of(profile)),
        max_kld=gate.max_kld,
        min_top_token_agreement=gate.min_top_token_agreement,
        record_key=gate_key(model.repo, model.revision, model.quant),
        logits_key=f"gate-logits/{reference.repo.replace('/', '--')}/{reference.revision}/"
        f"{reference.quant}-{TEXT_VERSION}-c{CTX}x{CHUNKS}.kld",
        engine=desired.engine.name,
    )
    return (
        Step(
            "gate",
            target,
            Action.READ,
            f"{profile.model.quant} is not vetted: check its logits against {gate.reference_quant} "
            f"(KLD <= {gate.max_kld}, top-token agreement >= {gate.min_top_token_agreement:.0%}) before serving",
            spec=run,
            cost=f"reference logits ~{gib(logits)} (computed once, cached); two {_program(desired)} runs, "
            "each a full load of its quant (--load-mode none, like the server)",
        ),
    )
