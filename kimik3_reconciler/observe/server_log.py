"""Why a llama-server exited (a failed launch, or a crash while serving), read from its exit and its last log
lines (pure; reference/llama-cpp.md §2.4)."""

from __future__ import annotations

from dataclasses import dataclass

# llama-server's own lines (tools/server, ggml, gguf): the first table that matches names the cause.
_BIND = ("couldn't bind", "address already in use", "exiting due to http server error")
# ggml-cuda.cu ggml_cuda_error(): "CUDA error: out of memory", then "  current device: N, in function alloc at …"
# (the compute scratch pool growing on a request), then a GGML_ABORT: SIGABRT, exit 134.
_CUDA_OOM = "cuda error: out of memory"
_OOM = ("failed to allocate", "cudamalloc", "out of memory", "cannot allocate memory")
_SIGNALLED = {137: "exit 137: SIGKILL", 143: "exit 143: SIGTERM"}
_BAD_GGUF = ("invalid magic", "gguf_init", "failed to load model", "error loading model", "failed to read")
# Seed 000 "When startup crashes" and step 5: the fix for the scratch pool's OOM.
CUDA_OOM_FIX = (
    "raise serve.fit_target (the VRAM margin --fit leaves free per GPU for compute buffers; seed "
    "000 step 5: all-VRAM needs --fit-target 6144) and use serve.ubatch 2048"
)


# Proof the server had loaded, in the tail itself: its "model loaded" line, or a request's own lines (a slot
# taking a task), which sit just before the crash they caused. After a long load with many requests the
# "model loaded" line has left a 200-line tail; the request that crashed it has not.
_LOADED = "llama_server: model loaded"
_REQUEST = ("launch_slot_", "processing task", "new prompt, n_ctx_slot")


def _served(text: str) -> bool:
    return _LOADED in text or any(marker in text for marker in _REQUEST)


@dataclass(frozen=True)
class LoadCause:
    """A failed launch's or crash's cause (`bind`, `cuda-oom`, `oom`, `bad-gguf`, `killed`, `other`) and its
    headline."""

    cause: str
    headline: str


def _unreadable(local_model: str | None) -> str:
    """The bad-GGUF headline and its fix: a cached hub file can be re-hashed and fetched again; a local file
    (model.local_path) cannot: kimik3 recorded its sha256 when it first served it, a re-hash finds the same bytes."""
    if local_model is None:
        return (
            "failed while loading the model: the GGUF could not be read (truncated or corrupt shard?); "
            "`kimik3 apply --verify` re-hashes the cached files"
        )
    return (
        f"failed while loading the model: the GGUF could not be read. It is model.local_path ({local_model}), "
        "your own file, served with the sha256 kimik3 recorded for it, so re-hashing (`apply --verify`) finds the "
        "same bytes and kimik3 has nothing to download: the file itself is bad (cut short or damaged when it was "
        "made or copied, or a GGUF this llama.cpp build cannot read). Make or copy it again (`gguf-dump` from the "
        "gguf package reads its header and tensor list), then apply: the changed file is re-hashed and served"
    )


def classify_load_failure(
    exit_code: int | None, oom_killed: bool, log_tail: str, while_serving: bool = False, local_model: str | None = None
) -> LoadCause:
    """Name the cause: a bind failure is not a load failure, and OOM needs other flags than a bad GGUF does.
    `while_serving`: the server had loaded and answered /health (verify's requests were running); `local_model`:
    model.local_path when the profile serves a local file (its fix differs from a cached hub file's)."""
    text = log_tail.lower()
    if any(marker in text for marker in _BIND):
        return LoadCause(
            "bind",
            "could not bind its port (address already in use?): another process listens on "
            "it; stop that process or change serve.port",
        )
    # rule: cuda-oom-first-request
    # Checked before host OOM: its fix is the VRAM margin, not a smaller context or quant (seed 000 "When
    # startup crashes": CUDA error: out of memory in alloc on the first request after an all-VRAM load).
    if _CUDA_OOM in text:
        when = "on a request after a successful load" if while_serving or _served(text) else "while loading"
        return LoadCause(
            "cuda-oom",
            f"crashed with CUDA error: out of memory {when} (the CUDA scratch pool found no VRAM left): {CUDA_OOM_FIX}",
        )
    # Out of memory only when it says so: Docker's State.OOMKilled (the kernel's OOM killer or the memory
    # limit) or llama.cpp's own allocation failure. A bare exit 137 is any SIGKILL: `docker stop`'s timeout,
    # a stopping dockerd, a kill by hand; calling that OOM sends the operator to shrink a model that fits.
    if oom_killed or any(marker in text for marker in _OOM):
        return LoadCause(
            "oom",
            "ran out of memory while loading the model (OOM-killed / failed to allocate): lower "
            "serve.ctx_size or fit_target, or pick a smaller quant",
        )
    if any(marker in text for marker in _BAD_GGUF):
        return LoadCause("bad-gguf", _unreadable(local_model))
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


def crash_cause(oom_killed: bool, log_tail: str, local_model: str | None = None) -> str | None:
    """An exited container's cause when its log (or the kernel's OOM kill) names one, for `plan` and `status`;
    None otherwise. The exit code alone is not used: 137 is also what a `docker stop` timeout leaves."""
    cause = classify_load_failure(None, oom_killed, log_tail, local_model=local_model)
    return None if cause.cause == "other" else f"{cause.headline} [{cause.cause}]"
