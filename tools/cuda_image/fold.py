"""Fold the H200 run of the CUDA image (tools/gpu_proof/run-cuda-image.sh's $OUT) into the fixture.

    python3 tools/cuda_image/fold.py OUT_DIR > tests/fixtures/h200/cuda-image-h200.json

Keeps the run's facts (GPU and driver, the image's tag, fingerprint and build time, the cmake arguments the image
was built with and the ones kimik3 renders on the H200, the pip cuBLAS/cudart used, ldd of both builds) and every
load (tokens, timings, mapped libraries), and adds `summary` (summarize(), which the test recomputes): per
placement, whether every load generated the same tokens, the median decode and prompt tok/s of each build, the
image/native ratio of the decode medians, and the spread it is judged against (the larger of the two builds'
(max - min) / median over their own loads).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

KEPT = (
    "placement",
    "build",
    "round",
    "healthy_s",
    "tokens",
    "content",
    "prompt_tokens",
    "prompt_tps",
    "decode_tokens",
    "decode_tps",
    "mapped",
    "lib",
    "error",
)


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def summarize(samples: list[dict]) -> dict:
    summary = {}
    for placement in sorted({s["placement"] for s in samples}):
        rows = [s for s in samples if s["placement"] == placement and not s.get("error")]
        decode = {b: [s["decode_tps"] for s in rows if s["build"] == b] for b in ("native", "image")}
        prompt = {b: [s["prompt_tps"] for s in rows if s["build"] == b] for b in ("native", "image")}
        if not all(decode.values()):
            summary[placement] = {"complete": False, "loads": {b: len(v) for b, v in decode.items()}}
            continue
        medians = {b: statistics.median(v) for b, v in decode.items()}
        summary[placement] = {
            "complete": True,
            "loads": {b: len(v) for b, v in decode.items()},
            "tokens_identical": len({json.dumps(s["tokens"]) for s in rows}) == 1 and bool(rows[0]["tokens"]),
            "decode_median_tps": {b: round(m, 2) for b, m in medians.items()},
            "prompt_median_tps": {b: round(statistics.median(v), 2) for b, v in prompt.items()},
            "decode_ratio_image_native": round(medians["image"] / medians["native"], 4),
            "decode_spread": round(max(_spread(v) for v in decode.values()), 4),
        }
    return summary


def main() -> None:
    run = json.loads((Path(sys.argv[1]) / "cuda-image-run.json").read_text())
    samples = [{k: s[k] for k in KEPT if k in s} for s in run.pop("samples")]
    print(json.dumps({**run, "samples": samples, "summary": summarize(samples)}, indent=1))


if __name__ == "__main__":
    main()
