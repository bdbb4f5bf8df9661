"""Issue 27 item 7: image builds are timed and recorded per host and variant, full compiles apart from builds that
Docker's layer cache answered; the plan predicts the next build from them (else from a stated default). The records
are statistics: one that cannot be written warns and the build stands."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fakes import FakeClock, FakeDocker, MemoryState
from support.observed import observed
from support.payloads import local_build
from test_load_watch import Recorder
from test_plan_cases import BASE, merge, profile_of

from kimik3_reconciler.engines.llamacpp.build_time import build_cost, predicted_build
from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.model.records import build_time_key
from kimik3_reconciler.observe import _build_seconds
from kimik3_reconciler.observe.build_log import compiled
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.image import build_image

MAKE_LOG = [
    "Step 9/14 : RUN cmake -S /src -B /build",
    " ---> Running in 3f2a",
    "-- Configuring done",
    "[  3%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o",
    "[100%] Linking CXX executable ../../bin/llama-server",
]
NINJA_LOG = ["[17/230] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/fattn.cu.o"]
CACHED_LOG = [
    "Step 9/14 : RUN cmake -S /src -B /build",
    " ---> Using cache",
    " ---> 5d1c0a9b2e11",
    "Successfully built 5d1c0a9b2e11",
]


class TimedDocker(FakeDocker):
    """A docker build that takes `seconds` on the fake clock and prints `log`."""

    def __init__(self, clock: FakeClock, seconds: float, log: list[str]):
        super().__init__()
        self.clock, self.seconds, self.log = clock, seconds, log

    def build_image(self, spec, context_files, on_line) -> str:  # noqa: ANN001 - the port's signature
        for line in self.log:
            on_line(line)
        self.clock.sleep(self.seconds)
        return super().build_image(spec, context_files, on_line)


def _build(
    tmp_path: Path,
    seconds: float,
    log: list[str],
    variant: str = "cpu",
    this_host: bool = True,
    state: MemoryState | None = None,
) -> tuple[MemoryState, Recorder]:
    clock = FakeClock()
    state = state or MemoryState(tmp_path / "state")
    ports = Ports(docker=TimedDocker(clock, seconds, log), hub=None, http=None, host=None, state=state, clock=clock)
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    spec = local_build(tmp_path, variant=variant)
    reporter = Recorder()
    build_image(spec, ports, reporter, this_host=this_host)
    return state, reporter


def test_the_build_log_tells_a_compile_from_the_layer_cache() -> None:
    assert compiled(MAKE_LOG) and compiled(NINJA_LOG)
    assert not compiled(CACHED_LOG)
    assert not compiled(["[warning] Building is slow", "Step 1/2 : FROM b:1"])


def test_a_full_compile_is_recorded_for_its_variant(tmp_path: Path) -> None:
    state, reporter = _build(tmp_path, 481.0, MAKE_LOG, variant="cpu")
    record = state.records[build_time_key("cpu", cached=False)]
    assert record["seconds"] == 481.0 and record["fingerprint"] == "fp1" and record["date"].startswith("2026-01-01")
    assert build_time_key("cpu", cached=True) not in state.records
    assert ("built", {"image": "kimi-k3-llamacpp:x", "seconds": 481.0, "compile": "full"}) in reporter.events


def test_a_cached_build_never_stands_for_a_compile(tmp_path: Path) -> None:
    state = MemoryState(tmp_path / "state")
    state.write(build_time_key("cuda", cached=False), {"seconds": 3000.0})
    _build(tmp_path, 2.0, CACHED_LOG, variant="cuda", state=state)
    assert state.records[build_time_key("cuda", cached=False)] == {"seconds": 3000.0}  # the compile's figure stays
    assert state.records[build_time_key("cuda", cached=True)]["seconds"] == 2.0


def test_a_record_that_cannot_be_written_warns_and_the_build_stands(tmp_path: Path) -> None:
    state = MemoryState(tmp_path / "state")
    original = state.write

    def refuse_build_times(key: str, value: dict) -> None:
        if key.startswith("host/build-time-"):
            raise OSError(28, "No space left on device", f"state/{key}")
        original(key, value)

    state.write = refuse_build_times  # type: ignore[method-assign]
    state, reporter = _build(tmp_path, 10.0, MAKE_LOG, state=state)
    warnings = [fields for name, fields in reporter.events if name == "warning"]
    assert warnings and warnings[0]["record"] == build_time_key("cpu", cached=False)
    assert "statistic not recorded" in warnings[0]["consequence"]


def test_a_workers_build_is_not_this_hosts_statistic(tmp_path: Path) -> None:
    state, _ = _build(tmp_path, 600.0, MAKE_LOG, this_host=False)
    assert not any(key.startswith("host/build-time-") for key in state.records)


@pytest.mark.parametrize(
    "record, seconds",
    [
        ({"seconds": 412.5}, 412.5),
        ({"seconds": 0}, 0.0),
        ({"seconds": "412"}, None),
        ({"seconds": True}, None),
        ({"seconds": -3}, None),
        ({}, None),
        (None, None),
    ],
)
def test_an_edited_record_counts_as_absent(tmp_path: Path, record: dict | None, seconds: float | None) -> None:
    state = MemoryState(tmp_path)
    if record is not None:
        state.write(build_time_key("cuda", cached=False), record)
    ports = Ports(docker=None, hub=None, http=None, host=None, state=state, clock=FakeClock())
    assert _build_seconds(ports, build_time_key("cuda", cached=False)) == seconds


def test_the_prediction_prefers_what_this_host_measured() -> None:
    profile = profile_of(merge(BASE, {}))
    host = HostFacts(physical_cores=64, logical_cpus=128)
    seconds, how = predicted_build(profile, observed(profile, host=host))
    assert seconds == 271.0 and "default" in how and "scaled" not in how  # more CPUs are not promised as faster
    seconds, how = predicted_build(profile, observed(profile, host=host, build_time=1234.0))
    assert seconds == 1234.0 and "measured" not in how and "last full compile of the cuda image here" in how
    assert "layer cache" not in build_cost(profile, observed(profile, host=host))


def test_the_cpu_default_scales_to_fewer_cpus() -> None:
    profile = profile_of(merge(BASE, {"build": {"variant": "cpu", "cpu_features": []}, "gpus": "none"}))
    seconds, how = predicted_build(profile, observed(profile, host=HostFacts(physical_cores=1, logical_cpus=1)))
    assert seconds == 960.0 and "scaled to this host's 1 CPUs" in how
    assert "CUDA architectures" not in how
