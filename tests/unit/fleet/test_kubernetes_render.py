"""`kimik3 fleet render --target kubernetes` (issue 41 item 2): the manifests of each shipped fleet example against a
golden file (regenerate with KIMIK3_UPDATE_GOLDEN=1 and review the diff), checked against the Kubernetes schemas
(`kubernetes-validate`) and the LeaderWorkerSet CRD's (tests/fixtures/kubernetes/, lws v0.10.0, with `jsonschema`);
a policy change moves exactly the fields it should; what a render cannot do without is refused at its line.
No API server runs here (shared/TESTING.md §12): scheduling, the GPU operator and the LWS controller are not tested."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from support.shipped import pinned_text

from kimik3_reconciler.cli import main
from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.targets.kubernetes import render_kubernetes
from kimik3_reconciler.fleet.targets.kubernetes_objects import manifest_yaml
from kimik3_reconciler.fleet.targets.kubernetes_router import smg_args

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "kubernetes"
LWS_SCHEMA = ROOT / "tests" / "fixtures" / "kubernetes" / "leaderworkerset-v1.schema.json"
# The shipped fleet examples that say how they run on Kubernetes (a `kubernetes:` section), and a vLLM TP8 fleet
# (tests/fixtures/kubernetes/fleet-vllm.yaml: not shipped, its profile is unpinned until `kimik3 pin`).
SHIPPED = sorted(p for p in (ROOT / "profiles").glob("fleet-*.yaml") if "\nkubernetes:" in p.read_text())
EXAMPLES = [
    *SHIPPED,
    ROOT / "tests" / "fixtures" / "kubernetes" / "fleet-vllm.yaml",
    # Two vLLM replicas over two hosts each (vllm.cluster): a LeaderWorkerSet group of two pods per replica.
    ROOT / "tests" / "fixtures" / "kubernetes" / "fleet-vllm-cluster.yaml",
]
# The oldest release the manifests are for (the preStop sleep action: beta, on by default, since 1.30) and the newest
# kubernetes-validate knows.
K8S_VERSIONS = ("1.30.0", "1.37.0")


def _pinned(path: str) -> str:
    """A profile as `kimik3 pin` leaves it (the test's commits and digests: support/shipped.py)."""
    return pinned_text(Path(path))


def _fleet(path: Path, text: str | None = None):  # noqa: ANN202 - fleet.Fleet
    return parse_fleet(path.read_text() if text is None else text, str(path), _pinned)


def _render(path: Path, text: str | None = None, rollout: str = "canary") -> dict[tuple[str, str], dict]:
    return {(m.kind, m.name): m.body for m in render_kubernetes(_fleet(path, text), rollout)}  # type: ignore[arg-type]


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: an API server prunes them silently, so a misspelt field would
    vanish instead of failing; kubernetes-validate's strict schemas do the same for core objects."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k == "properties" else _strict(v)) for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {name: _strict(s) for name, s in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


LWS = Draft202012Validator(_strict(json.loads(LWS_SCHEMA.read_text())))


def _paths(value: Any, where: str = "") -> dict[str, Any]:
    """Every leaf of a rendered object by its path: what a diff of two renders compares."""
    if isinstance(value, dict):
        return {p: v for k, item in value.items() for p, v in _paths(item, f"{where}.{k}").items()}
    if isinstance(value, list):
        return {p: v for i, item in enumerate(value) for p, v in _paths(item, f"{where}[{i}]").items()}
    return {where: value}


def _changed(before: dict, after: dict) -> set[str]:
    a, b = _paths(before), _paths(after)
    return {p for p in set(a) | set(b) if a.get(p, "<absent>") != b.get(p, "<absent>")}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_manifests_match_golden(path: Path) -> None:
    text = "".join("---\n" + manifest_yaml(m) for m in render_kubernetes(_fleet(path)))
    golden = GOLDEN / f"{path.stem}.yaml"
    if os.environ.get("KIMIK3_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden.name} differs: KIMIK3_UPDATE_GOLDEN=1 and review the diff"


def test_every_shipped_fleet_example_is_rendered() -> None:
    """A shipped fleet example without a golden render would go unchecked."""
    assert [p.stem for p in SHIPPED] == [p.stem for p in sorted((ROOT / "profiles").glob("fleet-*.yaml"))]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_manifests_pass_the_kubernetes_and_leaderworkerset_schemas(path: Path, version: str) -> None:
    manifests = render_kubernetes(_fleet(path))
    kinds = [m.kind for m in manifests]
    assert kinds == [
        "LeaderWorkerSet",
        "NetworkPolicy",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
    ]
    for manifest in manifests:
        body = yaml.safe_load(manifest_yaml(manifest))  # what kubectl reads: the YAML, not the dict
        if manifest.kind == "LeaderWorkerSet":
            errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in LWS.iter_errors(body)]
            assert errors == []
            # Its pod templates are core PodTemplateSpecs: checked as Pods by Kubernetes' own schema too.
            group = body["spec"]["leaderWorkerTemplate"]
            for key in ("leaderTemplate", "workerTemplate"):
                if key in group:
                    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": group[key]["spec"]}
                    kubernetes_validate.validate(pod, version, strict=True)
        else:
            kubernetes_validate.validate(body, version, strict=True)


def test_the_schemas_refuse_what_an_api_server_would() -> None:
    """The checks can fail: a misspelt LWS field and a bad restart policy fail the vendored CRD schema, a string
    replica count fails Kubernetes' (a check that passes everything would prove nothing)."""
    (lws, *_rest) = render_kubernetes(_fleet(EXAMPLES[0]))
    body = json.loads(json.dumps(lws.body))
    body["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxUnavaliable"] = 1
    body["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RecreateGroup"
    messages = [e.message for e in LWS.iter_errors(body)]
    assert any("maxUnavaliable" in m for m in messages) and any("RecreateGroup'" in m for m in messages), messages
    deployment = next(m.body for m in _rest if m.kind == "Deployment")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({**deployment, "spec": {**deployment["spec"], "replicas": "1"}}, "1.37.0", True)


def _lws(manifests: dict) -> dict:
    return next(body for (kind, _), body in manifests.items() if kind == "LeaderWorkerSet")


def _server(manifests: dict) -> dict:
    return _lws(manifests)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]


DEMO_FLEET = ROOT / "profiles" / "fleet-demo.yaml"


def test_the_rollout_policy_is_the_rolling_update() -> None:
    """fleet-demo: three replicas, k3-a the canary, one out at a time: a change reaches one group (partition 2),
    `--rollout all` every group; a group is recreated whole; the server serves the engine's argv on the pod's address,
    ready when kimik3's health path answers."""
    manifests = _render(DEMO_FLEET)
    spec = _lws(manifests)["spec"]
    assert spec["replicas"] == 3 and spec["leaderWorkerTemplate"]["size"] == 1
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0, "partition": 2}
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    server = _server(manifests)
    argv = server["args"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--threads") + 1] == "4"
    assert server["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert server["image"].endswith("@sha256:" + "0" * 64)
    promoted = _render(DEMO_FLEET, rollout="all")
    assert {(key, path) for key in manifests for path in _changed(manifests[key], promoted[key])} == {
        (("LeaderWorkerSet", "kimi-k3-demo-fleet"), ".spec.rolloutStrategy.rollingUpdateConfiguration.partition")
    }
    assert _lws(promoted)["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] == 0


@pytest.mark.parametrize(
    ("edit", "moved"),
    [
        (
            ("max_unavailable: 1  ", "max_unavailable: 2  "),
            {"spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable"},
        ),
        # Two canary hosts: the partition keeps one group, not two, on the old revision.
        (
            (
                "          k3-a: {ansible_host: 10.231.0.11}\n",
                "          k3-a: {ansible_host: 10.231.0.11}\n          k3-b:\n",
            ),
            {"spec.rolloutStrategy.rollingUpdateConfiguration.partition"},
        ),
        (
            ("drain_timeout: 60s", "drain_timeout: 2m"),
            {
                "spec.leaderWorkerTemplate.workerTemplate.spec.terminationGracePeriodSeconds",
                "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].lifecycle.preStop.sleep.seconds",
            },
        ),
    ],
    ids=["batch-size", "canary", "drain-timeout"],
)
def test_a_policy_change_moves_exactly_its_fields(edit: tuple[str, str], moved: set[str]) -> None:
    text = DEMO_FLEET.read_text()
    assert edit[0] in text
    before, after = _render(DEMO_FLEET), _render(DEMO_FLEET, text.replace(edit[0], edit[1]))
    assert set(before) == set(after)
    changed = {(key, path) for key in before for path in _changed(before[key], after[key])}
    assert changed == {(("LeaderWorkerSet", "kimi-k3-demo-fleet"), "." + path) for path in moved}


def test_the_router_finds_the_leaders_with_smgs_own_service_discovery() -> None:
    """smg's own parser (the fleet extra) reads the router's arguments: Kubernetes discovery of the set's leaders
    (worker index 0) on the serving port, in the fleet's namespace."""
    launch_router = pytest.importorskip("smg.launch_router")
    fleet = _fleet(DEMO_FLEET)
    args = smg_args(fleet, fleet.hosts[0].profile)
    assert args[0] == "launch"
    parsed = launch_router.parse_router_args(args[1:])
    assert parsed.service_discovery and parsed.service_discovery_namespace == "kimi-k3"
    assert parsed.service_discovery_port == 18181 and parsed.port == 30000 and parsed.policy == "cache_aware"
    assert parsed.health_check_interval_secs == 2 and parsed.health_check_endpoint == "/health"  # as fleet apply's
    assert parsed.selector == {
        "leaderworkerset.sigs.k8s.io/name": "kimi-k3-demo-fleet",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }


VLLM_FLEET = ROOT / "tests" / "fixtures" / "kubernetes" / "fleet-vllm.yaml"


def test_a_pulled_image_goes_by_the_profiles_digest_and_secrets_by_reference() -> None:
    """vLLM: the profile's image by digest, 8 GPUs (its tensor parallel size), the Hub token from its Secret in the
    download init container only; no value of a secret anywhere (the fleet file names none)."""
    manifests = _render(VLLM_FLEET)
    server = _server(manifests)
    assert server["image"] == "vllm/vllm-openai@sha256:" + "0" * 64
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert all(e["name"] != "HF_TOKEN" for e in server.get("env", ()))
    pod = _lws(manifests)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    (download,) = pod["initContainers"]
    token = next(e for e in download["env"] if e["name"] == "HF_TOKEN")
    assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    assert pod["volumes"][0] == {
        "name": "model-cache",
        "hostPath": {"path": "/var/lib/kimik3/hub", "type": "DirectoryOrCreate"},
    }


def _demo_in(tmp_path: Path, edit: tuple[str, str] = ("", ""), fleet: str | None = None) -> Path:
    """profiles/demo-cpu.yaml (with `edit`: (old, new) in its text) and a fleet file over it (`fleet`: its text,
    else fleet-demo's) in `tmp_path`; the profile's paths still mean the checkout's demo folder."""
    profile = (ROOT / "profiles" / "demo-cpu.yaml").read_text()
    assert edit[0] in profile
    profile = profile.replace(*edit).replace("../.kimik3-demo", str(ROOT / ".kimik3-demo"))
    (tmp_path / "demo-cpu.yaml").write_text(profile)
    (tmp_path / "fleet.yaml").write_text(DEMO_FLEET.read_text() if fleet is None else fleet)
    return tmp_path / "fleet.yaml"


def _rpc_fleet(tmp_path: Path, workers: str) -> Path:
    text = DEMO_FLEET.read_text().replace(
        "  k3-a: {serve: {host: 10.231.0.11}}\n  k3-b: {serve: {host: 10.231.0.12}}\n  k3-c: {serve: {host: 10.231.0.13}}\n",
        "".join(
            f"  {h}:\n    serve: {{host: 10.231.0.1{i}}}\n    rpc: {{workers: {workers.format(i=i)}}}\n"
            for i, h in enumerate(("k3-a", "k3-b", "k3-c"), start=1)
        ),
    )
    return _demo_in(tmp_path, fleet=text)


TWO_WORKERS = (
    '[{{name: w1, docker: "ssh://k3@10.231.1.{i}1", bind: 10.231.1.{i}1, threads: 4}}, '
    '{{name: w2, docker: "ssh://k3@10.231.1.{i}2", bind: 10.231.1.{i}2, threads: 4}}]'
)


def test_a_main_server_and_its_rpc_workers_are_one_group(tmp_path: Path) -> None:
    """Each replica: the leader (llama-server, --rpc to its group's worker pods by their LWS names) and two
    rpc-server workers; the leader starts with them (LeaderCreated: it cannot be ready before they run)."""
    path = _rpc_fleet(tmp_path, TWO_WORKERS)
    manifests = {
        (m.kind, m.name): m.body for m in render_kubernetes(parse_fleet(path.read_text(), str(path), read_text))
    }
    spec = _lws(manifests)["spec"]
    group = spec["leaderWorkerTemplate"]
    assert group["size"] == 3 and spec["startupPolicy"] == "LeaderCreated"
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    argv = leader["args"]
    assert argv[argv.index("--rpc") + 1] == (
        "$(K3_LEADER)-1.kimi-k3-demo-fleet:50052,$(K3_LEADER)-2.kimi-k3-demo-fleet:50052"
    )
    assert leader["env"][0] == {"name": "K3_LEADER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    worker = group["workerTemplate"]["spec"]["containers"][0]
    assert worker["command"][-1] == "/app/ggml-rpc-server" and worker["args"] == [
        "-H",
        "0.0.0.0",
        "-p",
        "50052",
        "-t",
        "4",
        "-c",
    ]
    errors = [e.message for e in LWS.iter_errors(json.loads(json.dumps(_lws(manifests))))]
    assert errors == []


def test_workers_that_differ_cannot_share_a_template(tmp_path: Path) -> None:
    """LWS makes every worker of a group from one template: two workers with other thread counts are refused at
    the worker, in the file that names it."""
    workers = TWO_WORKERS.replace("threads: 4}}]", "threads: 8}}]")
    path = _rpc_fleet(tmp_path, workers)
    with pytest.raises(ProfileError) as refused:
        render_kubernetes(parse_fleet(path.read_text(), str(path), read_text))
    text = path.read_text()
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "rpc: {workers:" in row)  # k3-a's, the first
    assert any(
        (p.line, p.field) == (line, "overrides.k3-a.rpc.workers[1]") and "one template" in p.message
        for p in refused.value.problems
    )


def test_a_worker_with_all_gpus_has_no_count_for_kubernetes(tmp_path: Path) -> None:
    """`gpus: all` is counted on the worker's host; a pod asks for a number: the worker's own list, refused by name
    at the override that gives it (kubernetes.gpus is the server pod's, not the worker's)."""
    path = _rpc_fleet(tmp_path, TWO_WORKERS.replace("threads: 4}}", "threads: 4, gpus: all}}"))
    with pytest.raises(ProfileError) as refused:
        render_kubernetes(parse_fleet(path.read_text(), str(path), read_text))
    fields = {p.field for p in refused.value.problems}
    assert {"overrides.k3-a.rpc.workers[0].gpus", "overrides.k3-c.rpc.workers[1].gpus"} <= fields


def test_an_sglang_fleet_renders_and_passes_the_schemas(tmp_path: Path) -> None:
    """The third engine: `sglang serve` as the pod's args (its image may have no entrypoint), tp_size GPUs."""
    text = (ROOT / "tests" / "fixtures" / "kubernetes" / "fleet-vllm.yaml").read_text()
    text = text.replace("../../../profiles/vllm-tp8.yaml", str(ROOT / "profiles" / "sglang-tp8.yaml"))
    (tmp_path / "fleet.yaml").write_text(text)
    manifests = render_kubernetes(_fleet(tmp_path / "fleet.yaml"))
    lws = manifests[0].body
    server = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert server["args"][:2] == ["sglang", "serve"] and "command" not in server
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "8" and server["image"].startswith("lmsysorg/sglang@")
    assert list(LWS.iter_errors(json.loads(json.dumps(lws)))) == []
    for manifest in manifests[1:]:
        kubernetes_validate.validate(yaml.safe_load(manifest_yaml(manifest)), "1.37.0", strict=True)


def test_an_argument_with_a_dollar_paren_reaches_the_server_as_written(tmp_path: Path) -> None:
    """Kubernetes expands $(NAME) in args and env values: a profile's own `$(` is escaped as `$$(`."""
    extra = '  parallel: 2\n  extra_args: [--chat-template-kwargs, \'{"x": "$(HOME)"}\']\n'
    server = _server(_render(_demo_in(tmp_path, ("  parallel: 2\n", extra))))
    assert server["args"][-1] == '{"x": "$$(HOME)"}'


def _refused(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(ProfileError) as refused:
        render_kubernetes(_fleet(DEMO_FLEET, text))
    return [(p.line, p.field, p.message) for p in refused.value.problems]


def _line(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if fragment in line)


def test_a_built_image_needs_its_registry_reference_named_at_its_line() -> None:
    text = DEMO_FLEET.read_text()
    without = "\n".join(line for line in text.splitlines() if not line.startswith("  image: ")) + "\n"
    ((line, field, message),) = _refused(without)
    assert (line, field) == (_line(without, "kubernetes:"), "kubernetes.image")
    assert "builds its image" in message and "fleet apply --registry" in message


def test_a_fleet_without_a_kubernetes_section_is_refused_by_name() -> None:
    text = DEMO_FLEET.read_text().split("\nkubernetes:")[0] + "\n"
    ((_, field, message),) = _refused(text)
    assert field == "kubernetes" and "kubernetes.cache" in message and "kubernetes.router.image" in message


def test_a_gguf_file_of_another_quant_is_refused_at_its_line() -> None:
    text = DEMO_FLEET.read_text().replace("model_file: UD-Q2_K_XL/", "model_file: UD-IQ2_XXS/")
    ((line, field, message),) = _refused(text)
    assert (line, field) == (_line(text, "model_file:"), "kubernetes.model_file") and "UD-Q2_K_XL" in message


def test_an_api_key_needs_its_secret(tmp_path: Path) -> None:
    """serve.api_key_file: the key reaches the pod from a Secret (a file mounted where --api-key-file reads it),
    named in the fleet file; without one the render refuses rather than start a server without its key."""
    _demo_in(tmp_path, ("  parallel: 2\n", "  parallel: 2\n  api_key_file: /etc/kimik3/api-key\n"))
    with pytest.raises(ProfileError) as refused:
        _render(tmp_path / "fleet.yaml")
    assert [p.field for p in refused.value.problems] == ["kubernetes.secrets.api_key"]
    with_secret = DEMO_FLEET.read_text() + "  secrets: {api_key: {name: kimi-api-key, key: key}}\n"
    (tmp_path / "fleet.yaml").write_text(with_secret)
    manifests = _render(tmp_path / "fleet.yaml")
    server = _server(manifests)
    argv = server["args"]
    assert argv[argv.index("--api-key-file") + 1] == "/run/secrets/kimik3-api-key"
    assert {"name": "api-key", "mountPath": "/run/secrets/kimik3-api-key", "subPath": "key"} in server["volumeMounts"]
    volumes = _lws(manifests)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]
    assert {"name": "api-key", "secret": {"secretName": "kimi-api-key", "defaultMode": 0o400}} in volumes


def test_render_writes_one_file_per_object_and_a_kustomization(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    out.mkdir()
    (out / "networkpolicy-old.yaml").write_text(
        "# Rendered by `kimik3 fleet render --target kubernetes`: edit the fleet file and render again.\n"
    )
    (out / "mine.yaml").write_text("kind: ConfigMap\n")  # not the render's: left alone
    result = CliRunner().invoke(main, ["fleet", "render", str(DEMO_FLEET), "--target", "kubernetes", "--out", str(out)])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(
        [
            "deployment-kimi-k3-demo-fleet-router.yaml",
            "kustomization.yaml",
            "leaderworkerset-kimi-k3-demo-fleet.yaml",
            "mine.yaml",
            "networkpolicy-kimi-k3-demo-fleet-server.yaml",
            "role-kimi-k3-demo-fleet-router.yaml",
            "rolebinding-kimi-k3-demo-fleet-router.yaml",
            "service-kimi-k3-demo-fleet-router.yaml",
            "serviceaccount-kimi-k3-demo-fleet-router.yaml",
        ]
    )
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(set(files) - {"kustomization.yaml", "mine.yaml"})
    lws = yaml.safe_load((out / "leaderworkerset-kimi-k3-demo-fleet.yaml").read_text())
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] == 2


def test_render_refusal_is_exit_2_with_file_and_line(tmp_path: Path) -> None:
    text = DEMO_FLEET.read_text().replace("model_file: UD-Q2_K_XL/", "model_file: UD-IQ2_XXS/")
    _demo_in(tmp_path, fleet=text)
    result = CliRunner().invoke(main, ["fleet", "render", str(tmp_path / "fleet.yaml"), "--target", "kubernetes"])
    assert result.exit_code == 2
    assert f"fleet.yaml:{_line(text, 'model_file:')}: kubernetes.model_file:" in result.output
    as_json = CliRunner().invoke(
        main, ["fleet", "render", str(tmp_path / "fleet.yaml"), "--target", "kubernetes", "--json"]
    )
    document = json.loads(as_json.stdout)
    assert as_json.exit_code == 2 and document["ok"] is False and "kubernetes.model_file" in json.dumps(document)


def test_render_json_holds_the_manifests() -> None:
    result = CliRunner().invoke(main, ["fleet", "render", str(DEMO_FLEET), "--target", "kubernetes", "--json"])
    document = json.loads(result.stdout)
    assert result.exit_code == 0 and document["ok"] and document["rollout"] == "canary"
    assert [m["kind"] for m in document["manifests"]][:2] == ["LeaderWorkerSet", "NetworkPolicy"]


def test_a_mirror_of_a_pulled_image_must_hold_the_profiles_digest(tmp_path: Path) -> None:
    """kubernetes.image for vLLM: a mirror the cluster pulls from, with the digest the profile pins, else refused."""
    text = VLLM_FLEET.read_text().replace("../../../profiles/", str(ROOT / "profiles") + "/")
    mirror = "mirror.example:5000/vllm/vllm-openai@sha256:" + "0" * 64
    (tmp_path / "fleet.yaml").write_text(text.replace("  memory: 1800Gi\n", f"  memory: 1800Gi\n  image: {mirror}\n"))
    assert _server(_render(tmp_path / "fleet.yaml"))["image"] == mirror
    other = mirror.replace("0" * 64, "f" * 64)
    (tmp_path / "fleet.yaml").write_text(text.replace("  memory: 1800Gi\n", f"  memory: 1800Gi\n  image: {other}\n"))
    with pytest.raises(ProfileError) as refused:
        _render(tmp_path / "fleet.yaml")
    ((problem),) = refused.value.problems
    assert problem.field == "kubernetes.image" and "sha256:" + "0" * 64 in problem.message


def test_slots_named_in_the_fleet_file_is_refused_at_its_line_and_the_default_renders_cache_aware() -> None:
    """slots is kimik3's router, run on the controller beside smg; the Kubernetes render has smg alone."""
    text = DEMO_FLEET.read_text().replace("  port: 30000 ", "  policy: slots\n  port: 30000 ")
    ((line, field, message),) = _refused(text)
    assert (line, field) == (_line(text, "policy: slots"), "router.policy") and "smg" in message
    fleet = _fleet(DEMO_FLEET)  # no policy named: slots where fleet apply runs it, cache_aware here
    assert fleet.router.policy == "slots" and not fleet.router.policy_given
    args = smg_args(fleet, fleet.hosts[0].profile)
    assert args[args.index("--policy") + 1] == "cache_aware"
