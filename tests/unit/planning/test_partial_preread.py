"""Issue 27 item 6: pre-read what fits. When the model and the reserve do not fit MemAvailable, the plan reads the
first MemAvailable − reserve bytes of the files in order (the start the new server reads first), says what the
load still reads from disk, and predicts the downtime from both parts; the adapter reads exactly that prefix (real
files, mincore), the step reads only what the cache lacks of it, and a partly warm load updates neither load-rate
record. The plan's words are in the case files (94, 127, 128)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.fakes import FakeHost
from support.observed import model_fact, observed
from support.page_cache_reads import read_until
from test_load_watch import Recorder, _Docker, _Http, _ports
from test_plan_cases import CASES, build_case

from kimik3_reconciler.adapters import page_cache
from kimik3_reconciler.model.records import LOAD_RATE_KEY, WARM_LOAD_RATE_KEY
from kimik3_reconciler.model.specs import HealthWait, PagecachePreread
from kimik3_reconciler.planning import plan
from kimik3_reconciler.planning.basis import payload_edits
from kimik3_reconciler.planning.health_step import predicted_load_s, predicted_partial_load_s
from kimik3_reconciler.planning.preread_step import PAGE, partial_budget, reserve_bytes
from kimik3_reconciler.steps.health import wait_until_healthy
from kimik3_reconciler.steps.preread import preread_model

GIB = 1 << 30


def test_the_budget_is_what_fits_beside_the_reserve_in_whole_pages() -> None:
    size, reserve = 80 * GIB, 12 * GIB
    assert partial_budget(100 * GIB, reserve, size) is None  # it all fits: the whole pre-read, not a part
    room = 60 * GIB + 1234
    assert partial_budget(room, reserve, size) == 48 * GIB  # less the reserve, down to a page
    assert partial_budget(reserve + GIB - PAGE, reserve, size) is None  # under 1 GiB of an 80 GiB model
    # a small model: a tenth of it is enough to plan for (the demo's 2.4 MB model in the integration test)
    assert partial_budget(reserve + 300_000, reserve, 2_400_000) == 300_000 - 300_000 % PAGE
    assert partial_budget(reserve + 200_000, reserve, 2_400_000) is None
    assert partial_budget(None, reserve, size) is None  # memory not observed


def _files(tmp_path: Path, sizes: list[int]) -> list[str]:
    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"k3-0000{i + 1}.gguf"
        path.write_bytes(bytes([i + 1]) * size)
        paths.append(str(path))
    return paths


def test_the_adapter_reads_the_first_bytes_of_the_files_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real files and the real page cache: the prefix is read, chunk by chunk, and nothing past it."""
    monkeypatch.setattr(page_cache, "CHUNK", 64 << 10)
    paths = _files(tmp_path, [200 << 10, 200 << 10, 200 << 10])
    assert list(page_cache._chunks(paths, 300 << 10)) == [
        (paths[0], 0, 64 << 10),
        (paths[0], 64 << 10, 64 << 10),
        (paths[0], 128 << 10, 64 << 10),
        (paths[0], 192 << 10, 8 << 10),
        (paths[1], 0, 64 << 10),
        (paths[1], 64 << 10, 36 << 10),
    ]
    seen: list[int] = []

    def read() -> None:  # each try from an empty cache: a pre-read that misses pages cannot pass by adding up tries
        for path in paths:
            page_cache.evict(path)
        seen.clear()
        page_cache.preread(paths, 3, seen.append, limit=300 << 10)
        assert sum(seen) == 300 << 10

    # the first file whole, the second at least its first 100 KiB (readahead may bring in more of it)
    assert read_until(
        read,
        lambda: page_cache.resident_bytes(paths[0]) == 200 << 10 and page_cache.resident_bytes(paths[1]) >= 100 << 10,
    )
    assert page_cache.resident_bytes(paths[2]) == 0  # never opened for a read: readahead stops at a file's end


def _step_ports(tmp_path: Path) -> tuple[FakeHost, object]:
    host = FakeHost()
    return host, _ports(tmp_path, host, None, None)


def test_the_step_reads_only_the_prefix_and_says_how_much_of_it_the_cache_holds(tmp_path: Path) -> None:
    paths = _files(tmp_path, [1000, 1000, 1000])
    host, ports = _step_ports(tmp_path)
    reporter = Recorder()
    preread_model(PagecachePreread(tuple(paths), 3000, sizes=(1000, 1000, 1000), limit_bytes=1500), ports, reporter)
    assert host.preread_calls == [(paths[:2], 4)] and host.preread_limits == [1500]
    assert reporter.progress_calls[-1][1:3] == (1500, 1500)
    event = dict(reporter.events)["pre-read"]
    assert event["files"] == 2 and event["resident"] == "100.0 %" and event["read_files"] == 2
    assert "pre-read-short" not in dict(reporter.events)
    # Again, the first file still cached: only the second file's part is read, the limit counted over it alone.
    host2, ports2 = _step_ports(tmp_path)
    host2.cached = {paths[0]}
    preread_model(PagecachePreread(tuple(paths), 3000, sizes=(1000, 1000, 1000), limit_bytes=1500), ports2, Recorder())
    assert host2.preread_calls == [([paths[1]], 4)] and host2.preread_limits == [500]
    # And once the cache holds the whole prefix: nothing is read.
    reporter = Recorder()
    preread_model(PagecachePreread(tuple(paths), 3000, sizes=(1000, 1000, 1000), limit_bytes=1500), ports2, reporter)
    assert host2.preread_calls == [([paths[1]], 4)] and dict(reporter.events)["pre-read"]["read_files"] == 0


def test_the_partial_prediction_weighs_the_warm_and_the_cold_rate_by_the_bytes_cached() -> None:
    obs = observed(model=model_fact(shards=2, size=50 << 30)).model_copy(
        update={"load_rate": float(1 << 30), "warm_load_rate": float(4 << 30)}
    )
    cold, _ = predicted_load_s(obs)
    warm, _ = predicted_load_s(obs, warm=True)
    assert (cold, warm) == (100, 25)
    seconds, how = predicted_partial_load_s(obs, 40 << 30)  # 40 of 100 GiB cached
    assert seconds == pytest.approx(0.4 * 25 + 0.6 * 100)
    assert "40.0 GiB from the page cache" in how and "60.0 GiB from disk" in how and "measured here" in how
    assert predicted_partial_load_s(obs, 0)[0] == cold and predicted_partial_load_s(obs, 100 << 30)[0] == warm


def _case(name: str):
    profile, obs = build_case(yaml.safe_load((CASES / name).read_text()))
    return obs, {s.kind: s for s in plan(profile, obs).steps}


def test_the_plan_carries_the_part_and_the_health_step_predicts_from_it() -> None:
    obs, steps = _case("94-preread-ram-short.yaml")
    spec, wait = steps["preread"].spec, steps["health"].spec
    reserve = reserve_bytes(obs.host.ram_total)
    assert spec.limit_bytes == partial_budget(obs.host.ram_available, reserve, obs.model.total_bytes) > 0
    assert wait.partial_bytes == spec.limit_bytes and wait.warm
    # one prediction, said in both steps
    predicted = steps["health"].cost.split("predicted downtime ")[1].split(" (")[0]
    assert f"predicted downtime {predicted}" in steps["preread"].cost
    assert "against" in steps["preread"].cost and "cold" in steps["preread"].cost
    # a swap whose whole model fits keeps the whole pre-read: no limit, no partial wait
    _, whole = _case("93-preread-before-swap.yaml")
    assert whole["preread"].spec.limit_bytes is None and whole["health"].spec.partial_bytes is None


def test_a_partly_warm_load_updates_neither_load_rate(tmp_path: Path) -> None:
    host = FakeHost()
    ports = _ports(tmp_path, host, _Docker(), _Http(host))
    reporter = Recorder()
    wait_until_healthy(
        HealthWait("k3", "http://x/health", 600, model_bytes=12_000, warm=True, partial_bytes=6000), ports, reporter
    )
    assert ports.state.read(LOAD_RATE_KEY) is None and ports.state.read(WARM_LOAD_RATE_KEY) is None
    assert "neither cold nor warm" in dict(reporter.events)["load-rate-kept"]["why"]


def test_a_saved_partial_preread_is_no_edit_when_memory_moved_but_a_limit_past_the_model_is() -> None:
    """The cut follows MemAvailable, as the whole-or-none decision did: a saved plan runs its own. A limit
    outside the model's bytes was written by hand."""
    from dataclasses import replace

    from kimik3_reconciler.model.plan import Step

    obs, saved = _case("94-preread-ram-short.yaml")
    roomy = obs.model_copy(update={"host": obs.host.model_copy(update={"ram_available": 200 * GIB})})
    profile, _ = build_case(yaml.safe_load((CASES / "94-preread-ram-short.yaml").read_text()))
    now = plan(profile, roomy).steps
    assert {s.kind: s for s in now}["preread"].spec.limit_bytes is None
    assert payload_edits(tuple(saved.values()), now, roomy) == []
    step = saved["preread"]
    edited = Step(
        step.kind,
        step.target,
        step.action,
        step.reason,
        spec=replace(step.spec, limit_bytes=obs.model.total_bytes + 1),
        cost=step.cost,
    )
    moved = payload_edits((edited,), now, roomy)
    assert moved and "its pre-read differs" in moved[0]
