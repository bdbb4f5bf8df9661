"""What a saved plan was made from, and whether it still holds: PURE (observed facts and texts in).

`observed_basis` is the part of an observation that the changing steps depend on, as a flat
{fact: value} map: the model files and which are missing, the local inputs' hashes, images and
their fingerprints, base image ids, the container (id, state, fingerprint, image), the containers
it conflicts with, each RPC worker's rpc-server and image (and the recorded workers the profile dropped), each
cluster node's member and image, Ray's live addresses (and the recorded nodes the profile dropped),
kimik3's units, gate records, and the host facts that reach a build or a launch. Not in it: what
moves on its own without changing a decision (free disk, free VRAM, RAM available, the /health
answer, the measured load rate, a worker's free device memory and who is connected to it), and other
profiles' images and containers that this profile's steps do not look at (on a shared host they come
and go all day).

`stale_reasons` compares a saved plan with a fresh observation and re-plan, and names every fact,
profile field and step that moved.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.model.facts import ContainerFact, ModelFact, Observed
from kimik3_reconciler.model.plan import Plan, Step, flat_diff
from kimik3_reconciler.model.plan_file import SavedPlan
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import HealthWait, ImageBuild, PagecachePreread
from kimik3_reconciler.planning.conflict_step import why_conflicting
from kimik3_reconciler.planning.preread_step import preread_spec


def _s(value: object) -> str:
    return "none" if value is None else str(value)


def _digest(*parts: object) -> str:
    return hashlib.sha256("\n".join(map(str, parts)).encode()).hexdigest()[:16]


def _model(label: str, fact: ModelFact | None) -> dict[str, str]:
    if fact is None:
        return {}
    files = _digest(*(f"{f.path} {f.size} {f.sha256 or f.git_oid}" for f in fact.files))
    return {
        f"{label}": f"{fact.repo}@{fact.revision}/{fact.quant} ({len(fact.files)} files, listing {files})",
        f"{label}.missing": ", ".join(fact.missing) or "none",
    }


def _wanted(profile: Profile, observed: Observed) -> tuple[str | None, str | None]:
    """The tag and fingerprint of the build the profile wants; None, None where its engine pulls its image (nothing
    is built)."""
    engine = engine_for(profile.engine)
    recipe = None if engine.image_source.kind == "pull" else engine.build_recipe(profile, observed)
    return (None, None) if recipe is None else (recipe.tag, recipe.spec().fingerprint)


def _docker(profile: Profile, observed: Observed) -> dict[str, str]:
    """The profile's tag, builds of its fingerprint (retag targets), its container and those it conflicts with."""
    tag, wanted = _wanted(profile, observed)
    running = observed.container.image_id if observed.container else None
    facts = {}
    for image in observed.images:
        if tag not in image.tags and image.fingerprint != wanted and image.id != running:
            continue
        value = f"{image.id[:19]} fingerprint {image.fingerprint} smoke {image.smoke or '-'}"
        for name in image.tags or (image.id[:19],):
            facts[f"image {name}"] = value
    facts |= {f"base image {ref}": _s(image_id) for ref, image_id in observed.base_images.items()}
    conflicting = (o for o in observed.others if why_conflicting(profile, o, profile.serve.port))
    for container in (observed.container, *conflicting):
        if container is not None:
            image = (container.image_id or "-")[:19]
            facts[f"container {container.name}"] = (
                f"{container.state} {container.id[:12]}, fingerprint {container.fingerprint}, image {image}"
            )
    return facts


def _workers(profile: Profile, observed: Observed) -> dict[str, str]:
    """Each RPC worker's rpc-server (id, state, start, fingerprint: a restart or a replacement moves the main
    server's decision too), its builds of the profile's image, and each recorded worker the profile dropped."""
    tag, wanted = _wanted(profile, observed)
    facts = {}
    for worker in observed.workers:
        facts[f"worker {worker.name}"] = (
            f"unreachable ({worker.error})" if worker.error else _rpc_server(worker.container)
        )
        for image in () if worker.same_daemon else worker.images:  # on the main daemon: the images above
            if tag in image.tags or image.fingerprint == wanted:
                facts[f"worker {worker.name} image {image.id[:19]}"] = (
                    f"fingerprint {image.fingerprint}, tags {', '.join(image.tags) or '-'}"
                )
    for dropped in observed.removed_workers:
        facts[f"dropped worker {dropped.name} ({dropped.docker})"] = (
            f"unreachable ({dropped.error})" if dropped.error else _rpc_server(dropped.container)
        )
    return facts


def _members(observed: Observed) -> dict[str, str]:
    """A cluster's nodes (each member container, its image there), Ray's live addresses, and each recorded node the
    profile dropped: a member that died or a node that left moves the head's decision too."""
    facts = {}
    for node in observed.members:
        member = "no member" if node.container is None else _rpc_server(node.container).replace("rpc-server", "member")
        facts[f"node {node.name}"] = (
            f"unreachable ({node.error})"
            if node.error
            else f"{member}, image {'present' if node.image_present else 'absent'}"
        )
    if observed.members:
        facts["ray alive"] = "unread" if observed.ray_alive is None else ", ".join(observed.ray_alive)
    for dropped in observed.removed_members:
        facts[f"dropped node {dropped.name} ({dropped.docker})"] = (
            f"unreachable ({dropped.error})"
            if dropped.error
            else dropped.container.state
            if dropped.container
            else "gone"
        )
    return facts


def _rpc_server(container: ContainerFact | None) -> str:
    if container is None:
        return "no rpc-server"
    return (
        f"rpc-server {container.state} {container.id[:12]} since {container.started_at or '-'}, "
        f"fingerprint {container.fingerprint}"
    )


def observed_basis(profile: Profile, observed: Observed) -> dict[str, str]:
    """The facts a saved plan must find unchanged (see the module docstring for what is left out)."""
    host, inputs = observed.host, observed.inputs
    facts = {
        **_model("model", observed.model),
        **_model("tokenizer", observed.tokenizer),
        **_model("reference", observed.reference),
        **_docker(profile, observed),
        **_workers(profile, observed),
        **_members(observed),
    }
    facts |= {
        "input dockerfile": inputs.dockerfile_sha256,
        "input archive": _s(inputs.archive_sha256),
        "input patches": ", ".join(f"{p.name} {p.sha256[:16]}" for p in inputs.patches) or "none",
        "input builtin patches": ", ".join(f"{p.name} {p.sha256[:16]}" for p in inputs.builtin_patches) or "none",
        "input api_key_file": _s(inputs.api_key_file),
        "input draft_model": _s(inputs.draft_model),
    }
    facts |= {
        "host physical_cores": str(host.physical_cores),
        "host cpu_flags": _digest(*host.cpu_flags),
        "host gpus": ", ".join(g.uuid for g in host.gpus) or "none",
        "host driver": _s(host.driver_version),
    }
    for unit in observed.systemd.units if observed.systemd else ():
        files = [f.fingerprint if f else "-" for f in (unit.unit_file, unit.env_file)]
        facts[f"unit {unit.name}"] = (
            f"{unit.load_state} {unit.active_state} {unit.unit_file_state or '-'}, files {files[0]} {files[1]}"
        )
    facts |= {f"gate {fp}": "passed" if r.get("passed") else "failed" for fp, r in observed.gate_records.items()}
    return facts


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def profile_moves(source: str, saved_text: str, text_now: str | None) -> list[str]:
    """How the profile file differs from the text the plan was made from, field by field."""
    if text_now is None:
        return [f"profile {source}: no longer readable"]
    if text_now == saved_text:
        return []
    import yaml  # a saved plan's staleness check only: a plain plan never parses YAML itself

    try:
        fields = flat_diff(_flat(yaml.safe_load(saved_text)), _flat(yaml.safe_load(text_now)))
    except yaml.YAMLError:
        return [f"profile {source}: edited (it no longer parses as YAML)"]
    return [f"profile {source}: {d}" for d in fields] or [f"profile {source}: edited (comments or layout only)"]


def _decisions(steps: tuple[Step, ...]) -> dict[tuple[str, str, str], Any]:
    # Health waits are not decisions: apply waits for health after the saved steps whatever they say. Nor is
    # the pre-read, on its own or during the image build: it follows MemAvailable, which moves on its own, and
    # only speeds the load up (the saved plan's build pre-reads as planned, or not).
    return {
        (s.kind, s.target, s.action.symbol): replace(s.spec, preread=None) if isinstance(s.spec, ImageBuild) else s.spec
        for s in steps
        if s.changes and not isinstance(s.spec, HealthWait | PagecachePreread)
    }


def step_moves(saved: tuple[Step, ...], now: tuple[Step, ...]) -> list[str]:
    before, after = _decisions(saved), _decisions(now)
    moves = []
    for key in before.keys() | after.keys():
        kind, target, symbol = key
        if key not in after:
            moves.append(f"step {symbol} {kind} {target}: no longer planned")
        elif key not in before:
            moves.append(f"step {symbol} {kind} {target}: planned now, not in the saved plan")
        elif before[key] != after[key]:
            moves.append(f"step {symbol} {kind} {target}: planned now with other inputs")
    return sorted(moves)


def order_edits(saved: tuple[Step, ...], now: tuple[Step, ...]) -> list[str]:
    """A saved plan runs its steps in the file's order, each once: a step listed twice, or steps in another order
    than the planner's (a launch before its download, a health wait before the launch), is an edit that the
    per-step comparison cannot see."""

    def key(step: Step) -> tuple[str, str, str]:
        return step.kind, step.target, step.action.symbol

    before = [key(s) for s in saved if s.changes]
    after = [key(s) for s in now if s.changes]
    moves = [
        f"step {symbol} {kind} {target}: listed {before.count((kind, target, symbol))} times in the saved plan "
        "(was the plan file edited?)"
        for kind, target, symbol in sorted(set(before))
        if before.count((kind, target, symbol)) > 1
    ]
    common = set(before) & set(after)
    if not moves and [k for k in before if k in common] != [k for k in after if k in common]:
        moves.append("steps: in another order than the planner's (was the plan file edited?)")
    return moves


def _health_identity(wait: HealthWait) -> HealthWait:
    # What a health wait acts on (the container it watches, stops or starts, the URL, the unit it stops after a
    # failed load, the bytes its load rate is recorded for). Its timeout follows the measured load rate, `warm` and
    # `partial_bytes` the pre-read decision: they move on their own, and the saved values run.
    return replace(wait, timeout_s=0.0, warm=False, partial_bytes=None)


def _preread_edited(preread: PagecachePreread, reads: PagecachePreread) -> bool:
    # A partial pre-read's limit follows MemAvailable (it moves on its own, the saved one runs); the files are
    # the model's, and a limit can only cut them: one outside (0, the model's bytes] was written by hand.
    limit = preread.limit_bytes
    return replace(preread, limit_bytes=None) != reads or (limit is not None and not 0 < limit <= reads.total_bytes)


def payload_edits(saved: tuple[Step, ...], now: tuple[Step, ...], observed: Observed) -> list[str]:
    """The saved payloads that `_decisions` leaves out, checked against what they must be now. The file is input:
    every payload `apply PLAN` executes is either compared as a decision or checked here, so an edited health wait
    (another container to stop, another unit) or pre-read (other files) never runs unchecked."""
    waits = {(s.kind, s.target): _health_identity(s.spec) for s in now if isinstance(s.spec, HealthWait)}
    reads = preread_spec(observed)
    moves = []
    for step in (s for s in saved if s.changes):
        spec, where = step.spec, f"step {step.action.symbol} {step.kind} {step.target}"
        if isinstance(spec, HealthWait) and waits.get((step.kind, step.target)) != _health_identity(spec):
            moves.append(
                f"{where}: its health wait differs from the one planned now (container, URL, unit or "
                "model bytes; was the plan file edited?)"
            )
        preread = spec.preread if isinstance(spec, ImageBuild) else spec if isinstance(spec, PagecachePreread) else None
        if preread is not None and _preread_edited(preread, reads):
            moves.append(f"{where}: its pre-read differs from the model's files now (was the plan file edited?)")
    return sorted(moves)


def stale_reasons(
    saved: SavedPlan, profile: Profile, profile_text_now: str | None, observed: Observed, now: Plan
) -> tuple[str, ...]:
    """Everything that moved since `saved` (of `profile`) was made; empty = it may be executed as saved."""
    return (
        *profile_moves(saved.profile_source, saved.profile_text, profile_text_now),
        *(str(d) for d in flat_diff(saved.basis, observed_basis(profile, observed))),
        *step_moves(saved.steps, now.steps),
        *payload_edits(saved.steps, now.steps, observed),
        *order_edits(saved.steps, now.steps),
    )
