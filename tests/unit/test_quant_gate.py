"""The quant gate's measurement parser and verdict, on llama-perplexity outputs recorded from the
real CPU image (tiny kimi-k3 models; see tests/fixtures/perplexity/)."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.model.profile import QuantGate
from kimik3_reconciler.observe.perplexity import parse_kld_report
from kimik3_reconciler.planning.quant_gate import gate_verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "perplexity"
GATE = QuantGate()  # seed defaults: max_kld 0.5, min_top_token_agreement 0.80


def report(name: str):
    return parse_kld_report((FIXTURES / name).read_text())


def test_the_same_weights_pass() -> None:
    same = report("kld-same-weights.out")
    assert (same.mean_kld, same.same_top_p) == (0.0, 1.0) and same.ppl == 257.603826
    assert gate_verdict(same, GATE) == (True, "KLD 0.000, top-token agreement 100.0%")


def test_other_weights_fail_on_agreement_even_with_a_low_kld() -> None:
    # Random tiny models: both distributions are near uniform, so KLD is small, but the top token
    # never agrees: the gate needs both numbers (seed 000: IQ2_XXS 0.37 / 84.6 % vs Q2_K_XL).
    other = report("kld-other-weights.out")
    assert other.mean_kld == 0.025575 and other.same_top_p == 0.0
    assert gate_verdict(other, GATE) == (False, "top-token agreement 0.0% < 80%")


def test_a_run_that_bails_out_is_a_failure() -> None:
    assert "failed to open /g/missing.kld" in (FIXTURES / "kld-missing-base.err").read_text()
    assert report("kld-missing-base.out") is None  # llama-perplexity exited 0 anyway
    passed, why = gate_verdict(None, GATE)
    assert not passed and "bailed out" in why


def test_seed_figures_against_the_defaults() -> None:
    from kimik3_reconciler.model.facts import KldReport

    assert gate_verdict(KldReport(mean_kld=0.37, same_top_p=0.846), GATE)[0]  # UD-IQ2_XXS
    assert not gate_verdict(KldReport(mean_kld=1.9, same_top_p=0.41), GATE)[0]  # "KLD >> 1": a broken kernel
