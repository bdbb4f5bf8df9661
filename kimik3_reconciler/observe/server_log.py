"""Why a llama-server launch failed, read from its exit and its last log lines (pure; reference/llama-cpp.md)."""

from __future__ import annotations

from dataclasses import dataclass

# llama-server's own lines (tools/server, ggml, gguf): the first table that matches names the cause.
_BIND = ("couldn't bind", "address already in use", "exiting due to http server error")
_OOM = ("failed to allocate", "cudamalloc", "out of memory", "cannot allocate memory")
_BAD_GGUF = ("invalid magic", "gguf_init", "failed to load model", "error loading model", "failed to read")


@dataclass(frozen=True)
class LoadCause:
    """A failed launch's cause (`bind`, `oom`, `bad-gguf`, `other`) and the headline that says it."""

    cause: str
    headline: str


def classify_load_failure(exit_code: int | None, oom_killed: bool, log_tail: str) -> LoadCause:
    """Name the cause: a bind failure is not a load failure, and OOM needs other flags than a bad GGUF does."""
    text = log_tail.lower()
    if any(marker in text for marker in _BIND):
        return LoadCause("bind", "could not bind its port (address already in use?): another process listens on "
                                 "it; stop that process or change serve.port")
    # 137 = SIGKILL: the kernel's OOM killer (or docker's memory limit) is the usual sender during a load.
    if oom_killed or exit_code == 137 or any(marker in text for marker in _OOM):
        return LoadCause("oom", "ran out of memory while loading the model (exit 137 / failed to allocate): lower "
                                "serve.ctx_size or fit_target, or pick a smaller quant")
    if any(marker in text for marker in _BAD_GGUF):
        return LoadCause("bad-gguf", "failed while loading the model: the GGUF could not be read (truncated or "
                                     "corrupt shard?); `kimik3 apply --verify` re-hashes the cached files")
    return LoadCause("other", "exited while loading the model")
