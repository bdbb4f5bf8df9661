"""The committed JSON Schema (docs/profile.schema.json, `kimik3 schema`) and `kimik3 validate` agree on every
field taken alone: an editor user is not told "ok" by the schema and then refused by CI (`host: localhost`,
`unit: kimi-k3.service`, `gpus: [0, 0]`), nor told "wrong" for a profile kimik3 accepts.

Each field gets values on both sides of its check; a value is set alone on a minimal valid profile, then judged by
validate (parse_profile: the schema models and the rules) and by the schema (jsonschema). The only disagreements
allowed are the cross-field rules (CROSS_FIELD), which docs/profile.md says the schema does not cover, and a byte
count the schema cannot make (MAX_ARG_STRLEN)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.model.profile_source import load_yaml, parse_profile

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "profile.schema.json").read_text()))
BASE: dict[str, Any] = {
    "apiVersion": "kimik3/v1",
    "name": "k",
    "model": {"repo": "a/b", "revision": "a" * 40, "quant": "UD-Q2_K_XL"},
}
WORKER = {"name": "w", "docker": "ssh://u@h", "bind": "10.0.0.2"}
UUID = "GPU-abcdef01-0000-0000-0000-000000000000"
IPS = [
    "127.0.0.1",
    "10.0.0.2",
    "::1",
    "fe80::1%eth0",
    "2001:db8::1",
    "1:2:3:4:5:6:7:8",
    "64:ff9b::1.2.3.4",
    "::ffff:127.0.0.1",
    "0:0:0:0:0:ffff:0.0.0.0",
    "01.2.3.4",
    "256.1.1.1",
    "1.2.3",
    ":::",
    "localhost",
    "",
    "x",
]
PATHS = ["/abs/dir", "rel/dir", "./x", "~/hub", "~", "$HOME/x", "a/${X}/b", "cost$1", ""]
ANY = [0, -1, 1.5, True, None, [], {}, "x" * 5000]

FIELDS: dict[tuple[Any, ...], list[Any]] = {
    ("name",): ["k", "kimi-k3", "-k", "K", "k_3", "k" * 63, "k" * 64, ""],
    ("engine",): ["llamacpp", "vllm", "LLAMACPP", "", 1, None],
    ("model", "repo"): ["a/b", "a", "a/b/c", "/b", "a/.b"],
    ("model", "revision"): [
        "a" * 40,
        "A" * 40,
        "abc1234",
        "main",
        "a" * 41,
        "v1.0",
        "refs/pr/1",
        "a..b",
        "main/",
        "x.lock",
        "-main",
        "g" * 40,
        "cafe",
        "release-2026.12",
    ],
    ("model", "quant"): ["UD-Q2_K_XL", "Q4_K_M", "-x", "a/b"],
    ("model", "mmproj"): [
        "mmproj-BF16.gguf",
        "sub/m.gguf",
        "/abs.gguf",
        "../x.gguf",
        "a/../x",
        "a..b.gguf",
        "a\\b",
        "",
    ],
    ("model", "cache_dir"): PATHS,
    ("model", "endpoint"): [
        "https://hf.co",
        "http://127.0.0.1:18080",
        "HTTPS://hf.co",
        "hf.co",
        "https://",
        "ftp://hf.co",
        "",
    ],
    ("build", "source"): ["fork", "mainline", "Fork"],
    ("build", "commit"): ["b" * 40, "B" * 40, "master"],
    ("build", "cuda_architectures"): [["120"], ["90", "120a-real"], [120], [], ["sm_120"]],
    ("build", "cpu_features"): ["auto", [], ["amx"], ["avx512", "amx"], ["amx", "amx"], ["sse"], "none"],
    ("build", "patches"): [[], ["p.patch"], ["/abs.patch"], ["~/p.patch"], ["$P/p.patch"], [""]],
    ("build", "builtin_patches"): [
        [],
        ["parallel-pin", "parallel-host-read"],
        ["parallel-host-read", "parallel-pin"],
        ["parallel-pin", "parallel-pin", "parallel-host-read"],
        ["nope"],
        [""],
    ],
    ("build", "archive"): [
        "../a.tar.gz",
        "/a.tar.gz",
        "https://x/a.tar.gz",
        "~/a.tar.gz",
        "$A/a.tar.gz",
        "https://x/$a.tar.gz",
        "file:///a.tar.gz",
        "HTTPS://x/a",
        "ftp://x/a",
        "",
    ],
    ("build", "archive_sha256"): ["c" * 64, "C" * 64, "c" * 63],
    ("build", "build_number"): [0, 10473, 2**31 - 1, 2**31, -1],
    ("build", "base_images", "build"): [
        "nvidia/cuda:13.0.0-devel-ubuntu24.04",
        "reg.io:5000/a/b:t@sha256:" + "d" * 64,
        "Bad/Name",
        "a b",
    ],
    ("gpus",): ["all", [0], [0, 1], [UUID], [0, UUID], [0, 0], [UUID, UUID], [UUID.upper()], [-1], [], "0"],
    ("share_gpus",): [True, False, "yes"],
    ("serve", "host"): ["loopback", "tailscale", "0.0.0.0", "::", *IPS],
    ("serve", "port"): [1, 65535, 65536, 0],
    ("serve", "ubatch"): [1, 4096, 0, 2**31],
    ("serve", "fit_target"): [0, 4096, 2**31 - 1, 2**31, -1, [4096], [], [-1], "4096"],
    ("serve", "n_cpu_moe"): [0, 61, -1, 2**31],
    ("serve", "ctx_size"): [4096, 131072, 1048576, 1048577, 2**31 - 1, 0, -1],
    ("serve", "parallel"): [1, 8, 0],
    ("serve", "cache_ram"): [0, 8192, -1],
    ("serve", "api_key_file"): [p for p in PATHS if p not in ("~", "cost$1")],
    ("serve", "env"): [
        {},
        {"GGML_CUDA_DISABLE_GRAPHS": "1"},
        {"_X": "a b"},
        {"1A": "x"},
        {"A-B": "x"},
        {"A": 1},
        {"": "x"},
        {"A": "x" * 131000},
        {"A": "x" * 131100},
    ],
    ("serve", "extra_args"): [
        [],
        ["--jinja"],
        ["--chat-template", "a\nb"],
        [""],
        [" "],
        ["\t"],
        [1],
        ["x" * 131071],
        ["x" * 131072],
        ["é" * 65536],
    ],
    ("serve", "load_mode"): ["none", "dio", "mmap", "auto", "mlock", "None", ""],
    ("serve", "spec_draft", "device"): ["auto", "CUDA0", "CUDA7", "cuda0", "CPU"],
    ("gate", "smoke"): [True, "on"],
    ("gate", "quant", "max_kld"): [0, 0.5, 100, -0.1],
    ("gate", "quant", "min_top_token_agreement"): [0, 0.8, 1, 1.01, -0.1],
    ("systemd", "unit"): [
        "kimi-k3",
        "kimi-k3.service",
        "a@b",
        "a@",
        "a@b@c",
        "@a",
        "a b",
        "a" * 64,
        "a" * 65,
        "kimi_k3.v2",
        "",
    ],
    ("systemd", "conflicts"): [[], ["kimi-k3-interactive"], ["x.service"], [""], ["a@"]],
    ("metrics", "bind"): ["loopback", "tailscale", "0.0.0.0", *IPS],
    ("rpc", "workers", 0, "name"): ["w", "gpu-2", "W", "w" * 31, "w" * 32],
    ("rpc", "workers", 0, "docker"): [
        "ssh://u@h",
        "ssh://u@10.0.0.2:2222",
        "ssh://u@[::1]",
        "ssh://u@h:0",
        "ssh://u@h:65536",
        "ssh://u@h:",
        "ssh://h",
        "ssh://-x@h",
        "ssh://u@-h",
        "ssh://u@h/p",
        "ssh://u@h?q",
        "tcp://h",
        "http://h:1",
        "ssh://u:p@h",
        "",
    ],
    ("rpc", "workers", 0, "bind"): [
        "10.0.0.2",
        "127.0.0.1",
        "fe80::1",
        "::ffff:10.0.0.2",
        "8.8.8.8",
        "0.0.0.0",
        "localhost",
        "h",
        "",
    ],
    ("rpc", "workers", 0, "tls_dir"): ["/etc/docker/tls", "rel", "~/tls", "/a/$X", ""],
    ("rpc", "workers", 0, "cache_dir"): ["/var/cache/rpc", "rel", "~/c", "/a/${X}", ""],
    ("rpc", "workers", 0, "devices"): [["CUDA0"], ["CPU"], [], ["CUDA 0"]],
    ("rpc", "workers", 0, "gpus"): ["all", "none", [0, 1], [0, 0], [UUID.upper()]],
    ("rpc", "workers", 0, "threads"): [1, 0],
    # engine: vllm (set on the profile for these: VLLM_BASE)
    ("image", "ref"): [
        "vllm/vllm-openai:kimi-k3@sha256:" + "e" * 64,
        "127.0.0.1:5000/a/b@sha256:" + "e" * 64,
        "vllm/vllm-openai:kimi-k3",
        "vllm/vllm-openai@sha256:" + "E" * 64,
        "Bad/Name@sha256:" + "e" * 64,
        "vllm/vllm-openai",
        "127.0.0.1:5000/a/b:test",
        "a/b:t@sha256:" + "e" * 63,
    ],
    ("vllm", "tensor_parallel_size"): [1, 8, 0],
    ("vllm", "max_model_len"): [512, 131072, 1048576, 1048577],
    ("vllm", "gpu_memory_utilization"): [0.5, 0.95, 1, 1.01],
    ("vllm", "kv_cache_dtype"): ["fp8", "auto", "nvfp4", "FP8", "int3"],
    ("vllm", "max_num_seqs"): [1, 256],
    ("vllm", "enable_prefix_caching"): [True, False, "yes"],
    ("vllm", "attention_backend"): ["TOKENSPEED_MLA", "FLASH_ATTN", "flash", "A B"],
    ("vllm", "attention_config"): [
        {"use_prefill_query_quantization": True, "mla_prefill_backend": "X"},
        {"a": 1.5},
        {"a": [1]},
        {"": 1},
    ],
    ("vllm", "tool_call_parser"): ["kimi_k3", "hermes", "-x", "a b"],
    ("vllm", "any_gpu"): [True, False, "yes"],
}
# An engine: vllm profile (no model.quant, the image by digest): the base of the image and vllm fields above.
VLLM_BASE: dict[str, Any] = {
    "apiVersion": "kimik3/v1",
    "name": "k",
    "engine": "vllm",
    "model": {"repo": "a/b", "revision": "a" * 40},
    "image": {"ref": "vllm/vllm-openai:kimi-k3@sha256:" + "e" * 64},
}

# Rules that weigh one field against another (or against kimik3's own tables): the schema cannot say them, and
# docs/profile.md says so ("The cross-field rules are checked only by kimik3 validate, plan and apply").
CROSS_FIELD: dict[tuple[Any, ...], list[Any]] = {
    ("gpus",): ["none"],  # needs build.variant: cpu
    ("serve", "spec_draft", "device"): ["CUDA7"],  # must be the last GPU of the profile's gpus (here CUDA0)
    ("rpc", "workers", 0, "devices"): [["CUDA0"]],  # a CUDA device needs the worker's gpus
    ("rpc", "workers", 0, "bind"): ["8.8.8.8", "0.0.0.0"],  # rule rpc-bind-private: loopback or a private range
    ("serve", "ctx_size"): [2**31 - 1],  # rule ctx-size-limit: the trained context caps ctx_size / serve.parallel
    # not cross-field, but not sayable: the kernel's MAX_ARG_STRLEN counts UTF-8 bytes, JSON Schema characters
    ("serve", "extra_args"): [["é" * 65536]],
}


def _profile(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    tree = copy.deepcopy(VLLM_BASE if path[0] in ("image", "vllm") else BASE)
    if path[0] == "rpc":
        tree["rpc"] = {"workers": [{**WORKER, path[-1]: value}]}
        if path[-1] == "docker" and str(value).startswith("tcp://"):
            tree["rpc"]["workers"][0]["tls_dir"] = "/tls"  # tcp:// needs tls_dir (a cross-field rule)
        return tree
    if path[0] == "metrics":
        tree["metrics"] = {"port": 9100}
    if path[:2] == ("serve", "spec_draft"):
        tree["serve"] = {"spec_draft": {"model": "/d.gguf"}, "parallel": 2, "fit_target": [15360]}
        tree["gpus"] = [0]
        tree["build"] = {"patches": ["rollback.patch"]}
    cursor = tree
    for key in path[:-1]:
        cursor = cursor.setdefault(key, {})
    cursor[path[-1]] = value
    return tree


def _validate_accepts(tree: dict[str, Any]) -> tuple[bool, str]:
    try:
        parse_profile(yaml.safe_dump(tree), "p.yaml")
    except ProfileError as exc:
        return False, str(exc)
    return True, ""


CASES = [(path, value) for path, values in FIELDS.items() for value in [*values, *ANY]]


@pytest.mark.parametrize(("path", "value"), CASES, ids=lambda v: repr(v)[:30])
def test_schema_and_validate_agree_on_one_field(path: tuple[Any, ...], value: Any) -> None:
    tree = _profile(path, value)
    accepted, why = _validate_accepts(tree)
    if not accepted and repr(value) in map(repr, CROSS_FIELD.get(path, [])):
        return  # a cross-field refusal: below, the same value is checked to be one the schema accepts
    assert SCHEMA.is_valid(tree) == accepted, (
        f"{'.'.join(map(str, path))}: {value!r}: validate {'accepts' if accepted else 'refuses: ' + why}, the "
        f"schema {'accepts' if SCHEMA.is_valid(tree) else 'refuses'}"
    )


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (ROOT / "profiles").glob("*.yaml") if "\nkind: Fleet" not in p.read_text()),
    ids=lambda p: p.stem,
)
def test_schema_accepts_the_example_profiles(path: Path) -> None:
    assert SCHEMA.is_valid(load_yaml(path.read_text(), {})[0])


def test_schema_accepts_every_valid_profile_case() -> None:
    """The profile cases validate accepts (tests/cases/profile, expect: ok) are all valid for the schema too."""
    accepted = 0
    for case_path in sorted((ROOT / "tests" / "cases" / "profile").glob("*.yaml")):
        case = yaml.safe_load(case_path.read_text())
        if case["expect"] == "ok":
            tree = load_yaml(case["profile"], {})[0]  # YAML 1.2, as kimik3 reads it (`on` is a string)
            errors = [e.message for e in SCHEMA.iter_errors(tree)]
            assert errors == [], (case_path.name, errors)
            accepted += 1
    assert accepted > 10
