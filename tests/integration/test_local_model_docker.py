"""Issue 27 item 3 against the real parts: a GGUF made on this host (the tiny kimi-k3 writer, engines/llamacpp/smoke_model.py)
served through `model.local_path` by the real `kimik3`, dockerd and the demo CPU image
(kimi-k3-llamacpp:mainline-ad1de39-cpu, built from the demo's archive when absent), no hub at all. Verified (the
first apply records its sha256 manifest), mounted read-only (docker inspect), drift when the file changes (the plan
names the content digest, the apply relaunches on the new file: llama-server reports the new model's parameter
count), and bad input refused with exit 2 naming the field while the server keeps serving.

Names and ports are this module's own (k3l27-local, 19427)."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realparts import (
    demo_profile,
    destroyed_after,
    docker,
    kimik3,
    remove_leftovers,
    require_docker_and_demo_hub,
    serves,
    write_profile,
)

from kimik3_reconciler.engines.llamacpp.smoke_model import write_tiny_kimi_k3

pytestmark = pytest.mark.docker

NAME, PORT = "k3l27-local", 19427
QUANT = "UD-Q2_K_XL-REAP770"  # made locally (seed 000): a profile naming it must name its file


def made_here(folder: Path, layers: int) -> Path:
    """A GGUF made on this host, written where a user's slicing or conversion would leave it."""
    (path,) = write_tiny_kimi_k3(folder, "k3-reap770", shards=1, seed=layers, layers=layers)
    return path


def served_params() -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/v1/models", timeout=10) as answer:
        return json.load(answer)["data"][0]["meta"]["n_params"]


def answers() -> dict:
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def plan_json(work: Path, profile: str = "profile.yaml") -> dict:
    return json.loads(kimik3(work, "plan", "--json", profile, check=False).stdout)


def steps_of(plan: dict) -> dict[str, dict]:
    return {s["kind"]: s for s in plan["steps"]}


def local_model_work(work: Path) -> Path:
    """In `work`: a GGUF made here (4 layers), profile.yaml serving it through model.local_path, and bad.yaml naming
    a file that is no GGUF."""
    require_docker_and_demo_hub()
    made_here(work / "models", layers=4)
    profile = demo_profile(work, NAME, PORT, "http://127.0.0.1:9")  # the demo's build; its hub is never asked
    for key in ("endpoint", "cache_dir"):
        profile["model"].pop(key)
    profile["model"].update(quant=QUANT, local_path="models/k3-reap770.gguf")
    write_profile(work, profile)
    bad = json.loads(json.dumps(profile))
    bad["model"]["local_path"] = "models/notes.gguf"
    write_profile(work, bad, "bad.yaml")
    return work


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    remove_leftovers(NAME)
    work = local_model_work(tmp_path_factory.mktemp("kimik3-local-model"))
    with destroyed_after(work, NAME):
        yield work


@pytest.fixture
def served(work: Path) -> Path:
    """The module's profile applied (a no-op when it already is): whatever ran before, or alone."""
    kimik3(work, "apply", "profile.yaml")
    return work


def test_a_gguf_made_here_is_verified_served_and_mounted_read_only(tmp_path: Path) -> None:
    # A folder of its own, never verified, and the container removed: the first apply, whatever ran before.
    work = local_model_work(tmp_path)
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    first = steps_of(plan_json(work))["model"]
    assert first["action"] == "create" and "record the sha256 manifest of 1 file(s)" in first["reason"], first
    kimik3(work, "apply", "profile.yaml")  # its check (`kimik3 verify`) passes on the served model
    assert serves(PORT) and answers()["choices"]
    found = json.loads(docker("inspect", NAME))[0]
    model = work / "models" / "k3-reap770.gguf"
    assert [(m["Source"], m["Destination"], m["RW"]) for m in found["Mounts"]] == [
        (str(model), f"/models/local/{QUANT}/k3-reap770.gguf", False)
    ]
    argv = found["Config"]["Cmd"]
    assert argv[argv.index("-m") + 1] == f"/models/local/{QUANT}/k3-reap770.gguf"
    records = list((work / "state" / "models" / "local").glob("*.json"))
    assert [json.loads(r.read_text())["cache_dir"] for r in records] == [str(model)]
    again = plan_json(work)
    assert again["converged"] is True and steps_of(again)["model"]["action"] == "noop"


def test_a_changed_file_is_drift_and_the_apply_serves_the_new_one(served: Path) -> None:
    work = served
    before = served_params()
    made_here(work / "models", layers=6)  # a new conversion written in place of the old one
    plan = steps_of(plan_json(work))
    assert plan["model"]["action"] == "update" and "changed since verified" in plan["model"]["reason"], plan["model"]
    assert plan["container"]["action"] == "replace"
    assert [d["field"] for d in plan["container"]["diff"]] == ["model.sha256"]
    applied = json.loads(kimik3(work, "apply", "--json", "profile.yaml").stdout)
    assert ("container", "replace") in [(s["kind"], s["action"]) for s in applied["executed"]]
    assert served_params() != before and answers()["choices"]
    assert plan_json(work)["converged"] is True


def test_bad_input_exits_2_naming_the_field_and_the_server_keeps_serving(served: Path) -> None:
    work = served
    (work / "models" / "notes.gguf").write_text("version https://git-lfs.github.com/spec/v1\n")  # a pointer, no LFS
    running = json.loads(docker("inspect", NAME))[0]["Id"]
    refused = kimik3(work, "apply", "bad.yaml", check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "model.local_path: models/notes.gguf is not a GGUF file" in refused.stderr
    assert json.loads(docker("inspect", NAME))[0]["Id"] == running and serves(PORT)
