"""Why a server exited (a failed launch, or a crash while serving), read from its exit and its last log lines by the
signs its engine gives (engines/base.py LogSigns; llama.cpp's: engines/llamacpp/server_log.py). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kimik3_reconciler.engines.base import LogSigns

_SIGNALLED = {137: "exit 137: SIGKILL", 143: "exit 143: SIGTERM"}
# How much of a failed server's log `first_error` reads: a Python server's start (vLLM's engine core, Ray's
# placement) prints hundreds of lines between the first error and its exit.
ROOT_LOG_TAIL = 5000
_SHOWN = 300  # characters of that line in a refusal


@dataclass(frozen=True)
class LoadCause:
    """A failed launch's or crash's cause (`bind`, `cuda-oom`, `oom`, the engine's bad-model cause (`bad-gguf`),
    `killed`, `other`) and its headline."""

    cause: str
    headline: str


def classify_load_failure(
    exit_code: int | None,
    oom_killed: bool,
    log_tail: str,
    signs: LogSigns,
    while_serving: bool = False,
    local_model: str | None = None,
) -> LoadCause:
    """Name the cause: a bind failure is not a load failure, and OOM needs other flags than a bad model file does.
    `signs`: the engine's (its log's lines); `while_serving`: the server had loaded and answered /health (verify's
    requests were running); `local_model`: model.local_path when the profile serves a local file (its fix differs
    from a cached hub file's)."""
    text = log_tail.lower()
    if any(marker in text for marker in signs.bind):
        return LoadCause(
            "bind",
            "could not bind its port (address already in use?): another process listens on "
            "it; stop that process or change serve.port",
        )
    # rule: cuda-oom-first-request
    # Checked before host OOM: its fix is the VRAM margin, not a smaller context or quant (seed 000 "When
    # startup crashes": CUDA error: out of memory in alloc on the first request after an all-VRAM load).
    if any(marker in text for marker in signs.gpu_oom):
        served = while_serving or any(marker in text for marker in signs.served)
        when = "on a request after a successful load" if served else "while loading"
        return LoadCause(
            "cuda-oom",
            f"crashed with CUDA error: out of memory {when} (the CUDA scratch pool found no VRAM left): "
            f"{signs.gpu_oom_fix}",
        )
    # Out of memory only when it says so: Docker's State.OOMKilled (the kernel's OOM killer or the memory
    # limit) or the server's own allocation failure. A bare exit 137 is any SIGKILL: `docker stop`'s timeout,
    # a stopping dockerd, a kill by hand; calling that OOM sends the operator to shrink a model that fits.
    if oom_killed or any(marker in text for marker in signs.oom):
        return LoadCause(
            "oom",
            "ran out of memory while loading the model (OOM-killed / failed to allocate): lower "
            "serve.ctx_size or fit_target, or pick a smaller quant",
        )
    if any(marker in text for marker in signs.bad_model):
        headline = signs.unreadable if local_model is None else signs.unreadable_local.format(local_model=local_model)
        return LoadCause(signs.bad_model_cause, headline)
    if exit_code in _SIGNALLED:
        when = "while serving" if while_serving else "while loading the model"
        return LoadCause(
            "killed",
            f"was stopped by a signal {when} ({_SIGNALLED[exit_code]}, not out of memory: "
            "Docker did not report an OOM kill): a `docker stop`, a dockerd restart or a "
            "kill from outside; the next apply starts it again",
        )
    if while_serving:
        return LoadCause("other", "exited while serving a request")
    return LoadCause("other", "exited while loading the model")


def crash_cause(oom_killed: bool, log_tail: str, signs: LogSigns, local_model: str | None = None) -> str | None:
    """An exited container's cause when its log (or the kernel's OOM kill) names one, for `plan` and `status`;
    None otherwise. The exit code alone is not used: 137 is also what a `docker stop` timeout leaves."""
    cause = classify_load_failure(None, oom_killed, log_tail, signs, local_model=local_model)
    return None if cause.cause == "other" else f"{cause.headline} [{cause.cause}]"


def first_error(log: str, signs: LogSigns) -> str | None:
    """The first line of `log` that the engine's `root` sign matches (its first error: the tracebacks that follow
    are its consequences), cut to a few hundred characters; None without a sign or a match."""
    if not signs.root:
        return None
    pattern = re.compile(signs.root)
    line = next((line.strip() for line in log.splitlines() if pattern.search(line)), None)
    return line[:_SHOWN] if line else None
