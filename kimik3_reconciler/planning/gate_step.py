"""Plan the quant gate (seed 000 "Quant gate"): a quant that is not vetted is not served until its
logits are checked against the reference quant's (llama-perplexity --kl-divergence).

UD-TQ2_0 loads and talks on these GPUs yet produces corrupted logits: "it answers" proves
nothing. The gate runs once per (quant, revision, image); a pass is recorded and not re-run; a
recorded failure refuses the plan, saying why. Reference logits are computed once and cached.
"""

from __future__ import annotations

from dataclasses import dataclass

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.gate_rules import gate_applies
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.records import gate_key
from kimik3_reconciler.model.specs import ImageBuild, Removal
from kimik3_reconciler.planning.launch import first_shard, gpus_of
from kimik3_reconciler.planning.units import gib

CTX = 512
CHUNKS = 8  # 8 x 512 tokens of the shipped text: a few minutes on a real quant
TEXT_VERSION = "t1"  # names kimik3_reconciler/gate_text.txt in the cached logits' key: bump it when the text changes


@dataclass(frozen=True)
class GateRun:
    """What the executor needs: the image, both models' first shards, and where to record."""

    image: str
    image_fingerprint: str
    reference_repo_dir: str
    reference_model: str  # path inside the repo snapshot
    candidate_repo_dir: str
    candidate_model: str
    revision: str
    gpus: str | tuple[str, ...]
    threads: int
    max_kld: float
    min_top_token_agreement: float
    record_key: str
    logits_key: str


def _repo_dir(cache_dir: str, repo: str) -> str:
    return f"{cache_dir}/models--{repo.replace('/', '--')}"


def plan_gate(profile: Profile, observed: Observed, image: ImageBuild) -> Step | None:
    if profile.gate.quant is None:
        return None
    target = f"{profile.model.quant} vs {profile.gate.quant.reference_quant}"
    if not gate_applies(profile):
        info = catalog.lookup(profile.model.quant)
        if info is not None and info.kld is not None:
            why = (f"vetted in the catalog: KLD {info.kld} / top-token agreement {info.top_token_agreement:.1%} "
                   f"vs {profile.gate.quant.reference_quant} (seed 000)")
        else:
            why = "the reference quant itself, or vetted in the catalog: no gate needed"
        return Step("gate", target, Action.NOOP, why)
    record = observed.gate_records.get(image.fingerprint)
    if record is not None and record.get("passed"):
        return Step("gate", target, Action.NOOP, f"passed on {record.get('date')}: {record.get('why')}")
    if record is not None:
        raise PlanError(f"model.quant {profile.model.quant} failed its quant gate on this image ({record.get('why')}); "
                        "it is never served: pick a vetted quant, or change the image (a new build is gated again)")
    reference, model = observed.reference, observed.model
    gate = profile.gate.quant
    n_vocab = observed.layout.n_vocab if observed.layout else 0
    logits = CHUNKS * (CTX // 2) * n_vocab * 2  # uint16 log-probs of the scored half of each chunk
    run = GateRun(
        image=image.tag, image_fingerprint=image.fingerprint,
        reference_repo_dir=_repo_dir(reference.cache_dir, reference.repo),
        reference_model=f"{reference.revision}/{first_shard(reference)}",
        candidate_repo_dir=_repo_dir(model.cache_dir, model.repo),
        candidate_model=f"{model.revision}/{first_shard(model)}",
        revision=model.revision, gpus=gpus_of(profile), threads=observed.host.physical_cores,
        max_kld=gate.max_kld, min_top_token_agreement=gate.min_top_token_agreement,
        record_key=gate_key(model.repo, model.revision, model.quant),
        logits_key=f"gate-logits/{reference.repo.replace('/', '--')}/{reference.revision}/"
                   f"{reference.quant}-{TEXT_VERSION}-c{CTX}x{CHUNKS}.kld",
    )
    return Step("gate", target, Action.READ,
                f"{profile.model.quant} is not vetted: check its logits against {gate.reference_quant} "
                f"(KLD <= {gate.max_kld}, top-token agreement >= {gate.min_top_token_agreement:.0%}) before serving",
                spec=run, cost=f"reference logits ~{gib(logits)} (computed once, cached); two llama-perplexity runs")


def plan_stop_for_gate(profile: Profile, observed: Observed, gate: Step | None, load_seconds: float) -> Step | None:
    """GPUs are shared: the serving container stops before the gate runs on them (the plan says so,
    with the downtime); a failed gate relaunches the last good profile, i.e. starts it again."""
    container = observed.container
    if gate is None or not gate.changes or container is None or gpus_of(profile) == "none":
        return None
    if container.state not in ("running", "restarting"):
        return None
    return Step("stop", container.name, Action.UPDATE,
                "the quant gate runs on the GPUs this container holds: stop it first (a failed gate starts it again)",
                spec=Removal("stop", container.name),
                cost=f"downtime from now until the new container is healthy: the gate's two llama-perplexity runs "
                     f"+ a load of ~{load_seconds / 60:.0f} min")
