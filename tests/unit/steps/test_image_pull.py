"""The image by digest (issue 25 §2): the ref parsed and a tag alone refused; the plan NOOP when the digest is
here, else a pull priced from the registry's manifest (or "unknown size" saying why); the step pulls through
docker, refuses an image without the digest and names image.ref in every failure. The real registry:
tests/integration/test_image_pull_registry.py."""

from __future__ import annotations

from typing import Any

import pytest
from support.fakes.docker import FakeDocker
from support.fakes.state import FakeClock

from kimik3_reconciler.adapters.registry import _challenge, manifest_bytes, platform_digest
from kimik3_reconciler.errors import PermanentError, PlanError, TransientError
from kimik3_reconciler.model.facts import PulledImageFact
from kimik3_reconciler.model.image_ref import pinned_image
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.specs import ImagePull
from kimik3_reconciler.observe.pulled_image import collect_pulled
from kimik3_reconciler.planning.image_pull import plan_pull, pull_spec
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps import EXECUTORS
from kimik3_reconciler.steps.image_pull import pull_image
from kimik3_reconciler.steps.report import NullReporter

DIGEST = "sha256:" + "ab" * 32
VLLM = f"vllm/vllm-openai:kimi-k3@{DIGEST}"


class EventLog(NullReporter):
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def event(self, name: str, **fields: object) -> None:
        self.events.append((name, fields))


def test_refs_parse_as_docker_names_them() -> None:
    hub = pinned_image(VLLM)
    assert (hub.registry, hub.repository, hub.tag, hub.digest) == ("docker.io", "vllm/vllm-openai", "kimi-k3", DIGEST)
    assert hub.by_digest == f"vllm/vllm-openai@{DIGEST}" and hub.api_host == "registry-1.docker.io"
    official = pinned_image(f"ubuntu@{DIGEST}")
    assert official.repository == "library/ubuntu" and official.by_digest == f"ubuntu@{DIGEST}"
    local = pinned_image(f"127.0.0.1:5123/kimik3/tiny:v1@{DIGEST}")
    assert (local.registry, local.repository, local.tag) == ("127.0.0.1:5123", "kimik3/tiny", "v1")
    assert local.loopback and local.by_digest == f"127.0.0.1:5123/kimik3/tiny@{DIGEST}"
    assert not pinned_image(f"ghcr.io/org/img@{DIGEST}").loopback


@pytest.mark.parametrize(
    "ref, says",
    [
        ("vllm/vllm-openai:kimi-k3", "names no digest"),
        ("vllm/vllm-openai@sha256:abc", "is not a sha256 digest"),
        (f"Vllm/Upper@{DIGEST}", "not a valid image repository"),
    ],
)
def test_a_ref_without_a_digest_is_refused_naming_the_field(ref: str, says: str) -> None:
    with pytest.raises(PlanError) as refused:
        pull_spec(ref)
    assert str(refused.value).startswith("image.ref: ") and says in str(refused.value)
    assert refused.value.fields == (("image", "ref"),) and refused.value.exit_code == 3


def test_plan_is_a_noop_when_the_digest_is_here_and_a_priced_pull_when_not() -> None:
    here = plan_pull(PulledImageFact(ref=VLLM, digest=DIGEST, image_id="sha256:" + "cd" * 32))
    assert [s.action for s in here] == [Action.NOOP] and "nothing to pull" in here[0].reason
    priced = plan_pull(PulledImageFact(ref=VLLM, digest=DIGEST, pull_bytes=12 << 30))
    assert priced[0].action is Action.CREATE and priced[0].cost.startswith("12.0 GiB to pull")
    assert priced[0].spec == ImagePull(ref=VLLM, by_digest=f"vllm/vllm-openai@{DIGEST}", digest=DIGEST)
    unknown = plan_pull(PulledImageFact(ref=VLLM, digest=DIGEST, size_unknown="registry x not reachable"))
    assert unknown[0].cost == "unknown size (registry x not reachable)"
    assert type(unknown[0].spec) in EXECUTORS  # the plan is executable


class Registry:
    def __init__(self, size: int | None = None, error: Exception | None = None):
        self.size, self.error, self.asked = size, error, []

    def pull_bytes(self, ref: str) -> int:
        self.asked.append(ref)
        if self.error:
            raise self.error
        assert self.size is not None
        return self.size


def test_observation_asks_the_registry_only_for_an_absent_image() -> None:
    docker, registry = FakeDocker(), Registry(size=5 << 20)
    absent = collect_pulled(VLLM, docker, registry)
    assert (absent.image_id, absent.pull_bytes, registry.asked) == (None, 5 << 20, [VLLM])
    docker.pull_image(f"vllm/vllm-openai@{DIGEST}")
    present = collect_pulled(VLLM, docker, registry)
    assert present.image_id is not None and registry.asked == [VLLM]  # no second registry request
    down = collect_pulled(f"ghcr.io/o/i@{DIGEST}", FakeDocker(), Registry(error=TransientError("registry down")))
    assert down.pull_bytes is None and down.size_unknown == "registry down"


def _ports(docker: Any) -> Ports:
    return Ports(docker=docker, hub=None, http=None, host=None, state=None, clock=FakeClock())  # type: ignore[arg-type]


def test_the_step_pulls_by_digest_once_then_finds_it() -> None:
    docker, log = FakeDocker(), EventLog()
    spec = pull_spec(VLLM)
    pull_image(spec, _ports(docker), log)
    pull_image(spec, _ports(docker), log)
    assert docker.calls == [f"pull vllm/vllm-openai@{DIGEST}"]
    assert [name for name, _ in log.events] == ["pull", "pulled", "present"]


class RewritingDocker(FakeDocker):
    """A daemon (or a mirror in front of it) that hands back an image under another digest."""

    def pull_image(self, ref: str, on_progress: Any = None, on_retry: Any = None) -> str:
        image_id = super().pull_image(ref, on_progress)
        self.base_digests[ref] = "sha256:" + "ee" * 32
        return image_id


class FailingDocker(FakeDocker):
    def pull_image(self, ref: str, on_progress: Any = None, on_retry: Any = None) -> str:
        raise PermanentError("manifest unknown")


def test_the_step_refuses_an_image_without_the_digest_and_names_the_ref() -> None:
    with pytest.raises(PermanentError) as wrong:
        pull_image(pull_spec(VLLM), _ports(RewritingDocker()), NullReporter())
    assert f"image.ref {VLLM}: the pulled image does not carry {DIGEST}" in str(wrong.value)
    with pytest.raises(PermanentError) as failed:
        pull_image(pull_spec(VLLM), _ports(FailingDocker()), NullReporter())
    assert str(failed.value) == f"image.ref {VLLM}: pulling vllm/vllm-openai@{DIGEST} failed: manifest unknown"


def test_registry_manifests_are_summed_for_this_platform() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:att", "platform": {"os": "unknown", "architecture": "unknown"}},
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    assert platform_digest(index, "amd64") == "sha256:amd" and platform_digest(index, "s390x") is None
    assert manifest_bytes({"config": {"size": 10}, "layers": [{"size": 100}, {"size": 1000}]}) == 1110
    challenge = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull"'
    assert _challenge(challenge) == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:a/b:pull",
    }


def test_destroy_removes_a_pulled_image_only_when_asked_and_unused() -> None:
    from kimik3_reconciler.model.facts import ContainerFact
    from kimik3_reconciler.model.specs import RemoveImage
    from kimik3_reconciler.planning.image_pull import plan_pulled_removal

    here = PulledImageFact(ref=VLLM, digest=DIGEST, image_id="sha256:" + "cd" * 32)
    assert plan_pulled_removal(here, remove=False).reason == "kept (pass --images to remove)"
    removed = plan_pulled_removal(here, remove=True)
    assert removed.action is Action.DELETE and removed.spec == RemoveImage(f"vllm/vllm-openai@{DIGEST}")
    other = ContainerFact(id="c1", name="k3-other", state="running", image_id=here.image_id)
    shared = plan_pulled_removal(here, remove=True, others=(other,))
    assert shared.action is Action.NOOP and "k3-other" in shared.reason
    absent = plan_pulled_removal(PulledImageFact(ref=VLLM, digest=DIGEST), remove=True)
    assert absent.action is Action.NOOP


def test_status_and_prune_speak_of_the_digest_for_a_pulled_image() -> None:
    from support.observed import observed

    from kimik3_reconciler.model.profile_source import parse_profile
    from kimik3_reconciler.planning import plan_prune, profile_images

    profile = parse_profile(
        "apiVersion: kimik3/v1\nname: k3\nmodel: {repo: unsloth/Kimi-K3-GGUF, revision: "
        + "0a" * 20
        + ", quant: UD-Q2_K_XL}\n"
    ).profile
    absent = observed(profile, pulled=PulledImageFact(ref=VLLM, digest=DIGEST))
    assert profile_images(profile, absent) == (f"{VLLM} (pulled by digest)", ["not pulled yet"])
    here = observed(profile, pulled=PulledImageFact(ref=VLLM, digest=DIGEST, image_id="sha256:" + "cd" * 32))
    assert profile_images(profile, here)[1] == ["sha256:cdcdcdcdcdcd (current)"]
    assert [s.action for s in plan_prune(profile, here).steps] == [Action.NOOP]
