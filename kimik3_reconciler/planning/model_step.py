"""Plan the model: are all files of repo@revision/quant verified in the HF cache, and do the
missing ones fit on the cache's disk (the sizing gate, before any byte is fetched)?"""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.model.facts import ModelFact, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.model_files import (
    CHECKPOINT,
    checkpoint_manifest_key,
    manifest_key,
    model_layout_key,
    tokenizer_manifest_key,
)
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.records import local_model_key
from kimik3_reconciler.model.specs import LocalModelVerify, ModelDownload
from kimik3_reconciler.planning.desired import Desired

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
    return (
        f"{what}: {gib(needed)} to fetch (+{DISK_HEADROOM:.0%} headroom: {gib(with_headroom)}) but only "
        f"{gib(model.cache_free_bytes)} free on {model.cache_dir} (model.cache_dir): short by "
        f"{gib(with_headroom - model.cache_free_bytes)} [{_breakdown(model)}]"
    )


def download_spec(fact: ModelFact, endpoint: str | None, key: str) -> ModelDownload:
    return ModelDownload(
        repo=fact.repo,
        revision=fact.revision,
        quant=fact.quant,
        endpoint=endpoint,
        cache_dir=fact.cache_dir,
        files=fact.files,
        missing=fact.missing,
        manifest_key=key,
        verified=fact.stats,
    )


def _why_fetch(model: ModelFact) -> str:
    """ "N of M files missing", and which present ones re-hashed to another sha256 (and why they were re-hashed)."""
    corrupt, in_blobs = set(model.corrupt), set(model.in_blobs)
    absent = [p for p in model.missing if p not in corrupt and p not in in_blobs]
    parts = [f"{len(absent)} of {len(model.files)} files missing from the cache"] if absent else []
    if in_blobs:
        parts.append(
            f"{len(in_blobs)} of {len(model.files)} in the cache's blobs but not linked and verified at this "
            f"revision: re-hashed and linked, not fetched ({', '.join(sorted(in_blobs))})"
        )
    changed = [p for p in model.corrupt if p in model.changed]
    verified = [p for p in model.corrupt if p not in model.changed]
    if changed:
        parts.append(
            f"{len(changed)} of {len(model.files)} changed since verified: re-hashed, sha256 mismatch "
            f"({', '.join(changed)})"
        )
    if verified:
        parts.append(
            f"{len(verified)} of {len(model.files)} re-hashed (--verify): sha256 mismatch ({', '.join(verified)})"
        )
    return "; ".join(parts)


def _why_record(model: ModelFact) -> str:
    changed = [p for p in model.unrecorded if p in model.changed]
    if changed:
        return (
            f"{len(changed)} file(s) changed since verified (re-hashed: sha256 matches): record their "
            f"stat fingerprint ({', '.join(changed)})"
        )
    return (
        f"record the stat fingerprint of {len(model.unrecorded)} verified file(s) (the manifest predates them; "
        "`apply --verify` re-hashes first)"
    )


def model_spec(profile: Profile, observed: Observed) -> ModelDownload:
    model = observed.model
    # A checkpoint (vLLM, SGLang: observe/model_cache.collect_checkpoint) is recorded under its own key: no quant.
    key = (
        checkpoint_manifest_key(model.repo, model.revision, model.cache_dir)
        if model.quant == CHECKPOINT
        else manifest_key(profile, model.cache_dir)
    )
    spec = download_spec(model, profile.model.endpoint, key)
    if observed.layout is None or observed.layout_recorded:
        return spec
    # Recorded by the step (a plan never writes state): later plans read one record, not the headers.
    return replace(spec, layout=observed.layout, layout_key=model_layout_key(model))


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
        return (
            Step("tokenizer", target, Action.NOOP, f"all {len(fact.files)} files verified in the cache", spec=spec),
        )
    return (
        Step(
            "tokenizer",
            target,
            Action.CREATE,
            f"{_why_fetch(fact)} (weights are never fetched from this repo)",
            spec=spec,
            cost=f"{gib(fact.fetch_bytes)} to fetch",
        ),
    )


def model_step(kind: str, model: ModelFact, spec: ModelDownload, weights: str = "weight") -> Step:
    """The download step of one quant's files (the served quant, or the quant gate's reference); `weights`: their
    format as the plan names it (the engine's: GGUF), whose headers give the layout."""
    target = f"{model.repo}@{model.revision[:12]}/{model.quant}"
    if model.complete and model.unrecorded:
        # Without its new fingerprint every plan would re-hash the file again.
        return Step(kind, target, Action.UPDATE, _why_record(model), spec=spec)
    if model.complete and spec.layout is not None:
        # The GGUF headers were read from the cached files for this plan: no record, or one an older kimik3 wrote
        # in another shape. Rebuilt from the host, so not a change (an upgrade must not read as drift); the next
        # apply keeps it (Payload.rebuilt_records), and later plans read one record, not every shard's header.
        return Step(
            kind,
            target,
            Action.NOOP,
            f"all {len(model.files)} files verified in the cache "
            f"({gib(model.total_bytes)}); the quant's layout record was missing or in an older kimik3's "
            f"shape: rebuilt from the cached {weights} headers, the next apply keeps it (not a change)",
            spec=spec,
        )
    if model.complete:
        return Step(
            kind,
            target,
            Action.NOOP,
            f"all {len(model.files)} files verified in the cache ({gib(model.total_bytes)})",
            spec=spec,
        )
    free = f" of {gib(model.cache_free_bytes)} free" if model.cache_free_bytes is not None else ""
    return Step(
        kind,
        target,
        Action.CREATE,
        _why_fetch(model),
        spec=spec,
        cost=f"{gib(model.fetch_bytes)} to fetch{free}" + (f" [{_breakdown(model)}]" if model.fetch_bytes else ""),
    )


def local_spec(observed: Observed) -> LocalModelVerify:
    model = observed.model
    assert model.local_path is not None
    spec = LocalModelVerify(
        local_path=model.local_path,
        folder=model.cache_dir,
        quant=model.quant,
        files=model.files,
        stats=model.stats,
        manifest_key=local_model_key(model.local_path),
    )
    if observed.layout is None or observed.layout_recorded:
        return spec
    return replace(spec, layout=observed.layout, layout_key=model_layout_key(model))


def _short(sha: str | None) -> str:
    return (sha or "?")[:12]


def local_model_step(observed: Observed, weights: str = "weight") -> Step:
    """The local model: record its sha256 manifest (first use), re-record it after its content changed (drift: the
    container's fingerprint carries the content, so the server is relaunched on the new file), or nothing."""
    model, spec = observed.model, local_spec(observed)
    target = f"{model.local_path} (local {model.quant})"
    size = f"{len(model.files)} file(s), {gib(model.total_bytes)}"
    # rule: local-path-verified
    # Seed 000 serves a locally made GGUF (REAP770): kimik3 serves only what it hashed and recorded, and a file
    # replaced under it is drift the plan shows, never a silent change of the weights a running server reads.
    if model.recorded_digest is None:
        return Step(
            "model",
            target,
            Action.CREATE,
            f"not verified yet: record the sha256 manifest of {size} "
            "(hashed by this plan; served read-only from there)",
            spec=spec,
        )
    if model.drifted:
        return Step(
            "model",
            target,
            Action.UPDATE,
            f"changed since verified ({', '.join(model.changed) or 'files'}):"
            f" content {_short(model.recorded_digest)} -> {_short(model.digest)}, re-hashed: record the new "
            "manifest (the server is relaunched on it)",
            spec=spec,
        )
    if model.unrecorded:
        return Step(
            "model",
            target,
            Action.UPDATE,
            f"{len(model.unrecorded)} file(s) moved since verified "
            f"(re-hashed: sha256 matches): record their stat fingerprint ({', '.join(model.unrecorded)})",
            spec=spec,
        )
    if spec.layout is not None:  # rebuilt from the file itself: not a change (as a hub quant's, model_step)
        return Step(
            "model",
            target,
            Action.NOOP,
            f"{size} verified; the layout record was missing or in an older "
            f"kimik3's shape: rebuilt from its {weights} headers, the next apply keeps it (not a change)",
            spec=spec,
        )
    return Step(
        "model",
        target,
        Action.NOOP,
        f"{size} verified (sha256 recorded; size, mtime and inode unchanged: not re-read)",
        spec=spec,
    )


def plan_model(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    weights = weights_format(desired)
    if observed.model.local_path is not None:
        return (local_model_step(observed, weights),)
    return (model_step("model", observed.model, model_spec(desired.profile, observed), weights),)


def weights_format(desired: Desired) -> str:
    """The served weights' format as a plan names it (the engine's model source: GGUF, SAFETENSORS)."""
    return desired.engine.model_source.format.upper()
