"""llama-perplexity, llama.cpp's scorer for the quant gate (engines/base.py QuantScorer): its argv for the reference
quant's logits and for the candidate's KL divergence against them, and the parser of its report."""

from __future__ import annotations

import re

from kimik3_reconciler.engines.base import KldReport

# A number as llama-perplexity's printf writes it: glibc prints a NaN as "nan" or "-nan" and an infinity as "inf".
_NUMBER = r"([-+]?(?:nan|inf(?:inity)?|\d[\d.]*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))"
_KLD = re.compile(r"^Mean\s+KLD:\s+" + _NUMBER, re.MULTILINE | re.IGNORECASE)
_TOP = re.compile(r"^Same top p:\s+" + _NUMBER + r"\s*±", re.MULTILINE | re.IGNORECASE)
_PPL = re.compile(r"^Mean PPL\(Q\)\s+:\s+" + _NUMBER, re.MULTILINE | re.IGNORECASE)


def parse_kld_report(stdout: str) -> KldReport | None:
    """The report, or None: llama-perplexity exits 0 even when it bails out (a missing base file, a
    failed load: reference/llama-cpp.md §5, tests/fixtures/perplexity/kld-missing-base.*), so a report
    counts only when its `Mean    KLD:` and `Same top p:` lines are both there."""
    kld, top = _KLD.search(stdout), _TOP.search(stdout)
    if not kld or not top:
        return None
    ppl = _PPL.search(stdout)
    return KldReport(
        mean_kld=float(kld.group(1)), same_top_p=float(top.group(1)) / 100, ppl=float(ppl.group(1)) if ppl else None
    )


def perplexity_argv(
    model: str, logits: str, flags: tuple[str, ...], ctx: int, chunks: int, text: str | None = None
) -> tuple[str, ...]:
    """llama-perplexity's argv: with `text`, write the reference logits (`--kl-divergence-base` = save) over `chunks`
    chunks of `ctx` tokens; without, score the candidate against them (`--kl-divergence`). Paths are the container's."""
    if text is not None:
        own: tuple[str, ...] = ("-m", model, "-f", text, "--chunks", str(chunks), "--kl-divergence-base", logits)
    else:
        own = ("-m", model, "--kl-divergence-base", logits, "--kl-divergence")
    return (*own, "-c", str(ctx), *flags)


class Perplexity:
    program = "llama-perplexity"
    entrypoint = ("/app/llama-perplexity",)

    def argv(
        self, model: str, logits: str, flags: tuple[str, ...], ctx: int, chunks: int, text: str | None = None
    ) -> tuple[str, ...]:
        return perplexity_argv(model, logits, flags, ctx, chunks, text)

    def report(self, stdout: str) -> KldReport | None:
        return parse_kld_report(stdout)


SCORER = Perplexity()
