"""llama-server's command line (seed 000 step 5): the owned fixed flags, the placement (--fit or the manual
--n-cpu-moe split) and the argv rendered from the launch input. The smoke test and the quant gate's
llama-perplexity take the owned flags from here too, through the engine (one source: none drifts)."""

from __future__ import annotations

from pathlib import PurePosixPath

from kimik3_reconciler.model.facts import ModelFact
from kimik3_reconciler.model.labels import API_KEY_MOUNT, DRAFT_MOUNT, SLOTS_MOUNT
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import ServeSpec

# Seed 000 "Runtime requirements that are NOT tunable": leaving any out measured as a
# 20+-minute single-request stall or a crash, so they are fixed, not knobs.
# rule: fixed-flags, kv-types-equal
FIXED_FLAGS = ("--numa", "distribute", "--cache-type-k", "f16", "--cache-type-v", "f16")


def owned_flags(threads: int, load_mode: str = "none") -> tuple[str, ...]:
    """The owned, fixed flags every llama.cpp process kimik3 starts on the real model carries: the server,
    the smoke test and the quant gate's llama-perplexity (one source, so none can drift from the others).
    `load_mode` is serve.load_mode: none or dio, never a mapped mode (profile rule load-mode)."""
    # Seed 000: --threads/--threads-batch = physical cores, not hardware threads.
    # rule: load-mode
    # Seed 000: --load-mode none is required (mapped: a 20+-minute stall); dio reads the same bytes around the
    # page cache. Rendered at the same place in argv as before, so `none` keeps every fingerprint.
    return (*FIXED_FLAGS, "--load-mode", load_mode, "--threads", str(threads), "--threads-batch", str(threads))


def first_shard(model: ModelFact) -> str:
    """The file llama-server opens: the -00001-of- shard, or the quant folder's only GGUF."""
    ggufs = sorted(f.path for f in model.files if f.path.startswith(model.quant + "/") and f.path.endswith(".gguf"))
    firsts = [p for p in ggufs if "-00001-of-" in p]
    return (firsts or ggufs or [f"{model.quant}/<unknown>.gguf"])[0]


def placement_flags(serve: ServeSpec, manual_split: bool = True) -> tuple[str, ...]:
    """--fit with the profile's margins, or the manual split (`manual_split`: honour serve.n_cpu_moe, which
    was tuned for the served quant; another quant on the same GPUs, the gate's reference, uses --fit)."""
    if serve.n_cpu_moe is not None and manual_split:
        # A deterministic split instead of --fit's live choice (seed 000 "Tuning --n-cpu-moe").
        return ("--fit", "off", "-ngl", "999", "--n-cpu-moe", str(serve.n_cpu_moe))
    targets = serve.fit_target if isinstance(serve.fit_target, list) else [serve.fit_target]
    return ("--fit", "on", "--fit-target", ",".join(str(t) for t in targets))


def server_argv(value: LaunchInput, snapshot: str) -> tuple[str, ...]:
    """llama-server's argv (the image's entrypoint): the model's first shard in the mounted `snapshot`, the owned
    flags, the placement, the profile's serve section; `serve.extra_args` last."""
    serve = value.serve
    argv: list[str] = [
        "-m",
        f"{snapshot}/{value.model.shard}",
        "--host",
        value.bind,
        "--port",
        str(serve.port),
        "--alias",
        value.name,
        *owned_flags(value.threads, serve.load_mode),
        "--batch-size",
        str(serve.batch),
        "--ubatch-size",
        str(serve.ubatch),
        "--ctx-size",
        str(serve.ctx_size),
        "--parallel",
        str(serve.parallel),
        *placement_flags(serve),
        "--metrics",
        "--log-colors",
        "off",
    ]
    if serve.cache_ram is not None:
        argv += ["--cache-ram", str(serve.cache_ram)]
    if serve.slot_save:
        # Only where the profile asks: the flag is in the fingerprint, so an argv that always carried it would
        # replace every server converged before it; and the saved files hold users' prompts' KV cache.
        argv += ["--slot-save-path", SLOTS_MOUNT]
    if serve.api_key_file:
        # rule: no-secrets
        # The key stays in a read-only mounted file: never in argv, env or docker inspect.
        argv += ["--api-key-file", API_KEY_MOUNT]
    if serve.spec_draft is not None:
        argv += [
            "--spec-draft-model",
            f"{DRAFT_MOUNT}/{PurePosixPath(serve.spec_draft.model).name}",
            "--spec-type",
            serve.spec_draft.type,
        ]
        argv += ["--spec-draft-device", value.draft_device] if value.draft_device else []
    if value.model.mmproj:
        argv += ["--mmproj", f"{snapshot}/{value.model.mmproj}"]
    if value.rpc:
        # The RPC backend adds one device per worker; layers are split over all devices by free memory.
        argv += ["--rpc", ",".join(value.rpc)]
        # b11434 logs load_tensors' per-device buffer lines at verbosity 4 only: verify reads them to prove
        # that every RPC device holds layers (verify/workers.py).
        argv += ["--log-verbosity", "4"]
    return (*argv, *serve.extra_args)
