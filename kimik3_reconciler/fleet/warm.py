"""A rolled host's warm step (issue 40 item 2): what fills its new server's prompt cache before it rejoins the router,
so the router's prefix affinity can give it its share back at once. PURE: values in, a decision out.

- restore: model and context unchanged (`cache_identity` of the profile the old server ran, recorded when it was
  rolled, equals the new one's) and both servers keep slots (serve.slot_save, an engine with a SlotStore): the old
  server's busiest slots are saved after its drain and restored into the new server;
- prefill: otherwise, where the operator declared hot prompts (rollout.warm_prompts): each is put in the server's
  cache once (adapters/slot_cache.py prefill: the exact prefix on llama-server); also where a restore fails;
- none: neither."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from kimik3_reconciler.model.profile import Profile


class Warming(NamedTuple):
    how: Literal["restore", "prefill", "none"]
    reason: str


def cache_identity(profile: Profile) -> dict[str, Any] | None:
    """What a slot's saved KV cache is valid for: the engine, the weights (repo@revision, quant) and the slot's
    context and arguments. None for a local model: its path names no content (a changed file keeps the path), so a
    cache saved against it could be restored over other weights."""
    if profile.model.local_path is not None:
        return None
    serve = profile.serve
    return {
        "engine": profile.engine,
        "model": [profile.model.repo, profile.model.revision, profile.model.quant],
        "ctx_size": serve.ctx_size,
        "parallel": serve.parallel,
        "extra_args": list(serve.extra_args),
    }


def decide(old: Mapping[str, Any] | None, new: Profile, engine_saves_slots: bool, hot_prompts: int) -> Warming:
    """How the host rolled from `old` (its warm record: the identity and slot_save of the profile its server runs,
    written when it was last rolled; None when kimik3 never rolled it) to `new` is warmed."""
    prefill = Warming("prefill", f"{hot_prompts} declared hot prompt(s)") if hot_prompts else None
    fallback = prefill or Warming("none", "no hot prompts declared (rollout.warm_prompts)")
    new_identity = cache_identity(new)
    if not engine_saves_slots:
        return prefill or Warming("none", f"{new.engine} keeps no slots and no hot prompts are declared")
    if not (new.serve.slot_save and old and old.get("slot_save")):
        return fallback._replace(reason=f"{fallback.reason}; slots not kept (serve.slot_save off)")
    if new_identity is None:
        return fallback._replace(reason=f"{fallback.reason}; a local model's cache cannot be matched to its weights")
    if old.get("identity") != new_identity:
        return fallback._replace(reason=f"{fallback.reason}; model or context changed: the saved caches would not fit")
    return Warming("restore", "model and context unchanged: the busiest slots' caches move to the new server")


def warm_record(profile: Profile) -> dict[str, Any]:
    """What is recorded of a host once it is rolled (the next rollout's `old`)."""
    return {"identity": cache_identity(profile), "slot_save": profile.serve.slot_save}


def busiest(slots: list[Mapping[str, Any]], limit: int) -> list[tuple[int, int]]:
    """(slot id, cached tokens) of the slots holding a prompt, the most tokens first, at most `limit`; from
    llama-server's GET /slots (`n_prompt_tokens`: the slot's cached prompt; absent on a slot never used)."""
    held = [(int(s["id"]), int(s.get("n_prompt_tokens") or 0)) for s in slots if not s.get("is_processing")]
    return sorted((s for s in held if s[1] > 0), key=lambda s: -s[1])[:limit]
