"""The quant gate's verdict (seed 000 "Quant gate"): pure; the step that runs llama-perplexity
in the profile's image and records the report is issue 6's remaining work."""

from __future__ import annotations

from kimik3_reconciler.model.facts import KldReport
from kimik3_reconciler.model.profile import QuantGate


def gate_verdict(report: KldReport | None, gate: QuantGate) -> tuple[bool, str]:
    """(passed, why). A missing report is a failure: llama-perplexity exits 0 when it bails out."""
    if report is None:
        return False, "llama-perplexity printed no 'Mean    KLD:' / 'Same top p:' lines (it bailed out)"
    problems = []
    if report.mean_kld > gate.max_kld:
        problems.append(f"KLD {report.mean_kld:.3f} > max_kld {gate.max_kld}")
    if report.same_top_p < gate.min_top_token_agreement:
        problems.append(f"top-token agreement {report.same_top_p:.1%} < {gate.min_top_token_agreement:.0%}")
    if problems:
        return False, "; ".join(problems)
    return True, f"KLD {report.mean_kld:.3f}, top-token agreement {report.same_top_p:.1%}"
