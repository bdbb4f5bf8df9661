"""Rules about llama-server options written past the profile's fields (serve.extra_args, serve.env): the options
kimik3 renders itself, those that break the serving contract, and argv shape. `env_finding` judges one serve.env
variable; the generic secrets rule asks it for every profile (the registry's `server_env`:
model/profile_rules/no_secrets.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import FIXED, NEVER_SECRETS, Finding, error, warning

# llama-server options kimik3 renders itself: (flags, their environment variables (reference/llama-cpp.md §1.1;
# llama-server reads LLAMA_ARG_* as options), what to write instead (None: fixed, not a knob at all)). Both the flag
# and its variable are refused: the variable is a second way to the same option, and for an option kimik3 renders
# only sometimes (--mmproj, --cache-ram, a draft) or not at all (-hf: another model) it is the one that counts.
_OWNED: tuple[tuple[tuple[str, ...], tuple[str, ...], str | None], ...] = (
    (
        (
            "-m",
            "--model",
            "-mu",
            "--model-url",
            "-hf",
            "-hfr",
            "--hf-repo",
            "-hff",
            "--hf-file",
            "-dr",
            "--docker-repo",
        ),
        ("LLAMA_ARG_MODEL", "LLAMA_ARG_MODEL_URL", "LLAMA_ARG_HF_REPO", "LLAMA_ARG_HF_FILE", "LLAMA_ARG_DOCKER_REPO"),
        "use model.repo / model.quant (the verified, pinned download)",
    ),
    (("--host",), ("LLAMA_ARG_HOST",), "use serve.host"),
    (("--port",), ("LLAMA_ARG_PORT",), "use serve.port"),
    (("--api-key", "--api-key-file"), ("LLAMA_ARG_API_KEY_FILE",), f"use serve.api_key_file ({NEVER_SECRETS})"),
    (("-hft", "--hf-token"), (), f"tokens come from the environment ({NEVER_SECRETS})"),
    (("-a", "--alias"), ("LLAMA_ARG_ALIAS",), "the served model id is the profile's name"),
    # The container's GPUs are `gpus`; llama.cpp indexes --fit-target and the draft device over these devices.
    (("-dev", "--device"), ("LLAMA_ARG_DEVICE",), "use gpus (the container sees exactly those GPUs)"),
    (("--numa",), ("LLAMA_ARG_NUMA",), None),
    (("-ctk", "--cache-type-k", "-ctv", "--cache-type-v"), ("LLAMA_ARG_CACHE_TYPE_K", "LLAMA_ARG_CACHE_TYPE_V"), None),
    (("-t", "--threads", "-tb", "--threads-batch"), ("LLAMA_ARG_THREADS",), None),
    (
        ("-lm", "--load-mode", "--mmap", "--no-mmap", "--mlock"),
        ("LLAMA_ARG_LOAD_MODE",),
        "use serve.load_mode (none or dio)",
    ),
    (
        ("-fit", "--fit", "-fitt", "--fit-target"),
        ("LLAMA_ARG_FIT", "LLAMA_ARG_FIT_TARGET"),
        "use serve.fit_target (or serve.n_cpu_moe for a manual split)",
    ),
    (
        ("-ngl", "--gpu-layers", "--n-gpu-layers", "-ncmoe", "--n-cpu-moe", "-cmoe", "--cpu-moe"),
        ("LLAMA_ARG_N_GPU_LAYERS", "LLAMA_ARG_N_CPU_MOE", "LLAMA_ARG_CPU_MOE"),
        "use serve.n_cpu_moe",
    ),
    (("-b", "--batch-size"), ("LLAMA_ARG_BATCH",), "use serve.batch"),
    (("-ub", "--ubatch-size"), ("LLAMA_ARG_UBATCH",), "use serve.ubatch"),
    (("-c", "--ctx-size"), ("LLAMA_ARG_CTX_SIZE",), "use serve.ctx_size"),
    (("-np", "--parallel"), ("LLAMA_ARG_N_PARALLEL",), "use serve.parallel"),
    (("-cram", "--cache-ram"), ("LLAMA_ARG_CACHE_RAM",), "use serve.cache_ram"),
    (("--metrics",), ("LLAMA_ARG_ENDPOINT_METRICS",), "it is always on"),
    (("-mm", "--mmproj"), ("LLAMA_ARG_MMPROJ",), "use model.mmproj"),
    (
        (
            "-md",
            "--model-draft",
            "--spec-draft-model",
            "-devd",
            "--device-draft",
            "--spec-draft-device",
            "-hfd",
            "-hfrd",
            "--hf-repo-draft",
            "--spec-draft-hf",
        ),
        ("LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_SPEC_DRAFT_HF_REPO"),
        "use serve.spec_draft",
    ),
)
OWNED_FLAGS: dict[str, str | None] = {flag: instead for flags, _, instead in _OWNED for flag in flags}
# llama-server options kimik3 does not render but that break what a deployment is (b11434 common/arg.cpp): the
# server prints and exits, or serves something kimik3's health wait, verify and exporter cannot reach or check
# (apply would wait out the health timeout, fail verify and revert). (flags, their variables, why).
_NOT_SERVING: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (
        ("-h", "--help", "--usage", "--version", "-cl", "--cache-list", "--completion-bash", "--list-devices"),
        (),
        "makes llama-server print and exit: it would never serve (the launch fails its health wait)",
    ),
    (
        ("--api-prefix",),
        ("LLAMA_ARG_API_PREFIX",),
        "moves every endpoint under a prefix: kimik3's health wait, verify and exporter call /health, /v1 and /metrics",
    ),
    (
        ("--embedding", "--embeddings", "--rerank", "--reranking"),
        ("LLAMA_ARG_EMBEDDINGS", "LLAMA_ARG_RERANKING"),
        "restricts the server to embeddings/reranking: a Kimi-K3 deployment serves chat (verify would fail)",
    ),
    (
        ("--ssl-key-file", "--ssl-cert-file"),
        ("LLAMA_ARG_SSL_KEY_FILE", "LLAMA_ARG_SSL_CERT_FILE"),
        "serves https: kimik3's health wait, verify and exporter speak http to it; terminate TLS in front of it",
    ),
)
NOT_SERVING_FLAGS: dict[str, str] = {flag: why for flags, _, why in _NOT_SERVING for flag in flags}
NOT_SERVING_ENV: dict[str, str] = {env: why for _, envs, why in _NOT_SERVING for env in envs}
OWNED_ENV: dict[str, str | None] = {env: instead for _, envs, instead in _OWNED for env in envs}


def env_finding(key: str) -> Finding | None:
    """What serve.env's `key` does to llama-server when it reads it as an option: refused when it sets what kimik3
    renders or breaks the serving contract, warned for any other LLAMA_ARG_*; None when llama-server ignores it."""
    upper = key.upper()
    if upper in OWNED_ENV:
        # rule: owned-env
        # reference/llama-cpp.md §1.0: llama-server reads it as the option kimik3 renders; where kimik3 renders
        # that option only sometimes (or never: -hf), the variable is the one that counts.
        instead = OWNED_ENV[upper]
        return error(
            ("serve", "env", key),
            f"{key} sets a llama-server option kimik3 renders itself: "
            + (instead if instead is not None else FIXED.removeprefix("is ")),
        )
    if key in NOT_SERVING_ENV:
        # rule: serving-contract-flags
        # llama-server reads the variable as the option (reference/llama-cpp.md §1.0).
        return error(("serve", "env", key), f"{key} {NOT_SERVING_ENV[key]}")
    if upper.startswith("LLAMA_ARG_"):
        # rule: llama-arg-env
        # llama-cpp.md §1.0: env sets llama-server options behind the CLI (list options even append).
        return warning(
            ("serve", "env", key), "sets a llama-server option behind kimik3's argv; prefer the profile field"
        )
    return None


def _joined_short_flag(flag: str) -> str | None:
    """The owned short flag `flag` glues a number to ('-ub512' -> '-ub'), or None."""
    if flag.startswith("--") or flag in OWNED_FLAGS:
        return None
    match = re.fullmatch(r"(-[a-z]+?)(-?[0-9][0-9.,]*)", flag)
    return match.group(1) if match and match.group(1) in OWNED_FLAGS else None


def extra_args(p: Profile) -> Iterator[Finding]:
    for i, arg in enumerate(p.serve.extra_args):
        if not arg.strip():
            # rule: extra-args-argv
            # An empty item is an empty argv word: llama-server stops at it ("invalid argument"), the launch fails.
            yield error(
                ("serve", "extra_args", i), "is empty (or blank): each item is one argv word passed as is; drop it"
            )
            continue
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and flag.split() != [flag]:
            # rule: extra-args-argv
            # Each item is one argv word, never split by a shell: '--ubatch-size 512' is one unknown flag to
            # llama-server (the launch fails), and a flag hidden behind a space would pass the owned-flag check.
            words = flag.split()
            yield error(
                ("serve", "extra_args", i),
                f"{arg!r} is one argv item with a space in its flag: each item is "
                "passed as is, never through a shell; write one item per word" + (f", e.g. {words!r}" if words else ""),
            )
            flag = words[0] if words else flag
        if flag.startswith("--"):
            flag = flag.replace("_", "-")  # llama-cpp.md §1.0: llama-server reads --foo_bar as --foo-bar
        joined = _joined_short_flag(flag)
        if joined is not None:
            # rule: extra-args-argv
            # llama-server takes a flag's value as the next argv item: '-ub512' is an unknown flag (the launch fails),
            # and it names an owned flag the check below would not see.
            yield error(
                ("serve", "extra_args", i),
                f"{arg!r} joins a value to {joined}: llama-server reads the value "
                f"as its own item ({joined} {flag[len(joined) :]}), and {joined} is set by kimik3: "
                f"{OWNED_FLAGS[joined] or FIXED.removeprefix('is ')}",
            )
            continue
        if flag in NOT_SERVING_FLAGS:
            # rule: serving-contract-flags
            # Passed through, it would launch a server that never answers kimik3's checks: refuse it up front.
            yield error(("serve", "extra_args", i), f"{flag} {NOT_SERVING_FLAGS[flag]}")
            continue
        if flag not in OWNED_FLAGS:
            continue
        instead = OWNED_FLAGS[flag]
        # rule: fixed-flags
        # Seed 000: kimik3 renders these itself; a second copy would fight it (last one wins).
        message = f"{flag} {FIXED}" if instead is None else f"{flag} is set by kimik3: {instead}"
        yield error(("serve", "extra_args", i), message)


def split_mode(p: Profile) -> Iterator[Finding]:
    args = p.serve.extra_args
    for i, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if flag not in ("-sm", "--split-mode", "--split_mode"):
            continue
        value = value or (args[i + 1] if i + 1 < len(args) else "")
        if value in ("row", "tensor"):
            # rule: split-mode
            # reference/llama-cpp.md §1.3: kimi-k3 has no tensor split; CUDA dropped row split buffers.
            yield error(
                ("serve", "extra_args", i),
                f"-sm {value} fails to load kimi-k3 (tensor: not implemented for "
                "the architecture; row: CUDA has no split buffers): keep the default layer split",
            )
