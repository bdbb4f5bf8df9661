"""`kimik3 verify FILE` refuses a running container that is not FILE's current deployment, naming the fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports, gguf_bytes

from kimik3_reconciler.errors import VerifyFailed
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.weights import RANDOM_WEIGHTS, WEIGHTS_KEY
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter
from kimik3_reconciler.verify import verify

# random weights: this test is about which container runs, not about what the model says
FILES = {
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": gguf_bytes({WEIGHTS_KEY: RANDOM_WEIGHTS}),
    "UD-Q4_K_XL/k3-UD-Q4_K_XL-00001-of-00001.gguf": b"other-quant",
}


def test_verify_of_another_quant_than_the_deployed_one_fails_naming_model_quant(tmp_path: Path) -> None:
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    orchestrator = Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    orchestrator.apply(parse_profile(FAKE_PROFILE, "deployed.yaml"))
    assert verify(orchestrator, parse_profile(FAKE_PROFILE, "deployed.yaml")).ok
    asked = len(ports.chat.requests)
    other = parse_profile(FAKE_PROFILE.replace("quant: UD-Q2_K_XL", "quant: UD-Q4_K_XL"), "other.yaml")
    with pytest.raises(
        VerifyFailed,
        match=r"k3-test: the running container is not this profile's current deployment "
        r"\(other.yaml\): .*model.quant: UD-Q2_K_XL → UD-Q4_K_XL",
    ) as failed:
        verify(orchestrator, other)
    assert failed.value.exit_code == 1 and "run `kimik3 apply other.yaml`" in str(failed.value)
    assert len(ports.chat.requests) == asked  # no check ran against the wrong server
