"""Parse llama-perplexity's KL-divergence report (the quant gate's measurement, issue 6).

llama-perplexity exits 0 even when it bails out (a missing base file, a failed load: see
reference/llama-cpp.md §5 and tests/fixtures/perplexity/kld-missing-base.*), so a report counts
only when its `Mean    KLD:` and `Same top p:` lines are both there.
"""

from __future__ import annotations

import re

from kimik3_reconciler.model.facts import KldReport

_KLD = re.compile(r"^Mean\s+KLD:\s+([-\d.eE+]+)", re.M)
_TOP = re.compile(r"^Same top p:\s+([-\d.eE+]+)\s*±", re.M)
_PPL = re.compile(r"^Mean PPL\(Q\)\s+:\s+([-\d.eE+]+)", re.M)


def parse_kld_report(stdout: str) -> KldReport | None:
    kld, top = _KLD.search(stdout), _TOP.search(stdout)
    if not kld or not top:
        return None
    ppl = _PPL.search(stdout)
    return KldReport(mean_kld=float(kld.group(1)), same_top_p=float(top.group(1)) / 100,
                     ppl=float(ppl.group(1)) if ppl else None)
