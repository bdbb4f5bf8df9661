"""llama.cpp's smoke model (engines/base.py SmokeModel): a tiny random-weights kimi-k3 GGUF in two shards
(smoke_model.py writes it), served by llama-server with the seed's fixed flags, a 2048-token context and one slot."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.engines.llamacpp import launch

ENTRY = "Kimi-K3-tiny-00001-of-00002.gguf"


class TinyKimiK3:
    entry = ENTRY
    what = "a tiny kimi-k3 GGUF"

    def argv(self, path: str, threads: int) -> tuple[str, ...]:
        return (
            "-m",
            path,
            "--alias",
            "kimik3-smoke",
            *launch.owned_flags(threads, "none"),
            "--ctx-size",
            "2048",
            "--parallel",
            "1",
            "--log-colors",
            "off",
        )

    def write(self, folder: Path) -> None:
        from kimik3_reconciler.engines.llamacpp.smoke_model import write_tiny_kimi_k3  # numpy + gguf: a smoke test only

        write_tiny_kimi_k3(folder, ENTRY.split("-00001-of-")[0], shards=2, seed=0)


SMOKE = TinyKimiK3()
