"""The warm step's decision (fleet/warm.py): restore the slots where model and context stay and both servers keep
slots; else prefill the declared hot prompts; else nothing. And which slots are saved."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.shipped import pinned_text

from kimik3_reconciler.fleet.warm import busiest, decide, warm_record
from kimik3_reconciler.model.profile_source import parse_profile

ROOT = Path(__file__).resolve().parents[3]


def _profile(slot_save: bool = True, **serve: object):  # noqa: ANN202 - Profile
    text = pinned_text(ROOT / "profiles" / "demo-cpu.yaml")
    profile = parse_profile(text, "demo-cpu.yaml").profile
    return profile.model_copy(update={"serve": profile.serve.model_copy(update={"slot_save": slot_save, **serve})})


def test_unchanged_model_and_context_restore_the_slots() -> None:
    old = warm_record(_profile())
    assert decide(old, _profile(), True, 0).how == "restore"
    assert decide(old, _profile(), True, 2).how == "restore"  # the kept caches beat a prefill of declared prompts


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"parallel": 1}, "model or context changed"),
        ({"ctx_size": 2048}, "model or context changed"),
        ({"extra_args": ("--rope-freq-base", "1000")}, "model or context changed"),
    ],
)
def test_a_changed_context_prefills_the_declared_prompts(change: dict, why: str) -> None:
    got = decide(warm_record(_profile()), _profile(**change), True, 3)
    assert got.how == "prefill" and why in got.reason


def test_changed_weights_prefill_or_do_nothing() -> None:
    old = warm_record(_profile())
    old["identity"]["model"][1] = "0" * 40  # another revision
    assert decide(old, _profile(), True, 1).how == "prefill"
    assert decide(old, _profile(), True, 0) == ("none", decide(old, _profile(), True, 0).reason)
    assert "model or context changed" in decide(old, _profile(), True, 0).reason


def test_no_restore_without_slot_save_on_both_sides_or_a_record() -> None:
    assert decide(warm_record(_profile(slot_save=False)), _profile(), True, 0).how == "none"
    assert decide(warm_record(_profile()), _profile(slot_save=False), True, 1).how == "prefill"
    assert decide(None, _profile(), True, 0).how == "none"  # a host kimik3 never rolled: nothing says what it ran


def test_an_engine_without_a_slot_store_prefills_or_does_nothing() -> None:
    old = warm_record(_profile())
    assert decide(old, _profile(), False, 2).how == "prefill"
    assert decide(old, _profile(), False, 0).how == "none"


def test_a_local_model_is_never_restored() -> None:
    profile = _profile()
    local = profile.model_copy(update={"model": profile.model.model_copy(update={"local_path": "/m/x.gguf"})})
    assert decide(warm_record(local), local, True, 0).how == "none"


def test_the_busiest_idle_slots_first() -> None:
    slots = [
        {"id": 0, "n_prompt_tokens": 10},
        {"id": 1},  # never used
        {"id": 2, "n_prompt_tokens": 500},
        {"id": 3, "n_prompt_tokens": 900, "is_processing": True},  # still running: not a settled cache
        {"id": 4, "n_prompt_tokens": 0},
    ]
    assert busiest(slots, 8) == [(2, 500), (0, 10)]
    assert busiest(slots, 1) == [(2, 500)]
