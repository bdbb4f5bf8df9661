"""Records an older kimik3 wrote, rebuilt from what is on the host, are migrated without counting as a pending change
(issue 38 item 3): the first plan after an upgrade found the quant's layout record without `context_length` and
`state_bytes_per_slot` (added after it was written) and said `~ model … record the quant's layout`, so
`plan --detailed-exitcode` exited 4 once, which a GitOps check reads as drift.

The fixture tests/fixtures/records/demo-layout-before-context.json is what kimik3 at a169c5c^ (the commit before
`context_length`) recorded for the demo's UD-Q2_K_XL shards (kimik3_reconciler.engines.llamacpp.smoke_model.write_tiny_kimi_k3,
2 shards, seed 0): its `summarize` run over those files' headers. Here the same shards sit in the fake hub's cache."""

from __future__ import annotations

import json
from pathlib import Path

from support.fakes import converged_fake

from kimik3_reconciler.engines.llamacpp.smoke_model import write_tiny_kimi_k3
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.records import layout_key

OLD_RECORD = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "records" / "demo-layout-before-context.json").read_text()
)


def demo_shards(tmp_path: Path) -> dict[str, bytes]:
    written = write_tiny_kimi_k3(tmp_path / "made", "Kimi-K3-tiny-UD-Q2_K_XL", shards=2, seed=0)
    return {f"UD-Q2_K_XL/{path.name}": path.read_bytes() for path in written}


def test_an_older_layout_record_is_rebuilt_without_a_pending_change_and_the_next_apply_keeps_it(tmp_path: Path) -> None:
    orchestrator, docker, _, profile = converged_fake(tmp_path, demo_shards(tmp_path))
    key = layout_key("org/k3", profile.profile.model.revision, "UD-Q2_K_XL")
    current = orchestrator.ports.state.read(key)
    assert current is not None and {**OLD_RECORD, "context_length": 4096, "state_bytes_per_slot": 12800} == current
    orchestrator.ports.state.write(key, OLD_RECORD)  # the host as the older kimik3 left it

    upgraded = orchestrator.plan(profile)
    assert upgraded.converged and upgraded.changes == ()  # `plan --detailed-exitcode`: 0, not 4
    model = next(s for s in upgraded.steps if s.kind == "model")
    assert model.action is Action.NOOP and "in an older kimik3's shape: rebuilt" in model.reason
    assert orchestrator.ports.state.read(key) == OLD_RECORD  # a plan writes nothing

    calls = len(docker.calls)
    result = orchestrator.apply_or_revert(profile, lambda: None)
    assert not result.changed and docker.calls[calls:] == []  # nothing built, run, stopped or removed
    assert orchestrator.ports.state.read(key) == current  # migrated: the record in today's shape
    assert orchestrator.observe(profile).layout_recorded  # later plans read the record, not every shard's header
