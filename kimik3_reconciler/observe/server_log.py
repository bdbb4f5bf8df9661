"""Why a llama-server launch failed, read from its exit and its last log lines (pure; reference/llama-cpp.md)."""

from __future__ import annotations

from dataclasses import dataclass

# llama-server's own lines (tools/server, ggml, gguf): the first table that matches names the cause.
_BIND = ("couldn't bind", "address already in use", "exiting due to http server error")
_OOM = ("failed to allocate", "cudamalloc", "out of memory", "cannot allocate memory")
_SIGNALLED = {137: "exit 137: SIGKILL", 143: "exit 143: SIGTERM"}
_BAD_GGUF = ("invalid magic", "gguf_init", "failed to load model", "error loading model", "failed to read")


@dataclass(frozen=True)
class LoadCause:
    """A failed launch's cause (`bind`, `oom`, `bad-gguf`, `killed`, `other`) and the headline that says it."""

    cause: str
    headline: str


def classify_load_failure(exit_code: int | None, oom_killed: bool, log_tail: str) -> LoadCause:
    """Name the cause: a bind failure is not a load failure, and OOM needs other flags than a bad GGUF does."""
    text = log_tail.lower()
    if any(marker in text for marker in _BIND):
        return LoadCause("bind", "could not bind its port (address already in use?): another process listens on "
                                 "it; stop that process or change serve.port")
    # Out of memory only when it says so: Docker's State.OOMKilled (the kernel's OOM killer or the memory
    # limit) or llama.cpp's own allocation failure. A bare exit 137 is any SIGKILL: `docker stop`'s timeout,
    # a stopping dockerd, a kill by hand; calling that OOM sends the operator to shrink a model that fits.
    if oom_killed or any(marker in text for marker in _OOM):
        return LoadCause("oom", "ran out of memory while loading the model (OOM-killed / failed to allocate): lower "
                                "serve.ctx_size or fit_target, or pick a smaller quant")
    if any(marker in text for marker in _BAD_GGUF):
        return LoadCause("bad-gguf", "failed while loading the model: the GGUF could not be read (truncated or "
                                     "corrupt shard?); `kimik3 apply --verify` re-hashes the cached files")
    if exit_code in _SIGNALLED:
        return LoadCause("killed", f"was stopped by a signal while loading the model ({_SIGNALLED[exit_code]}, "
                                   "not out of memory: Docker did not report an OOM kill): a `docker stop`, a "
                                   "dockerd restart or a kill from outside; the next apply starts it again")
    return LoadCause("other", "exited while loading the model")
