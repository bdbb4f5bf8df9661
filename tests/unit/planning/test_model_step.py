"""The model and tokenizer steps: what gets fetched, and the sizing gate's numbers (pure planner)."""

from __future__ import annotations

import pytest
from support.observed import model_fact, observed

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning import plan

GIB = 1 << 30
# The model alone, then with its extras (the vision projector, the tokenizer from its own repo).
PROFILE_TEXT_WITHOUT_EXTRAS = """
apiVersion: kimik3/v1
name: kimi-k3
model:
  repo: unsloth/Kimi-K3-GGUF
  revision: 0123456789abcdef0123456789abcdef01234567
  quant: UD-Q2_K_XL
"""
EXTRAS = """  mmproj: mmproj-BF16.gguf
  tokenizer: {repo: moonshotai/Kimi-K3, revision: 89abcdef0123456789abcdef0123456789abcdef}
"""
PROFILE = parse_profile(PROFILE_TEXT_WITHOUT_EXTRAS + EXTRAS).profile


def uncached(free: int, tokenizer_missing: bool = True) -> Observed:
    """Nothing of the model in the cache yet, `free` bytes free on its disk."""
    files = tuple(
        RemoteFile(path=f"UD-Q2_K_XL/K3-0000{i}-of-00019.gguf", size=42 * GIB, sha256="a" * 64) for i in range(1, 20)
    ) + (RemoteFile(path="mmproj-BF16.gguf", size=GIB, sha256="b" * 64),)
    model = model_fact(
        PROFILE, cache_dir="/c", files=files, missing=tuple(f.path for f in files), cache_free_bytes=free
    )
    tok_files = (RemoteFile(path="tokenizer.json", size=4 << 20, git_oid="c" * 40),)
    tokenizer = ModelFact(
        repo="moonshotai/Kimi-K3",
        revision=PROFILE.model.tokenizer.revision,
        quant="tokenizer",
        cache_dir="/c",
        files=tok_files,
        missing=("tokenizer.json",) if tokenizer_missing else (),
        cache_free_bytes=free,
    )
    return observed(PROFILE, model=model, tokenizer=tokenizer)


def test_the_plan_prints_bytes_to_fetch_against_free_disk_per_source() -> None:
    steps = {s.kind: s for s in plan(PROFILE, uncached(free=2000 * GIB)).steps}
    assert (
        steps["model"].cost == "799.0 GiB to fetch of 2000.0 GiB free [UD-Q2_K_XL/ 19 file(s) 798.0 GiB; "
        "mmproj-BF16.gguf 1 file(s) 1.0 GiB]"
    )
    assert steps["tokenizer"].action is Action.CREATE and "weights are never fetched" in steps["tokenizer"].reason


def test_sizing_gate_refuses_with_needed_free_shortfall_and_breakdown() -> None:
    with pytest.raises(PlanError) as refused:
        plan(PROFILE, uncached(free=700 * GIB))
    assert str(refused.value) == "the host gate refuses this profile:\n  - " + (
        "model: 799.0 GiB to fetch (+10% headroom: 878.9 GiB) but only 700.0 GiB free on /c (model.cache_dir): short by 178.9 GiB "
        "[UD-Q2_K_XL/ 19 file(s) 798.0 GiB; mmproj-BF16.gguf 1 file(s) 1.0 GiB]"
    )


def test_a_complete_model_whose_layout_is_not_recorded_carries_it_for_the_apply_to_keep() -> None:
    """The GGUF headers were read from the cached files for this plan (no layout record: a cache from before the
    record existed): rebuilt from the host, so not a change (issue 38 item 3); the NOOP step carries the record for
    the next apply to keep, so later plans read one record instead of every shard's header."""
    import json
    from pathlib import Path

    from kimik3_reconciler.model.facts import ModelLayout
    from kimik3_reconciler.model.records import layout_key

    layout = ModelLayout(
        **json.loads((Path(__file__).parents[2] / "fixtures" / "h200" / "synth-layout.json").read_text()),
        context_length=0,
        state_bytes_per_slot=0,
    )
    profile = parse_profile(PROFILE_TEXT_WITHOUT_EXTRAS).profile
    fresh = plan(profile, observed(profile, layout=layout, layout_recorded=False))
    model = next(s for s in fresh.steps if s.kind == "model")
    assert model.action is Action.NOOP and "rebuilt from the cached GGUF headers" in model.reason
    assert model.spec.missing == () and model.spec.layout == layout
    key = layout_key(profile.model.repo, profile.model.revision, profile.model.quant)
    assert model.spec.rebuilt_records() == ((key, layout.model_dump(mode="json")),)
    recorded = plan(profile, observed(profile, layout=layout, layout_recorded=True))
    assert next(s for s in recorded.steps if s.kind == "model").action is Action.NOOP


def test_a_file_whose_blob_is_cached_is_priced_at_what_apply_fetches() -> None:
    """Held-back review (issue 30): a removed snapshot link whose blob was present was priced "1.2 MiB to fetch" and
    apply fetched 0 bytes (it re-hashes and links the blob). The cost and the disk gate count what is fetched."""
    files = (
        RemoteFile(path="UD-Q2_K_XL/K3-00001-of-00002.gguf", size=700 * GIB, sha256="a" * 64),
        RemoteFile(path="UD-Q2_K_XL/K3-00002-of-00002.gguf", size=42 * GIB, sha256="b" * 64),
        RemoteFile(path="mmproj-BF16.gguf", size=GIB, sha256="c" * 64),
    )
    model = model_fact(
        PROFILE,
        cache_dir="/c",
        files=files,
        missing=(files[0].path, files[1].path),
        in_blobs=(files[0].path,),
        cache_free_bytes=100 * GIB,
    )  # 700 GiB would not fit: not fetched
    step = {s.kind: s for s in plan(PROFILE, observed(PROFILE, model=model)).steps}["model"]
    assert step.action is Action.CREATE and step.spec.missing == (files[0].path, files[1].path)  # both made present
    assert step.cost == "42.0 GiB to fetch of 100.0 GiB free [UD-Q2_K_XL/ 1 file(s) 42.0 GiB]"
    assert step.reason == (
        "1 of 3 files missing from the cache; 1 of 3 in the cache's blobs but not linked and "
        "verified at this revision: re-hashed and linked, not fetched "
        "(UD-Q2_K_XL/K3-00001-of-00002.gguf)"
    )
    only_linked = model.model_copy(update={"missing": (files[0].path,)})
    step = {s.kind: s for s in plan(PROFILE, observed(PROFILE, model=only_linked)).steps}["model"]
    assert step.cost == "0 B to fetch of 100.0 GiB free"
