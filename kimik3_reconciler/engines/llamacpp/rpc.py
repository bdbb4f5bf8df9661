"""llama.cpp's RPC worker (engines/base.py WorkerServer): ggml-rpc-server from the profile's own image on each host
of `rpc.workers`, its flags, and the folder variable its tensor cache lives under."""

from __future__ import annotations

from kimik3_reconciler.model.profile import RpcWorker

RPC_SERVER = "/app/ggml-rpc-server"  # Dockerfile.llamacpp copies it beside llama-server


class RpcServer:
    # rpc-server prints its devices with printf: line-buffer stdout, or `docker logs` shows nothing until 4 KiB
    # accumulate (the device list is what observe reads the worker's memory from).
    entrypoint = ("stdbuf", "-oL", RPC_SERVER)
    build_cost = "compile llama.cpp on the worker (minutes)"

    def argv(self, worker: RpcWorker) -> tuple[str, ...]:
        argv = ["-H", worker.bind, "-p", str(worker.port)]
        if worker.threads is not None:
            argv += ["-t", str(worker.threads)]
        if worker.devices:
            argv += ["-d", ",".join(worker.devices)]
        if worker.cache:
            argv += ["-c"]
        return tuple(argv)

    def env(self, cache: str) -> tuple[tuple[str, str], ...]:
        # rpc-server keeps its tensor cache under $LLAMA_CACHE/rpc (tools/rpc/README.md "Local cache").
        return (("LLAMA_CACHE", cache),)


WORKER = RpcServer()
