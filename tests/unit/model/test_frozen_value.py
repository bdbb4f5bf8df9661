"""Payloads (`@frozen_value`, model/specs.py) compare, hash and print as @dataclass(frozen=True) would make
them: each sample payload against a twin class that dataclass generates from the same fields; facts and
profile values (model/frozen.py) are frozen and convert what pydantic's lax mode converted."""

from __future__ import annotations

import dataclasses

import pytest
from test_plan_file import SAMPLES

from kimik3_reconciler.engines.llamacpp.sizing import manual_split
from kimik3_reconciler.model.facts import DockerGpus, GpuFact, GpuPlumbing, HostFacts, RunningConfig
from kimik3_reconciler.model.profile import ServeSpec, from_tree


def _generated_twin(payload: object) -> object:
    cls = type(payload)
    twin_class = dataclasses.dataclass(frozen=True)(
        type(
            cls.__name__,
            (),
            {
                "__annotations__": {f.name: f.type for f in dataclasses.fields(payload)},
                "__qualname__": cls.__qualname__,
            },
        )
    )
    return twin_class(**{f.name: getattr(payload, f.name) for f in dataclasses.fields(payload)})


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_a_payload_behaves_as_a_generated_dataclass(payload: object) -> None:
    twin = _generated_twin(payload)
    assert repr(payload) == repr(twin)
    try:
        expected = hash(twin)
    except TypeError:  # a dict field: unhashable either way
        with pytest.raises(TypeError):
            hash(payload)
    else:
        assert hash(payload) == expected
    first = dataclasses.fields(payload)[0].name
    assert payload == dataclasses.replace(payload) and payload != twin  # another class is never equal
    changed = dataclasses.replace(payload, **{first: None})
    assert changed != payload and (changed == payload) is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(payload, first, None)


def test_facts_and_profile_values_are_frozen_and_convert_input_as_pydantic_did() -> None:
    host = HostFacts(
        cpu_flags=["avx2"],
        gpus=[
            {
                "index": 0,
                "uuid": "GPU-1",
                "name": "H200",
                "compute_capability": [9, 0],
                "memory_total": 1,
                "memory_free": 1,
            }
        ],
    )
    assert host.cpu_flags == ("avx2",) and host.gpus == (
        GpuFact(index=0, uuid="GPU-1", name="H200", compute_capability=(9, 0), memory_total=1, memory_free=1),
    )
    assert hash(host) == hash(HostFacts.model_validate(host.model_dump()))
    with pytest.raises(AttributeError):
        host.sockets = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="unknown field"):
        HostFacts(cores=2)
    running = RunningConfig(image="x", command=("--api-key", "k"), env=(("HF_TOKEN", "t"),))
    assert running.model_dump(mode="json")["command"] == ["--api-key", "(secret)"]
    assert running.model_dump(mode="json")["env"] == [["HF_TOKEN", "(hidden)"]]
    assert running.model_dump()["env"] == (("HF_TOKEN", "t"),)  # python mode: as held
    serve = from_tree({"@model": "ServeSpec", "fields": {"port": 8080, "n_cpu_moe": None, "extra_args": []}})
    assert isinstance(serve, ServeSpec) and not manual_split(serve)
    assert manual_split(serve.model_copy(update={"n_cpu_moe": 3})) and serve.n_cpu_moe is None


def test_a_fact_that_extends_another_keeps_its_defaults_and_may_override_one() -> None:
    """GpuPlumbing extends DockerGpus (the head's plumbing is a node's plus what the head's files show): the
    parent's defaults hold for the child, and the child's own default for `hook` (seen on the head) wins."""
    head = GpuPlumbing(toolkit_version="1.18.0")
    assert (head.runtime, head.reads_cdi, head.cdi_devices, head.hook, head.cdi_specs) == (
        False,
        False,
        None,
        False,
        (),
    )
    assert DockerGpus().hook is None  # a node's hook: unseen
    assert GpuPlumbing(cdi_devices=["nvidia.com/gpu=0"]).cdi_devices == ("nvidia.com/gpu=0",)
