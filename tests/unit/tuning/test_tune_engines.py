"""`kimik3 tune` on an engine whose knobs live in its own section (engine: vllm -> `vllm:`, sglang -> `sglang:`):
the space names them, `--space` takes them (and refuses llama.cpp's), a candidate is written into that section
(comments kept, a section the profile left to its defaults added), the running values are read from the
container's launch inputs, and bench talks the engine's wire. The search itself is engine-blind (test_tune.py);
tests/integration/test_vllm_docker.py runs it (and bench) against a real vLLM server."""

from __future__ import annotations

import pytest
from support.fakes.load import FakeLoad
from support.observed import observed
from support.profiles import VLLM_CPU_HEAD

from kimik3_reconciler.benchmark import sweep_levels
from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.bench import BenchSettings
from kimik3_reconciler.model.facts import ContainerFact, HostFacts
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.tuning import parse_space
from kimik3_reconciler.planning.tune_space import candidate_text, check_candidate, default_space
from kimik3_reconciler.tuning.session import running_knobs
from kimik3_reconciler.verify.checks import Server

HOST = HostFacts(physical_cores=16, cpu_flags=("avx512f",))
VLLM = (
    VLLM_CPU_HEAD
    + """vllm:
  tensor_parallel_size: 1
  max_model_len: 512        # the tiny model's
  max_num_seqs: 2           # as written
  kv_cache_dtype: auto
  attention_backend: null
  attention_config: null
  prefix_match_unit: null
  enforce_eager: true
  v2_model_runner: false
"""
)


def test_the_vllm_space_is_its_sections_knobs_around_the_written_values() -> None:
    profile = parse_profile(VLLM, "v.yaml").profile
    engine = engine_for("vllm")
    assert engine.tune_knobs.section == "vllm" and engine.load_wire == "openai"
    space = default_space(engine, profile, observed(profile, host=HOST))
    assert space["max_num_seqs"] == (2, 64, 128, 256, 512)  # the written 2 among them
    assert set(space) == {"max_num_seqs", "max_num_batched_tokens"}  # gpus: none: no memory share to search
    assert set(engine.tune_knobs.names) >= set(space)


def test_space_takes_the_engines_knobs_and_refuses_the_others_naming_the_section() -> None:
    vllm = engine_for("vllm").tune_knobs
    assert parse_space(("max_num_seqs=2,8", "gpu_memory_utilization=0.9,1"), vllm) == {
        "max_num_seqs": (2, 8),
        "gpu_memory_utilization": (0.9, 1.0),
    }
    assert isinstance(parse_space(("gpu_memory_utilization=1",), vllm)["gpu_memory_utilization"][0], float)
    with pytest.raises(InputError) as llama_knob:
        parse_space(("ubatch=512",), vllm)
    assert "max_num_seqs" in str(llama_knob.value) and "vllm.<knob>" in str(llama_knob.value)
    for bad, said in (
        ("gpu_memory_utilization=1.5", "vllm.gpu_memory_utilization"),
        ("max_num_seqs=0", "vllm.max_num_seqs"),
        ("max_num_seqs=2.5", "max_num_seqs=2.5"),
        ("max_num_seqs=many", "takes numbers"),
    ):
        with pytest.raises(InputError) as caught:
            parse_space((bad,), vllm)
        assert said in str(caught.value) and caught.value.exit_code == 2
    with pytest.raises(InputError):  # llama.cpp's knobs are refused on SGLang too: its section has its own
        parse_space(("parallel=2",), engine_for("sglang").tune_knobs)


def test_fit_is_taken_by_the_knobs_the_engine_calls_automatic_and_by_no_other() -> None:
    # Was: only a knob named n_cpu_moe took `fit` (model/tuning.py named llama.cpp's knob); now the engine's
    # TuneKnobs.automatic says which knobs leave their value to the engine.
    vllm = engine_for("vllm").tune_knobs
    with pytest.raises(InputError, match="takes numbers"):
        parse_space(("max_num_seqs=fit,8",), vllm)
    automatic = vllm._replace(automatic=("max_num_seqs",))
    assert parse_space(("max_num_seqs=fit,8",), automatic) == {"max_num_seqs": ("fit", 8)}


def test_a_vllm_candidate_is_written_into_the_vllm_section_keeping_comments() -> None:
    base = parse_profile(VLLM, "v.yaml")
    text = candidate_text(
        base.text,
        base.profile,
        {"max_num_seqs": 8, "max_num_batched_tokens": 2048},
        note="kimik3 tune: 9.0 tok/s, was 6.0",
    )
    assert "  max_num_seqs: 8           # as written" in text and "  max_model_len: 512        # the tiny" in text
    assert "# kimik3 tune: 9.0 tok/s, was 6.0\nvllm:" in text and "ubatch" not in text
    tuned = parse_profile(text, "v.yaml").profile
    assert (tuned.vllm.max_num_seqs, tuned.vllm.max_num_batched_tokens) == (8, 2048)
    assert tuned.serve == base.profile.serve  # nothing of llama.cpp's section moved


def test_a_profile_without_its_engine_section_gets_one() -> None:
    text = VLLM.split("vllm:\n")[0]  # engine: vllm on seed 001's defaults
    base = parse_profile(text, "v.yaml")
    written = candidate_text(text, base.profile, {"max_num_seqs": 64})
    assert parse_profile(written, "v.yaml").profile.vllm.max_num_seqs == 64


def test_a_vllm_candidate_is_checked_like_any_other_before_a_load() -> None:
    base = parse_profile(VLLM, "v.yaml")
    facts = observed(base.profile, host=HOST)
    ok = check_candidate(base.text, base.profile, {"max_num_seqs": 8}, facts, 256)
    assert ok.loaded is not None and ok.loaded.profile.vllm.max_num_seqs == 8
    refused = check_candidate(base.text, base.profile, {"gpu_memory_utilization": 2}, facts, 256)
    assert refused.loaded is None and "gpu_memory_utilization" in refused.refusal
    # a bench request longer than max_model_len: vLLM would answer every request 400 after a load of minutes
    long = check_candidate(base.text, base.profile, {"max_num_seqs": 8}, facts, 1000)
    assert long.loaded is None and long.refusal == "vllm.max_model_len = 512 tokens, a request needs 1000"


def test_the_running_values_are_read_from_the_sections_launch_inputs() -> None:
    profile = parse_profile(VLLM, "v.yaml").profile
    container = ContainerFact(
        id="c1",
        name="k3",
        state="running",
        inputs={"vllm.max_num_seqs": 2, "vllm.max_num_batched_tokens": None, "serve.ubatch": 9},
    )
    facts = observed(profile, host=HOST, container=container)
    assert running_knobs(
        {"max_num_seqs": (2, 8), "max_num_batched_tokens": (2048,)}, facts, engine_for("vllm").tune_knobs
    ) == {
        "max_num_seqs": 2,
        "max_num_batched_tokens": None,
    }


def test_bench_drives_the_engines_wire() -> None:
    load = FakeLoad()
    settings = BenchSettings(grid=(1,), prompts=1, prompt_tokens=8, output_tokens=4, repetitions=1)
    levels = sweep_levels(
        load, Server("http://127.0.0.1:1", None), settings, engine_for("vllm").series, wire=engine_for("vllm").load_wire
    )
    assert load.wires == {"openai"}
    assert levels[0].metrics_tokens == levels[0].client_tokens == 4  # vLLM's labelled counter read and diffed


def test_a_checkpoints_predicted_load_is_this_hosts_last_load_of_its_container() -> None:
    """A vLLM checkpoint has no GGUF layout, so no placement forecast: tune's predicted time takes the health
    wait's record of the container's last load (0 before any), not 0 for every draw as it did."""
    from types import SimpleNamespace

    from support.fakes import MemoryState

    from kimik3_reconciler.model.records import load_key
    from kimik3_reconciler.tuning.runner import DockerRunner

    loaded = parse_profile(VLLM, "v.yaml")
    state = MemoryState()
    runner = DockerRunner(SimpleNamespace(ports=SimpleNamespace(state=state)))  # type: ignore[arg-type]
    facts = observed(loaded.profile, host=HOST)
    assert runner.load_seconds(loaded, facts) == 0.0  # never loaded here
    size = facts.model.total_bytes
    state.write(load_key(loaded.profile.name), {"bytes": size, "seconds": 31.5, "cache": "cold"})
    assert runner.load_seconds(loaded, facts) == 31.5
    # a record of another model under the same name (the profile's model changed): its rate, this model's bytes
    state.write(load_key(loaded.profile.name), {"bytes": size // 2, "seconds": 31.5, "cache": "cold"})
    assert runner.load_seconds(loaded, facts) == pytest.approx(63.0, rel=1e-3)
