"""Drift from what runs: parse_running on recorded docker inspect JSON, and running_drift against the
rendered container (field names, hidden env values, image defaults that are not drift)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from support.fakes import FAKE_PROFILE, container_inspect
from support.observed import observed

from kimik3_reconciler.model.facts import MountFact
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.docker_objects import parse_gpus, parse_running
from kimik3_reconciler.planning.container_drift import running_drift
from kimik3_reconciler.planning.launch import render_launch

DOCKER = Path(__file__).resolve().parents[2] / "fixtures" / "docker"
RECORDED = json.loads((DOCKER / "container-running.json").read_text())
IMAGE = json.loads((DOCKER / "image-cpu.json").read_text())


def rendered(profile_text: str = FAKE_PROFILE):
    profile = parse_profile(profile_text, "test.yaml").profile
    return render_launch(profile, observed(profile), "kimi-k3-llamacpp:mainline-ad1de39-cpu", "f" * 16).spec


def test_recorded_container_parses_to_the_shape_kimik3_launched() -> None:
    running = parse_running(RECORDED, IMAGE)
    assert running.command == tuple(RECORDED["Config"]["Cmd"]) and "--ubatch-size" in running.command
    assert running.entrypoint is None  # the image's own /app/llama-server
    assert running.env == ()  # PATH and LD_LIBRARY_PATH come from the image
    assert running.mounts == (
        MountFact(
            source="/work/main/.kimik3-demo/hf-cache/models--kimik3-demo--Kimi-K3-tiny-GGUF",
            target="/models/models--kimik3-demo--Kimi-K3-tiny-GGUF",
            read_only=True,
        ),
    )
    assert (running.gpus, running.network_mode, running.ipc_mode, running.restart_policy) == (
        "none",
        "host",
        "host",
        "unless-stopped",
    )


def test_without_its_image_the_defaults_are_not_known() -> None:
    running = parse_running(RECORDED)  # PATH is Docker's default; LD_LIBRARY_PATH now looks set by hand
    assert running.entrypoint == ("/app/llama-server",) and running.env == (("LD_LIBRARY_PATH", "/app"),)


def test_gpu_requests_as_dockerd_stores_them() -> None:
    assert (
        parse_gpus([{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}]) == "all"
    )
    assert parse_gpus([{"Driver": "", "Count": 0, "DeviceIDs": ["0", "3"], "Capabilities": [["gpu"]]}]) == ("0", "3")
    assert parse_gpus(None) == "none" and parse_gpus([]) == "none"


def test_the_rendered_container_read_back_has_no_drift() -> None:
    spec = rendered()
    assert running_drift(spec, parse_running(container_inspect(spec, "c" * 64, None, image=IMAGE), IMAGE)) == ()


def test_each_changed_field_is_named() -> None:
    spec = rendered()
    command = list(spec.command)
    command[command.index("--ctx-size") + 1] = "8192"
    by_hand = replace(
        spec,
        image="debian:bookworm",
        command=tuple(command),
        network_mode="bridge",
        ipc_mode="private",
        gpus=("0",),
        mounts=tuple(replace(m, read_only=False) for m in spec.mounts),
    )
    drift = {d.field: (d.old, d.new) for d in running_drift(spec, parse_running(container_inspect(by_hand, "c", None)))}
    target = spec.mounts[0].target
    assert drift == {
        "container.image": ("debian:bookworm", spec.image),
        "container.command": ("… --ctx-size 8192 …", "… --ctx-size 4096 …"),
        f"mount {target}": ("read-write", "read-only"),
        "container.gpus": ("0", "none"),
        "container.network_mode": ("bridge", "host"),
        "container.ipc_mode": ("private", "host"),
    }


def test_env_values_are_never_shown() -> None:
    spec = rendered(FAKE_PROFILE.replace("parallel: 2}", "parallel: 2, env: {LLAMA_ARG_X: '1'}}"))
    by_hand = replace(spec, env=(("LLAMA_ARG_X", "2"), ("HF_TOKEN", "hf_secret")))
    drift = running_drift(spec, parse_running(container_inspect(by_hand, "c", None)))
    assert [str(d) for d in drift] == [
        "container.env.HF_TOKEN: (sensitive value) → (none)",
        "container.env.LLAMA_ARG_X: (sensitive value) → (sensitive value)",
    ]
    assert "hf_secret" not in repr(drift)


def test_a_profile_variable_equal_to_the_image_default_is_not_drift() -> None:
    spec = rendered(FAKE_PROFILE.replace("parallel: 2}", "parallel: 2, env: {LD_LIBRARY_PATH: /app}}"))
    inspect = container_inspect(spec, "c", None, image=IMAGE)  # docker merged the image's and the profile's (equal)
    assert running_drift(spec, parse_running(inspect, IMAGE)) == ()


def test_a_removed_mount_and_a_swapped_source_are_named() -> None:
    spec = rendered(FAKE_PROFILE.replace("parallel: 2}", "parallel: 2, api_key_file: /etc/k3/key}"))
    by_hand = replace(spec, mounts=(replace(spec.mounts[0], source="/elsewhere"),))
    drift = [str(d) for d in running_drift(spec, parse_running(container_inspect(by_hand, "c", None)))]
    assert drift == [
        f"mount {spec.mounts[0].target}: /elsewhere (read-only) → {spec.mounts[0].source} (read-only)",
        "mount /run/secrets/kimik3-api-key: (none) → /etc/k3/key (read-only)",
    ]


def test_a_secret_flag_added_by_hand_is_named_but_its_value_never_shown() -> None:
    spec = rendered()
    by_hand = replace(spec, command=(*spec.command, "--api-key", "sk-secret-123"))
    drift = running_drift(spec, parse_running(container_inspect(by_hand, "c", None)))
    assert len(drift) == 1 and drift[0].field == "container.command" and "--api-key (secret)" in str(drift[0])
    assert "sk-secret-123" not in repr(drift)


def test_the_running_config_as_json_shows_env_names_and_no_secret_flag_value() -> None:
    """`status --json` dumps the observed facts: a hand-made container's secrets must not reach it."""
    spec = rendered()
    by_hand = replace(spec, env=(("HF_TOKEN", "hf_secret"),), command=(*spec.command, "--api-key", "sk-secret-123"))
    running = parse_running(container_inspect(by_hand, "c", None))
    dumped = json.dumps(running.model_dump(mode="json"))
    assert "hf_secret" not in dumped and "sk-secret-123" not in dumped
    assert '["HF_TOKEN", "(hidden)"]' in dumped and '"--api-key", "(secret)"' in dumped
    assert dict(running.env)["HF_TOKEN"] == "hf_secret"  # the planner still compares real values


def test_a_named_volume_is_compared_by_its_name_not_its_folder() -> None:
    """serve.slot_save's volume (kimik3-slots-<name>): docker inspect lists it with its folder under Docker's root
    and its name; the rendered spec names it. Read by its folder, every plan would replace the server again."""
    spec = replace(rendered(), volumes=(("kimik3-slots-x", "/slots"),))
    inspect = json.loads(json.dumps(RECORDED))
    inspect["Mounts"] = [
        *inspect["Mounts"],
        {
            "Type": "volume",
            "Name": "kimik3-slots-x",
            "Source": "/var/lib/docker/volumes/kimik3-slots-x/_data",
            "Destination": "/slots",
            "RW": True,
        },
    ]
    running = parse_running(inspect, IMAGE)
    assert not [d for d in running_drift(spec, running) if d.field == "mount /slots"]
    gone = running.model_copy(update={"mounts": tuple(m for m in running.mounts if m.target != "/slots")})
    assert [(d.old, d.new) for d in running_drift(spec, gone) if d.field == "mount /slots"] == [
        (None, "kimik3-slots-x (read-write)")
    ]
