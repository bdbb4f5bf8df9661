"""The fleet file (issue 36 item 1): each case in tests/cases/fleet/ is a fleet file next to profiles/demo-cpu.yaml
(and tests/cases/fleet/profiles/'s, e.g. a pinned vLLM profile whose hosts head clusters) and the problems it must produce (line, field, message), or none and what it resolves to (hosts, batches)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.fleet import fleet_json_schema, parse_fleet

CASES = sorted((Path(__file__).parents[2] / "cases" / "fleet").glob("*.yaml"))
CASE_PROFILES = Path(__file__).parents[2] / "cases" / "fleet" / "profiles"
DEMO = Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml"
# The head of a two-host fleet file on demo-cpu.yaml, up to its hosts (each test adds its own).
HEAD = """\
apiVersion: kimik3/v1
kind: Fleet
name: f
profile: demo-cpu.yaml
inventory:
  all:
    hosts:
"""


def _fleet(tmp_path: Path, text: str):  # noqa: ANN202 - fleet.Fleet
    shutil.copy(DEMO, tmp_path / "demo-cpu.yaml")
    for profile in CASE_PROFILES.glob("*.yaml"):
        shutil.copy(profile, tmp_path / profile.name)
    (tmp_path / "fleet.yaml").write_text(text)
    return parse_fleet(text, str(tmp_path / "fleet.yaml"), read_text)


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_fleet_case(case: Path, tmp_path: Path) -> None:
    spec = yaml.safe_load(case.read_text())
    if not spec["expect"]:
        fleet = _fleet(tmp_path, spec["fleet"])
        for name, want in spec.get("hosts", {}).items():
            host = fleet.host(name)
            assert (host.ssh_target, host.port, list(host.groups)) == (want["target"], want["port"], want["groups"])
        assert [list(b) for b in fleet.rollout.batches()] == spec["batches"]
        return
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, spec["fleet"])
    got = [(p.line, p.field, p.message) for p in refused.value.problems]
    for want in spec["expect"]:
        assert any(
            line == want["line"] and field == want["field"] and want["message"] in message
            for line, field, message in got
        ), f"{want} not among {got}"
    assert len(got) == len(spec["expect"]), got
    assert all(p.source == str(tmp_path / "fleet.yaml") for p in refused.value.problems)


def test_the_shipped_example_is_valid_and_rolls_its_canary_first() -> None:
    example = Path(__file__).parents[3] / "profiles" / "fleet-demo.yaml"
    fleet = parse_fleet(example.read_text(), str(example), read_text)
    assert [h.name for h in fleet.hosts] == ["k3-a", "k3-b", "k3-c"]
    assert fleet.rollout.batches() == (("k3-a",), ("k3-b",), ("k3-c",)) and fleet.rollout.min_serving == 2
    assert fleet.router.kind == "smg" and fleet.router.version == "1.13.0"


def test_each_host_gets_its_overrides_and_absolute_paths(tmp_path: Path) -> None:
    fleet = _fleet(
        tmp_path,
        HEAD
        + """\
      a: {ansible_host: 127.0.0.1, kimik3_profile_dir: /srv/gitops/profiles}
      b: {ansible_host: 127.0.0.1, kimik3_command: [/opt/k3/bin/kimik3, --state-dir, /srv/k3]}
overrides:
  b: {serve: {port: 18182}, model: {cache_dir: /data/hub}}
router: {version: "1.13.0"}
""",
    )
    a, b = fleet.hosts
    assert (a.profile.serve.port, b.profile.serve.port) == (18181, 18182)
    # Relative paths mean the profile's folder on that host: /srv/gitops/profiles for a, this one for b.
    assert a.profile.model.cache_dir == "/srv/gitops/.kimik3-demo/hf-cache"
    assert b.profile.model.cache_dir == "/data/hub"
    assert b.profile.build.archive == str((tmp_path / ".." / ".kimik3-demo" / "llama.cpp-b11434.tar.gz").resolve())
    assert "# relative to this file" in a.profile_text  # the operator's comments travel with the text
    assert a.kimik3_command == ("kimik3",) and b.kimik3_command == ("/opt/k3/bin/kimik3", "--state-dir", "/srv/k3")
    assert b.overrides == {"serve": {"port": 18182}, "model": {"cache_dir": "/data/hub"}}


def test_the_schema_names_the_overridable_fields() -> None:
    schema = fleet_json_schema()
    overrides = schema["$defs"]["HostOverrides"]["properties"]
    assert set(overrides) == {"gpus", "serve", "model", "rpc", "vllm", "sglang"}
    assert (
        schema["properties"]["kind"] == {"const": "Fleet", "title": "Kind", "type": "string"}
        or schema["properties"]["kind"].get("enum") == ["Fleet"]
        or schema["properties"]["kind"].get("const") == "Fleet"
    )


def test_the_json_schema_accepts_the_valid_fleet_files_and_refuses_a_misspelt_key() -> None:
    from jsonschema import Draft202012Validator

    from kimik3_reconciler.model.profile_source import load_yaml

    schema = Draft202012Validator(fleet_json_schema())
    example = Path(__file__).parents[3] / "profiles" / "fleet-demo.yaml"
    assert schema.is_valid(load_yaml(example.read_text(), {})[0])
    for case in CASES:
        spec = yaml.safe_load(case.read_text())
        if not spec["expect"]:
            assert schema.is_valid(load_yaml(spec["fleet"], {})[0]), case.stem
    unknown = yaml.safe_load((Path(__file__).parents[2] / "cases" / "fleet" / "unknown_key.yaml").read_text())
    assert not schema.is_valid(load_yaml(unknown["fleet"], {})[0])


def test_validate_takes_a_fleet_file_and_names_each_problem(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kimik3_reconciler.cli import main

    spec = yaml.safe_load((Path(__file__).parents[2] / "cases" / "fleet" / "every_host_down.yaml").read_text())
    shutil.copy(DEMO, tmp_path / "demo-cpu.yaml")
    (tmp_path / "fleet.yaml").write_text(spec["fleet"])
    env = {"KIMIK3_STATE_DIR": str(tmp_path / "state"), "KIMIK3_CACHE_DIR": str(tmp_path / "cache")}
    for args in (["validate"], ["fleet", "validate"]):
        result = CliRunner().invoke(main, [*args, str(tmp_path / "fleet.yaml")], env=env, catch_exceptions=False)
        assert result.exit_code == 2
        assert f"{tmp_path / 'fleet.yaml'}:9: rollout.max_unavailable: 3 of 3 host(s) out at once" in result.stderr
    result = CliRunner().invoke(main, ["fleet", "validate", "--json", str(tmp_path / "fleet.yaml")], env=env)
    assert result.exit_code == 2 and json.loads(result.stdout)["files"][0]["problems"][0]["line"] == 9
    assert not (tmp_path / "state").exists()  # nothing written: validate touches nothing
    ok = CliRunner().invoke(
        main, ["validate", str(Path(__file__).parents[3] / "profiles" / "fleet-demo.yaml")], env=env
    )
    assert ok.exit_code == 0 and "ok (fleet of 3 hosts)" in ok.stdout


def test_a_fleet_serving_an_unpinned_profile_is_refused_before_any_host(tmp_path: Path) -> None:
    """rule pinned-to-serve: every host must serve the same bytes; a branch each host resolves itself is not that."""
    fleet = (Path(__file__).parents[2] / "cases" / "fleet" / "ok_groups_and_vars.yaml").read_text()
    text = yaml.safe_load(fleet)["fleet"]
    shutil.copy(DEMO, tmp_path / "demo-cpu.yaml")
    demo = (tmp_path / "demo-cpu.yaml").read_text()
    (tmp_path / "demo-cpu.yaml").write_text(demo.replace("d3e0c0d2d3e0c0d2d3e0c0d2d3e0c0d2d3e0c0d2", "main"))
    (tmp_path / "fleet.yaml").write_text(text)
    with pytest.raises(ProfileError) as refused:
        parse_fleet(text, str(tmp_path / "fleet.yaml"), read_text)
    (problem,) = refused.value.problems
    assert problem.source == str(tmp_path / "demo-cpu.yaml") and problem.field == "model.revision"
    assert "'main' is a branch or tag, not a pin" in problem.message


@pytest.mark.parametrize("case", ["secret_host_vars", "kubernetes_secret_value"])
def test_a_secret_written_in_the_fleet_file_is_named_never_quoted(case: str, tmp_path: Path) -> None:
    spec = yaml.safe_load((Path(__file__).parents[2] / "cases" / "fleet" / f"{case}.yaml").read_text())
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, spec["fleet"])
    said = str(refused.value) + repr(refused.value.problems)
    assert "hunter2" not in said and "hf_abcdefghijklmnopqrstuvwxyz0123" not in said


def test_the_router_reaches_a_host_bound_to_loopback_at_the_hosts_address(tmp_path: Path) -> None:
    """A host served from the router's machine may bind loopback (its server answers on 127.0.0.1): the router, the
    rollout's steps and the other hosts' mirrors reach it there, not at the word `loopback` (which resolves nowhere:
    `fleet apply` registered http://loopback:18181 with smg), nor at `localhost` (::1 first)."""
    from kimik3_reconciler.cli.fleet_apply import mirror_urls, worker_url

    hosts = "      a: {ansible_host: localhost}\n      b: {ansible_host: 10.0.0.2}\n"
    rest = 'overrides:\n  b: {serve: {host: 10.0.0.2}}\nrouter: {version: "1.13.0"}\n'
    fleet = _fleet(tmp_path, HEAD + hosts + rest)
    assert [worker_url(h) for h in fleet.hosts] == ["http://127.0.0.1:18181", "http://10.0.0.2:18181"]
    assert mirror_urls(fleet) == {"a": "http://127.0.0.1:8089", "b": "http://10.0.0.2:8089"}


def test_a_profile_given_as_a_fleet_file_and_a_fleet_file_given_as_a_profile_are_each_told_in_one_line(
    tmp_path: Path,
) -> None:
    """`kimik3 fleet plan profile.yaml` said 'kind: required' and an unknown key per section (9 lines); `kimik3 plan
    fleet.yaml` 'model: required' and 'kind: unknown key'."""
    from kimik3_reconciler.model.profile_source import parse_profile

    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, DEMO.read_text())
    assert [(p.line, p.field) for p in refused.value.problems] == [(1, "kind")]
    assert "a profile, not a fleet file" in refused.value.problems[0].message
    example = Path(__file__).parents[3] / "profiles" / "fleet-demo.yaml"
    with pytest.raises(ProfileError) as refused:
        parse_profile(example.read_text(), str(example))
    kind_line = example.read_text().splitlines().index("kind: Fleet") + 1
    assert [(p.line, p.field) for p in refused.value.problems] == [(kind_line, "kind")]
    assert "a fleet file (kind: Fleet), not a profile: `kimik3 fleet plan" in refused.value.problems[0].message
