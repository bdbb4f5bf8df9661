"""Probe: what a slot the warm rollout restored gives the trace's next turn (one replica, cli/fleet_warm.py's own
save and restore, bench/fleet_cache.py's agent trace).

    .venv/bin/python bench/warm_restore_reuse.py

One llama-server replica of the demo image (bench/fleet_cache_rollout.py's: --slot-save-path, 4 slots, the tiny
kimi-k3 GGUF, whose KDA layers are recurrent as Kimi-K3's): two conversations of one agent (its system prompt shared)
each get a turn; then the warm step saves the busiest slots, the server is replaced, and the step restores them, as
`router: out`/`router: in` do; then a new conversation of that agent, each conversation's next turn, and after a cold
replacement one more. Each reply's
`timings.cache_n`/`prompt_n` (what kimik3's router reads) and the server's own word on a forced re-prefill (its log's
"forcing full prompt re-processing" lines, llama.cpp's message where a recurrent state has no checkpoint to go back
to) are printed.

Why: kimik3's router voids a replica's entries when a turn sent there for what it held reuses < 5 % of its prompt
(routing/slot_route.py); bench/fleet_cache_rollout.py counted such voids after warm rollouts. The trace's next turn
re-sends the conversation with the assistant's message as the client keeps it (here the trace's scripted tool call),
not the tokens the server generated, so it diverges from a slot's state at the end of the previous prompt: a
recurrent model's server reuses that state only from a context checkpoint there, which it makes while it prefills
and which a slot save does not keep (llama.cpp issue 25913, open upstream).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import fleet_cache  # noqa: E402
import httpx  # noqa: E402
from fleet_cache import Session, agent_trace, send_turn  # noqa: E402
from fleet_cache_rollout import SERVE, SlotReplicas, _profile  # noqa: E402
from support.llama_replicas import MODEL_NAME, Replicas, write_model  # noqa: E402

from kimik3_reconciler.cli import fleet_warm  # noqa: E402
from kimik3_reconciler.fleet.warm import warm_record  # noqa: E402

FORCED = "forcing full prompt re-processing"


class OneReplica(SlotReplicas):
    """bench/fleet_cache_rollout.py's replica, one, under its own container name (beside a running rollout bench)."""

    def __init__(self, model: Path, slots: Path) -> None:
        Replicas.__init__(self, model, count=1, prefix="k3restore", parallel=SERVE["parallel"])
        self.slots = slots

    def forced(self) -> int:
        log = subprocess.run(["docker", "logs", self.names[0]], capture_output=True, text=True).stderr
        return log.count(FORCED)


def turn(replica: OneReplica, session: Session, index: int, label: str) -> None:
    with httpx.Client(timeout=600) as client:  # a connection per request (llama-server closes one after a stream)
        done = send_turn(client, replica.urls[0], session, index, 8)
    print(
        f"{label:44} status {done.status} cache_n {done.cached} prompt_n {done.evaluated}; server's forced "
        f"re-prefills so far: {replica.forced()}",
        flush=True,
    )


def main() -> None:
    fleet_cache.MODEL_NAME = MODEL_NAME
    work = Path(tempfile.mkdtemp(prefix="k3restore-"))
    model = write_model(work / "model")
    first, second, third = [s for s in agent_trace(6, 2, 5, seed=7) if s.agent == 0][:3]
    profile = _profile()
    record = work / "fleet" / "rollout.json"
    fleet_warm._write(fleet_warm._path(record, "h"), warm_record(profile))
    with OneReplica(model, work / "slots") as replica:
        url = replica.urls[0]
        turn(replica, first, 0, "A turn 1, fresh server")
        turn(replica, first, 1, "A turn 2, same server")
        turn(replica, second, 0, "B turn 1 (A's agent), same server")
        print(fleet_warm.save_before_swap(record, "h", url, profile, 0), flush=True)
        replica.restart(0)
        print(f"restored: {fleet_warm.warm_after_swap(record, 'h', url, profile, ())}", flush=True)
        turn(replica, third, 0, "C turn 1 (A's agent, new), after the restore")
        turn(replica, second, 1, "B turn 2, after the restore")
        turn(replica, first, 2, "A turn 3, after the restore")
        replica.restart(0)
        turn(replica, first, 3, "A turn 4, after a cold replacement")


if __name__ == "__main__":
    main()
