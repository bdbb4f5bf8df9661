"""`--json` on every command, and JSON on stdout when it fails (cli/json_out.py). Found by the held-back review:
validate, destroy, prune, explain and tune had no --json, and a failing `plan --json` (a profile error, a
usage error) left stdout empty, which a CI job's JSON parser refuses before it can show the reason."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from support.cli_run import cli_run
from support.shipped import pinned_text

from kimik3_reconciler.cli import main

# Commands whose output is already JSON whatever the flags (schema, reconcile's JSON lines), or that print one line
# for a person (force-unlock), or are started by kimik3 itself (metrics-serve, front-serve).
# router-step, mirror, image: fleet apply's hidden steps, run by its playbook (the rollout record; image prints JSON)
# job-step: what a Slurm replica's job runs (its outcome goes into the job's comment)
NOT_JSON_FLAGGED = {
    "schema",
    "reconcile",
    "force-unlock",
    "metrics-serve",
    "front-serve",
    "router-step",
    "route",  # kimik3's router (cli/fleet_router.py): a server, prints nothing
    "keep",  # the router's keeper (adapters/router_keep.py): runs a server, prints a line per restart
    "mirror",
    "image",
    "job-step",
}


def run(args: list[str], cwd: Path) -> tuple[int, str, str]:
    return cli_run(args, cwd)


def test_every_command_that_prints_a_result_takes_json() -> None:
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        if name in NOT_JSON_FLAGGED:
            continue
        command = main.get_command(ctx, name)
        # a group (kimik3 fleet): each of its commands that prints a result
        for sub, each in command.commands.items() if isinstance(command, click.Group) else [("", command)]:
            if sub not in NOT_JSON_FLAGGED:
                assert any("--json" in p.opts for p in each.params), f"kimik3 {name} {sub} has no --json"


@pytest.mark.parametrize(
    "args, code",
    [
        (["plan", "--json", "missing.yaml"], 2),
        (["plan", "--json", "bad.yaml"], 2),
        (["apply", "--json", "bad.yaml"], 2),
        (["status", "--json", "bad.yaml"], 2),
        (["verify", "--json", "bad.yaml"], 2),
        (["destroy", "--json", "bad.yaml"], 2),
        (["down", "--json", "bad.yaml"], 2),
        (["prune", "--json", "bad.yaml"], 2),
        (["bench", "--json", "bad.yaml"], 2),
        (["tune", "--json", "bad.yaml", "--goal", "decode"], 2),
        (["explain", "--json", "no-such-rule"], 2),
        (["apply", "--json", "cut.plan"], 2),
        (["plan", "--json"], 2),  # usage errors: a missing FILE, an unknown option or command, a bad value
        (["plan", "--json", "--no-such-option", "bad.yaml"], 2),
        (["plna", "--json", "bad.yaml"], 2),
        (["bench", "--json", "--grid", "0", "bad.yaml"], 2),
        (["status", "--json", "--watch", "bad.yaml"], 2),  # a live table would be all of a JSON stdout
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_a_failing_json_command_prints_one_json_error_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("apiVersion: kimik3/v1\nname: k3\nmodle: {}\n")
    (tmp_path / "cut.plan").write_text('{\n  "format": "kimik3-plan",\n  "version": 1,\n  "created": "20')
    exit_code, stdout, stderr = run(args, tmp_path)
    assert exit_code == code, stderr
    document = json.loads(stdout)  # the whole of stdout: nothing else mixed in
    assert document["ok"] is False and document["error"]["exit_code"] == code
    assert document["error"]["message"] and stderr.strip()  # the person reading stderr still gets the message


def test_a_bad_knob_under_json_prints_the_json_error_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The knobs are refused by the group's callback, before the command parses its --json: still one document."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KIMIK3_DOWNLOAD_WORKERS", "0")
    exit_code, stdout, stderr = run(["plan", "--json", "p.yaml"], tmp_path)
    assert exit_code == 2 and "KIMIK3_DOWNLOAD_WORKERS" in stderr
    error = json.loads(stdout)["error"]
    assert error["exit_code"] == 2 and "KIMIK3_DOWNLOAD_WORKERS" in error["message"]
    exit_code, stdout, _ = run(["plan", "p.yaml"], tmp_path)  # without --json: stderr only, as before
    assert exit_code == 2 and stdout == ""


def test_bench_compare_with_nothing_kept_is_a_json_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    profile = tmp_path / "hybrid-q2.yaml"
    profile.write_text(pinned_text(Path(__file__).resolve().parents[3] / "profiles" / "hybrid-q2.yaml"))
    exit_code, stdout, stderr = run(["bench", "--compare", "--json", str(profile)], tmp_path)
    assert exit_code == 1 and "no kept bench runs of kimi-k3" in stderr
    assert json.loads(stdout)["error"]["type"] == "NothingMeasured"


def test_a_profile_of_many_problems_shows_the_first_fifty_and_json_keeps_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    keys = "".join(f"unknown_{i}: 1\n" for i in range(60))
    (tmp_path / "many.yaml").write_text(f"apiVersion: kimik3/v1\nname: k3\n{keys}")
    exit_code, stdout, stderr = run(["plan", "--json", "many.yaml"], tmp_path)
    assert exit_code == 2
    problems = json.loads(stdout)["error"]["problems"]
    assert len(problems) == 61  # model missing, and the 60 unknown keys
    assert "unknown_0" in stderr and "unknown_59" not in stderr
    assert f"... and {len(problems) - 50} more problems (all of them: --json)" in stderr


def test_a_profile_error_as_json_names_file_line_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("apiVersion: kimik3/v1\nname: k3\nmodle: {}\n")
    _, stdout, _ = run(["plan", "--json", "bad.yaml"], tmp_path)
    problems = json.loads(stdout)["error"]["problems"]
    assert {
        "file": "bad.yaml",
        "line": 3,
        "field": "modle",
        "message": "unknown key (did you mean 'model'?)",
    } in problems


def test_validate_json_gives_each_files_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    good = Path(__file__).resolve().parents[3] / "profiles" / "hybrid-q2.yaml"
    (tmp_path / "bad.yaml").write_text("apiVersion: kimik3/v1\nname: k3\nmodle: {}\n")
    exit_code, stdout, _ = run(["validate", "--json", str(good), "bad.yaml", "gone.yaml"], tmp_path)
    document = json.loads(stdout)
    assert exit_code == 2 and document["ok"] is False
    assert [(f["file"], f["valid"]) for f in document["files"]] == [
        (str(good), True),
        ("bad.yaml", False),
        ("gone.yaml", False),
    ]
    exit_code, stdout, _ = run(["validate", "--json", str(good)], tmp_path)
    assert exit_code == 0 and json.loads(stdout)["ok"] is True


def test_explain_json_lists_every_rule_or_one(tmp_path: Path) -> None:
    from kimik3_reconciler.model.rulebook import RULES

    exit_code, stdout, _ = run(["explain", "--json"], tmp_path)
    assert exit_code == 0 and [r["id"] for r in json.loads(stdout)] == [r.id for r in RULES]
    exit_code, stdout, _ = run(["explain", "--json", "slot-context-floor"], tmp_path)
    assert exit_code == 0 and json.loads(stdout)["id"] == "slot-context-floor"


def test_an_exception_outside_kimik3s_errors_still_gives_one_json_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: an SDK error no adapter translated (urllib3's, the Docker daemon gone mid-build) left a --json
    caller an empty stdout and a traceback. Whatever is raised, stdout holds one JSON error, exit 1; stderr keeps
    the traceback (a bug report needs it) and one line saying what happened."""
    import kimik3_reconciler.cli as cli

    def broken(*_args: object, **_kwargs: object) -> None:
        raise ValueError("no adapter knows this one")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "load", broken)
    exit_code, stdout, stderr = run(["plan", "--json", "p.yaml"], tmp_path)
    error = json.loads(stdout)["error"]
    assert exit_code == 1 and error["exit_code"] == 1 and error["type"] == "ValueError"
    assert "no adapter knows this one" in error["message"]
    assert "Traceback" in stderr and "error: unexpected ValueError: no adapter knows this one" in stderr
    exit_code, stdout, stderr = run(["plan", "p.yaml"], tmp_path)  # without --json: stderr only, same exit
    assert exit_code == 1 and stdout == "" and "error: unexpected ValueError" in stderr


def test_the_unexpected_error_path_never_prints_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 39's catch-all: it prints whatever a foreign exception says, and its chain, on stderr and in
    the JSON document. requests' InvalidHeader quotes the header's value (`Bearer hf_…` with a stray newline), so
    the environment's HF_TOKEN (and any hf_… token) is starred there as everywhere else."""
    import kimik3_reconciler.cli as cli

    token = "hf_" + "Q" * 34
    other = "hf_" + "Z" * 34  # a token-shaped string from elsewhere (a file, a cause's message)

    def broken(*_args: object, **_kwargs: object) -> None:
        try:
            raise OSError(f"cause quoting {other}")
        except OSError as cause:
            raise ValueError(f"Invalid header value 'Bearer {token}\\n'") from cause

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setattr(cli, "load", broken)
    result = CliRunner().invoke(
        main,
        ["plan", "--json", "p.yaml"],
        catch_exceptions=False,
        env={"KIMIK3_STATE_DIR": str(tmp_path / "state"), "HF_TOKEN": token},
    )
    assert result.exit_code == 1 and json.loads(result.stdout)["error"]["type"] == "ValueError"
    assert "Traceback" in result.stderr and "Invalid header value 'Bearer ***" in result.stderr
    for secret in (token, other):
        assert secret not in result.stdout and secret not in result.stderr
