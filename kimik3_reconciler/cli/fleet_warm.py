"""The warm step of `kimik3 fleet router-step` (fleet/warm.py decides; adapters/slot_cache.py talks to the server):
`out`, after the drain, saves the busiest slots where the new profile keeps model and context; `in`, before the host
is added back to the router, restores them into the new server, or prefills the declared hot prompts. A warm step
that fails costs only the cache: the rollout goes on (a cold host is what a rollout had before).

Each host's warm record, `<state>/fleet/<name>/warm/<host>.json`: what its server runs (the identity of its profile,
serve.slot_save) and, between `out` and `in`, the slots saved and the model file the old server had open. Never the
API key: it is read from its file for each step's requests (`server_key`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.fleet.warm import busiest, decide, warm_record
from kimik3_reconciler.model.api_keys import sent_key
from kimik3_reconciler.model.profile import Profile


def _path(record_file: Path, host: str) -> Path:
    return record_file.parent / "warm" / f"{host}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    tmp.replace(path)


def server_key(profile: Profile) -> str | None:
    """The key the warm step sends the host's server, read as verify and the exporter read it: the first key of
    `serve.api_key_file`, bytes split on "\n" (model/api_keys.py); None when the profile sets no key. The path is the
    host's effective profile's (absolute, fleet/effective.py), read here on the controller: the controller must hold
    the same file at that path. Read for each step, held only for its requests. SlotCacheError naming the field
    (never the key) when no key can be sent: the server would answer every warm request 401."""
    from kimik3_reconciler.adapters.slot_cache import SlotCacheError

    path = profile.serve.api_key_file
    if path is None:
        return None
    try:
        key = sent_key(Path(path).read_bytes())
    except OSError as exc:
        raise SlotCacheError(
            f"serve.api_key_file: {path} is not readable on this controller ({exc.strerror})"
        ) from None
    if key is None:
        raise SlotCacheError(f"serve.api_key_file: {path} holds no key the server can match as sent")
    return key


def save_before_swap(record_file: Path, host: str, worker: str, profile: Profile, hot_prompts: int) -> str:
    """After the drain: the busiest slots saved where they will be restored; what was done, as one line."""
    from kimik3_reconciler.adapters import slot_cache

    path = _path(record_file, host)
    old = _read(path)
    store = engine_for(profile.engine).slot_store
    plan = decide(old, profile, store is not None, hot_prompts)
    record = {**(old or {}), "saved": [], "model_path": None}
    if plan.how == "restore" and store is not None:
        try:
            key = server_key(profile)
            chosen = busiest(slot_cache.slots(worker, key, store.list_path), profile.serve.parallel)
            for slot, _ in chosen:
                done = slot_cache.save(worker, key, slot)
                record["saved"].append({"slot": slot, "tokens": done.get("n_saved"), "bytes": done.get("n_written")})
            record["model_path"] = slot_cache.model_path(worker, key)
        except slot_cache.SlotCacheError as exc:
            record["saved"] = []
            _write(path, record)
            return f"{host}: warm: slots not saved ({exc}); it will be {plan.how if hot_prompts else 'cold'}"
    _write(path, record)
    if plan.how != "restore":
        return f"{host}: warm: {plan.how} after the update ({plan.reason})"
    tokens = sum(s["tokens"] or 0 for s in record["saved"])
    return f"{host}: warm: saved {len(record['saved'])} slot(s), {tokens} cached tokens ({plan.reason})"


def warm_after_swap(
    record_file: Path, host: str, worker: str, profile: Profile, prompts: tuple[dict[str, Any], ...]
) -> dict[str, Any]:
    """Before the host is back in the router: slots restored, else the hot prompts prefilled. Returns what was done
    ({"how", "slots", "tokens", "prompts", "failed"}); the record then holds the new server's profile."""
    from kimik3_reconciler.adapters import slot_cache

    path = _path(record_file, host)
    old = _read(path) or {}
    done: dict[str, Any] = {"how": "none", "slots": 0, "tokens": 0, "prompts": 0, "failed": []}
    saved = old.get("saved") or []
    key = None
    try:
        key = server_key(profile)
    except slot_cache.SlotCacheError as exc:
        # Every request would be refused (401): the host rejoins cold, and `router: in` says why.
        saved, prompts = [], ()
        done["failed"].append(str(exc))
    if saved and engine_for(profile.engine).slot_store is not None:
        now = slot_cache.model_path(worker, key)
        if now is not None and now == old.get("model_path"):
            # The same model file open in the new server: the saved caches were computed on these weights.
            for entry in saved:
                try:
                    restored = slot_cache.restore(worker, key, entry["slot"])
                    done["slots"] += 1
                    done["tokens"] += int(restored.get("n_restored") or 0)
                except slot_cache.SlotCacheError as exc:
                    done["failed"].append(str(exc))
            done["how"] = "restore" if done["slots"] else "none"
        else:
            done["failed"].append(f"the new server opened {now}, the saved caches are of {old.get('model_path')}")
    if done["how"] == "none" and prompts:
        exact = engine_for(profile.engine).exact_prefill
        for body in prompts:
            try:
                slot_cache.prefill(worker, key, profile.name, body, exact)
                done["prompts"] += 1
            except slot_cache.SlotCacheError as exc:
                done["failed"].append(str(exc))
        done["how"] = "prefill" if done["prompts"] else "none"
    _write(path, {**warm_record(profile), "saved": [], "model_path": None})
    return done


def say(host: str, done: dict[str, Any]) -> None:
    line = {
        "restore": f"restored {done['slots']} slot(s), {done['tokens']} cached tokens",
        "prefill": f"prefilled {done['prompts']} declared hot prompt(s)",
        "none": "cold" if done["failed"] else "cold (nothing to restore, no hot prompts)",
    }[done["how"]]
    click.echo(f"{host}: warm: {line}" + (f"; failed: {'; '.join(done['failed'])}" if done["failed"] else ""))
