"""The catalog's per-quant launch data (seed 000 steps 2 and 5) and the profile defaults that follow it."""

from __future__ import annotations

from kimik3_reconciler.engines.llamacpp.sizing import batch_for, effective_batch, effective_ubatch, ubatch_for
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.profile_source import parse_profile

PROFILE = """apiVersion: kimik3/v1
name: kimi-k3
model: {{repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: {quant}{local}}}
serve: {{{serve}}}
"""


def profile(quant: str, serve: str = ""):
    # A quant made locally (REAP770) is served from its file (issue 27 item 3): the profile names one.
    local = (
        ", local_path: /srv/models/reap770.gguf"
        if catalog.CATALOG.get(quant, None) and catalog.CATALOG[quant].made_locally
        else ""
    )
    return parse_profile(PROFILE.format(quant=quant, serve=serve, local=local), "p.yaml").profile


def test_fit_margin_per_quant_and_mode() -> None:
    iq2 = catalog.fit_margin("UD-IQ2_XXS", "all-vram")
    assert (iq2.default, iq2.minimum, iq2.spills_at, iq2.measured) == (6144, 6144, None, True)
    reap = catalog.fit_margin("UD-Q2_K_XL-REAP770", "all-vram")
    assert (reap.default, reap.minimum, reap.spills_at, reap.measured) == (4096, 4096, 6144, True)
    assert "step 2" in reap.source and "step 5" in iq2.source
    # Unmeasured all-VRAM (catalog or not, e.g. a hybrid quant a bigger host fits in VRAM): step 5's 6144.
    for quant in ("UD-IQ1_M", "UD-Q2_K_XL", "Q8_0"):
        assert catalog.fit_margin(quant, "all-vram") == catalog.ALL_VRAM_STEP5
    # A quant placed hybrid (e.g. IQ2_XXS on four GPUs) gets the hybrid margin, not its all-VRAM one.
    assert catalog.fit_margin("UD-IQ2_XXS", "hybrid") == catalog.HYBRID_FIT


def test_defaults_follow_the_quant() -> None:
    iq2, reap, q2 = profile("UD-IQ2_XXS"), profile("UD-Q2_K_XL-REAP770"), profile("UD-Q2_K_XL")
    assert (effective_batch(iq2), effective_ubatch(iq2), iq2.effective_fit_target) == (2048, 2048, 6144)
    assert (effective_batch(reap), effective_ubatch(reap), reap.effective_fit_target) == (2048, 2048, 4096)
    assert (effective_batch(q2), effective_ubatch(q2), q2.effective_fit_target) == (4096, 4096, 4096)
    # A planner that derived another mode for the host asks with it.
    assert (batch_for(iq2, "hybrid"), ubatch_for(iq2, "hybrid"), iq2.fit_target_for("hybrid")) == (4096, 4096, 4096)


def test_written_values_win_and_batch_never_defaults_below_ubatch() -> None:
    written = profile("UD-IQ2_XXS", "batch: 8192, ubatch: 1024, fit_target: [6144, 8192]")
    assert (effective_batch(written), effective_ubatch(written), written.effective_fit_target) == (
        8192,
        1024,
        [6144, 8192],
    )
    assert effective_batch(profile("UD-IQ2_XXS", "ubatch: 4096")) == 4096


def test_context_length_is_k3s() -> None:
    assert catalog.CONTEXT_LENGTH == 1_048_576
