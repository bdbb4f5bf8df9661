"""Plan the model: are all files of repo@revision/quant verified in the HF cache, and do the
missing ones fit on the cache's disk (the sizing gate, before any byte is fetched)?"""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.model.facts import ModelFact, Observed
from kimik3_reconciler.model.model_files import CHECKPOINT, checkpoint_manifest_key, manifest_key, tokenizer_manifest_key
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.records import layout_key
from kimik3_reconciler.model.specs import ModelDownload
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.humanize import gib

# Seed 001: plan download size + 10-15 %; the disk also holds logs, images and the next quant.
DISK_HEADROOM = 0.10


def _source(path: str, quant: str) -> str:
    """What a file is counted under: its folder (a quant), else for a checkpoint its weights or the rest (a repo of
    ~60 shards is one line), else the file itself (mmproj)."""
    if "/" in path:
        return path.split("/")[0] + "/"
    if quant == CHECKPOINT:
        return "*.safetensors" if path.endswith(".safetensors") else "config, tokenizer and code"
    return path


def _breakdown(model: ModelFact) -> str:
    """Bytes to fetch per source: the quant folder, and each top-level file (mmproj); a checkpoint's weights."""
    missing = set(model.missing) - set(model.in_blobs)
    groups: dict[str, list[int]] = {}
    for f in model.files:
        if f.path in missing:
            groups.setdefault(_source(f.path, model.quant), []).append(f.size)
    return "; ".join(f"{name} {len(sizes)} file(s) {gib(sum(sizes))}" for name, sizes in sorted(groups.items()))


def disk_refusal(model: ModelFact) -> str | None:
    """The sizing gate's disk half, with the numbers: a download that cannot fit the cache's disk.
    (Its memory half, VRAM + RAM, is in host_gate.py.)"""
    if model.cache_free_bytes is None or not model.missing:
        return None
    # A cached blob is linked, not fetched (and one that fails its re-hash is removed before it is fetched again).
    needed = model.fetch_bytes
    with_headroom = int(needed * (1 + DISK_HEADROOM))
    # rule: sizing-disk
    # Seed 000 step 3: the sizing gate refuses, with the numbers, a download that cannot fit the disk.
    if with_headroom <= model.cache_free_bytes:
        return None
    what = "tokenizer" if model.quant == "tokenizer" else "model"
    return (f"{what}: {gib(needed)} to fetch (+{DISK_HEADROOM:.0%} headroom: {gib(with_headroom)}) but only "
            f"{gib(model.cache_free_bytes)} free on {model.cache_dir} (model.cache_dir): short by "
            f"{gib(with_headroom - model.cache_free_bytes)} [{_breakdown(model)}]")


def download_spec(fact: ModelFact, endpoint: str | None, key: str) -> ModelDownload:
    return ModelDownload(repo=fact.repo, revision=fact.revision, quant=fact.quant, endpoint=endpoint,
                         cache_dir=fact.cache_dir, files=fact.files, missing=fact.missing, manifest_key=key,
                         verified=fact.stats)


def _why_fetch(model: ModelFact) -> str:
    """"N of M files missing", and which present ones re-hashed to another sha256 (and why they were re-hashed)."""
    corrupt, in_blobs = set(model.corrupt), set(model.in_blobs)
    absent = [p for p in model.missing if p not in corrupt and p not in in_blobs]
    parts = [f"{len(absent)} of {len(model.files)} files missing from the cache"] if absent else []
    if in_blobs:
        parts.append(f"{len(in_blobs)} of {len(model.files)} in the cache's blobs but not linked and verified at this "
                     f"revision: re-hashed and linked, not fetched ({', '.join(sorted(in_blobs))})")
    changed = [p for p in model.corrupt if p in model.changed]
    verified = [p for p in model.corrupt if p not in model.changed]
    if changed:
        parts.append(f"{len(changed)} of {len(model.files)} changed since verified: re-hashed, sha256 mismatch "
                     f"({', '.join(changed)})")
    if verified:
        parts.append(f"{len(verified)} of {len(model.files)} re-hashed (--verify): sha256 mismatch ({', '.join(verified)})")
    return "; ".join(parts)


def _why_record(model: ModelFact) -> str:
    changed = [p for p in model.unrecorded if p in model.changed]
    if changed:
        return (f"{len(changed)} file(s) changed since verified (re-hashed: sha256 matches): record their "
                f"stat fingerprint ({', '.join(changed)})")
    return (f"record the stat fingerprint of {len(model.unrecorded)} verified file(s) (the manifest predates them; "
            "`apply --verify` re-hashes first)")


def model_spec(profile: Profile, observed: Observed) -> ModelDownload:
    model = observed.model
    # A checkpoint (vLLM, SGLang: observe/model_cache.collect_checkpoint) is recorded under its own key: no quant.
    key = (checkpoint_manifest_key(model.repo, model.revision, model.cache_dir) if model.quant == CHECKPOINT
           else manifest_key(profile, model.cache_dir))
    spec = download_spec(model, profile.model.endpoint, key)
    if observed.layout is None or observed.layout_recorded:
        return spec
    # Recorded by the step (a plan never writes state): later plans read one record, not the headers.
    return replace(spec, layout=observed.layout, layout_key=layout_key(model.repo, model.revision, model.quant))


def plan_tokenizer(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """The tokenizer repo's non-weight files (benchmark clients need an HF-format tokenizer)."""
    fact = observed.tokenizer
    if fact is None:
        return ()
    spec = download_spec(fact, desired.profile.model.endpoint, tokenizer_manifest_key(desired.profile, fact.cache_dir))
    target = f"{fact.repo}@{fact.revision[:12]} (non-weight files)"
    if fact.complete and fact.unrecorded:
        return (Step("tokenizer", target, Action.UPDATE, _why_record(fact), spec=spec),)
    if fact.complete:
        return (Step("tokenizer", target, Action.NOOP, f"all {len(fact.files)} files verified in the cache", spec=spec),)
    return (Step("tokenizer", target, Action.CREATE, f"{_why_fetch(fact)} (weights are never fetched from this repo)",
                 spec=spec, cost=f"{gib(fact.fetch_bytes)} to fetch"),)


def model_step(kind: str, model: ModelFact, spec: ModelDownload) -> Step:
    """The download step of one quant's files (the served quant, or the quant gate's reference)."""
    target = f"{model.repo}@{model.revision[:12]}/{model.quant}"
    if model.complete and model.unrecorded:
        # Without its new fingerprint every plan would re-hash the file again.
        return Step(kind, target, Action.UPDATE, _why_record(model), spec=spec)
    if model.complete and spec.layout is not None:
        # The GGUF headers were read for this plan and nothing records them yet: without this, every plan
        # would read every shard's header again (a plan never writes state: the step records it).
        return Step(kind, target, Action.UPDATE, f"record the quant's layout read from the GGUF headers of its "
                    f"{len(model.files)} cached files (later plans read one record)", spec=spec)
    if model.complete:
        return Step(kind, target, Action.NOOP,
                    f"all {len(model.files)} files verified in the cache ({gib(model.total_bytes)})", spec=spec)
    free = f" of {gib(model.cache_free_bytes)} free" if model.cache_free_bytes is not None else ""
    return Step(kind, target, Action.CREATE, _why_fetch(model),
                spec=spec, cost=f"{gib(model.fetch_bytes)} to fetch{free}" + (f" [{_breakdown(model)}]"
                                                                                  if model.fetch_bytes else ""))


def plan_model(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    return (model_step("model", observed.model, model_spec(desired.profile, observed)),)
