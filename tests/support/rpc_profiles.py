"""The profile RPC unit tests start from: the tiny CPU deployment `k3` (no GPUs, no smoke gate) whose layers run
on the rpc-server `workers` given."""

from __future__ import annotations

from support.shipped import TEST_COMMITS


def cpu_rpc_profile(*workers: dict) -> dict:
    """The profile as a document (a test may edit it before parsing), its rpc.workers `workers`."""
    return {
        "apiVersion": "kimik3/v1",
        "name": "k3",
        "model": {
            "repo": "unsloth/Kimi-K3-GGUF",
            "revision": TEST_COMMITS["unsloth/Kimi-K3-GGUF"],
            "quant": "UD-Q2_K_XL",
        },
        "build": {"variant": "cpu", "cpu_features": []},
        "gpus": "none",
        "gate": {"smoke": False},
        "rpc": {"workers": list(workers)},
    }
