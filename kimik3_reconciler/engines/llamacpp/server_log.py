"""What llama-server's own log lines say of a failed launch or a crash (tools/server, ggml, gguf; reference/llama-cpp.md
§2.4): the signs observe/server_log.py classifies a failure by (engines/base.py's LogSigns)."""

from __future__ import annotations

from kimik3_reconciler.engines.base import LogSigns

# ggml-cuda.cu ggml_cuda_error(): "CUDA error: out of memory", then "  current device: N, in function alloc at …"
# (the compute scratch pool growing on a request), then a GGML_ABORT: SIGABRT, exit 134.
# Seed 000 "When startup crashes" and step 5: the fix for the scratch pool's OOM.
CUDA_OOM_FIX = (
    "raise serve.fit_target (the VRAM margin --fit leaves free per GPU for compute buffers; seed "
    "000 step 5: all-VRAM needs --fit-target 6144) and use serve.ubatch 2048"
)

# The bad-GGUF headline and its fix: a cached hub file can be re-hashed and fetched again; a local file
# (model.local_path) cannot: kimik3 recorded its sha256 when it first served it, a re-hash finds the same bytes.
_UNREADABLE = (
    "failed while loading the model: the GGUF could not be read (truncated or corrupt shard?); "
    "`kimik3 apply --verify` re-hashes the cached files"
)
_UNREADABLE_LOCAL = (
    "failed while loading the model: the GGUF could not be read. It is model.local_path ({local_model}), "
    "your own file, served with the sha256 kimik3 recorded for it, so re-hashing (`apply --verify`) finds the "
    "same bytes and kimik3 has nothing to download: the file itself is bad (cut short or damaged when it was "
    "made or copied, or a GGUF this llama.cpp build cannot read). Make or copy it again (`gguf-dump` from the "
    "gguf package reads its header and tensor list), then apply: the changed file is re-hashed and served"
)

SIGNS = LogSigns(
    bind=("couldn't bind", "address already in use", "exiting due to http server error"),
    gpu_oom=("cuda error: out of memory",),
    gpu_oom_fix=CUDA_OOM_FIX,
    oom=("failed to allocate", "cudamalloc", "out of memory", "cannot allocate memory"),
    bad_model=("invalid magic", "gguf_init", "failed to load model", "error loading model", "failed to read"),
    bad_model_cause="bad-gguf",
    unreadable=_UNREADABLE,
    unreadable_local=_UNREADABLE_LOCAL,
    # Proof the server had loaded, in the tail itself: its "model loaded" line, or a request's own lines (a slot
    # taking a task), which sit just before the crash they caused. After a long load with many requests the
    # "model loaded" line has left a 200-line tail; the request that crashed it has not.
    served=("llama_server: model loaded", "launch_slot_", "processing task", "new prompt, n_ctx_slot"),
)
