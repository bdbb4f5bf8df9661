"""One markdown row per run and level: kimik3 bench's figures, the server's own, llama-benchy's."""

import json
import statistics as st
from pathlib import Path

here = Path(__file__).resolve().parent
for i in (1, 2, 3):
    k3 = json.loads((here / f"k3-{i}.json").read_text())
    lb = json.loads((here / f"lb-{i}.json").read_text())
    for level in k3["levels"]:
        c = level["concurrency"]
        other = next(b for b in lb["benchmarks"] if b["concurrency"] == c)
        print(
            f"| {i} | {c} | {level['ttft_p50']:.2f} | {st.median(other['e2e_ttft']['values']) / 1000:.2f} | "
            f"{level['decode_p50']:.1f} | {level['server_decode_p50']:.1f} | "
            f"{st.median(other['tg_req_throughput']['values']):.1f} |"
        )
