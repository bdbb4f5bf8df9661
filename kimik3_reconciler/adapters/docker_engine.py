"""The Docker engine: reads over the unix socket (adapters/docker_socket.py) or through the docker SDK, writes
through the SDK; errors become errors.py's, transient ones are retried.

The SDK (and requests, urllib3) is imported when first needed, so a no-op plan on the local socket
never loads it (docs/design.md "Observation costs")."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenacity import RetryCallState, retry, retry_if_exception_type, stop_after_delay, wait_exponential

from kimik3_reconciler import logs
from kimik3_reconciler.adapters.docker_socket import EngineApiError, EngineSocket, EngineUnreachable, engine_socket
from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import BuildFailed, Kimik3Error, PermanentError, TransientError
from kimik3_reconciler.model.specs import ContainerSpec, ImageBuild
from kimik3_reconciler.ports import LineSink

if TYPE_CHECKING:
    import docker

# A daemon restart (systemctl restart docker, an upgrade) takes dockerd ~13 s to stop a loading server plus its
# own start: keep trying well past that, so a restart during a 17-minute load does not fail the apply.
DAEMON_RESTART_S = 90.0


def _say_retrying(state: RetryCallState) -> None:
    """One line per retry: what failed, and how long kimik3 keeps trying (an operator must not guess)."""
    error = state.outcome.exception() if state.outcome else None
    waited = state.seconds_since_start or 0.0
    logs.logger("kimik3").warning(
        "docker-retry", call=getattr(state.fn, "__name__", "docker"),
        message=f"{error}: the docker daemon is not answering; kimik3 keeps trying for {DAEMON_RESTART_S:.0f} s "
                f"in all ({waited:.0f} s so far, attempt {state.attempt_number})")


_transient = retry(retry=retry_if_exception_type(TransientError), stop=stop_after_delay(DAEMON_RESTART_S),
                   wait=wait_exponential(multiplier=0.5, max=5), before_sleep=_say_retrying, reraise=True)


def _docker_error(exc: Exception) -> Kimik3Error | None:
    # The socket reader's two classes first: they need no SDK import.
    if isinstance(exc, EngineUnreachable):
        return TransientError(f"docker daemon not answering: {exc}")
    if isinstance(exc, EngineApiError):
        return TransientError(f"docker daemon error: {exc.message}") if exc.is_server_error() else PermanentError(
            f"docker: {exc}")
    import docker.errors  # an SDK call raised (it is loaded then), or an error of no one's: a bug passes below
    import requests.exceptions

    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        return TransientError(f"docker daemon not answering: {exc}")
    if isinstance(exc, docker.errors.APIError) and exc.is_server_error():
        return TransientError(f"docker daemon error: {exc.explanation or exc}")
    if isinstance(exc, docker.errors.DockerException):
        return PermanentError(f"docker: {exc}")
    return None


def _absent(exc: PermanentError, sdk_class: str = "NotFound") -> bool:
    """Whether a PermanentError says the object does not exist (404): the docker-side cause tells."""
    cause = exc.__cause__
    if isinstance(cause, EngineApiError):
        return cause.status == 404
    import docker.errors

    return isinstance(cause, getattr(docker.errors, sdk_class))


class DockerEngine:
    def __init__(self, base_url: str | None = None):
        self._base_url = base_url
        self._client: docker.DockerClient | None = None
        self._reads: Any = None  # EngineSocket, or the SDK's APIClient: the same read calls and answers

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            import docker
            import docker.errors

            try:
                self._client = (docker.DockerClient(base_url=self._base_url, timeout=120) if self._base_url
                                else docker.from_env(timeout=120))
            except docker.errors.DockerException as exc:
                raise TransientError(f"cannot reach the docker daemon: {exc}") from exc
        return self._client

    @property
    def reads(self) -> Any:
        """Where reads go: the daemon's unix socket when the SDK would use one (docker_socket.engine_socket),
        else the SDK's own APIClient (tcp, ssh, TLS, a named context)."""
        if self._reads is None:
            path = engine_socket(self._base_url)
            self._reads = EngineSocket(path, timeout=120) if path else self.client.api
        return self._reads

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with translated(_docker_error):
            return fn(*args, **kwargs)

    def _inspect(self, call: str, ref: str) -> dict[str, Any] | None:
        try:
            return self._call(getattr(self.reads, call), ref)
        except PermanentError as exc:
            if _absent(exc):
                return None
            raise

    @_transient
    def info(self) -> dict[str, Any]:
        return self._call(self.reads.info)

    @_transient
    def list_images(self, label: str) -> list[dict[str, Any]]:
        # As the SDK's images.list(): the listing, then each image's inspect (its `attrs`).
        summaries = self._call(self.reads.images, filters={"label": label})
        found = (self._inspect("inspect_image", s["Id"]) for s in summaries)
        return [i for i in found if i is not None]

    @_transient
    def inspect_image(self, ref: str) -> dict[str, Any] | None:
        return self._inspect("inspect_image", ref)

    def image_id(self, ref: str) -> str | None:
        found = self.inspect_image(ref)
        return found["Id"] if found else None

    @_transient
    def tag_image(self, image_id: str, tag: str) -> None:
        repository, _, name = tag.rpartition(":")
        self._call(self.client.api.tag, image_id, repository, name, force=True)

    @_transient
    def pull_image(self, ref: str) -> str:
        return self._call(self.client.images.pull, ref).id

    @_transient
    def inspect_container(self, name: str) -> dict[str, Any] | None:
        return self._inspect("inspect_container", name)

    @_transient
    def list_containers(self, label: str) -> list[dict[str, Any]]:
        summaries = self._call(self.reads.containers, all=True, filters={"label": label})
        found = (self.inspect_container(s["Id"]) for s in summaries)
        return [i for i in found if i is not None]

    @_transient
    def stop_container(self, name: str) -> None:
        # SIGTERM and a long grace: llama-server frees its GPU memory on a clean exit.
        self._call(self.client.api.stop, name, timeout=60)

    def run_container(self, spec: ContainerSpec) -> str:
        import docker.types

        mounts = [docker.types.Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                  for m in spec.mounts]
        device_requests = []
        if spec.gpus == "all":
            device_requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        elif spec.gpus != "none":
            device_requests = [docker.types.DeviceRequest(device_ids=list(spec.gpus), capabilities=[["gpu"]])]
        container = self._call(
            self.client.containers.run, spec.image, command=list(spec.command), name=spec.name, detach=True,
            environment=dict(spec.env), mounts=mounts, network_mode=spec.network_mode, ipc_mode=spec.ipc_mode,
            labels=dict(spec.labels), restart_policy={"Name": spec.restart_policy},
            device_requests=device_requests or None, entrypoint=list(spec.entrypoint) if spec.entrypoint else None,
        )
        return container.id

    def run_to_completion(self, spec: ContainerSpec, timeout_s: float) -> tuple[int, str, str]:
        """Run a one-shot container (llama-perplexity), wait, and return (exit code, stdout, stderr)."""
        self.remove_container(spec.name)
        container_id = self.run_container(spec)
        try:
            result = self._call(self.client.api.wait, container_id, timeout=timeout_s)
            out = self._call(self.client.api.logs, container_id, stdout=True, stderr=False).decode(errors="replace")
            err = self._call(self.client.api.logs, container_id, stdout=False, stderr=True).decode(errors="replace")
            return int(result.get("StatusCode", -1)), out, err
        finally:
            self.remove_container(spec.name)

    @_transient
    def start_container(self, name: str) -> None:
        state = (self.inspect_container(name) or {}).get("State") or {}
        self._call(self.client.api.unpause if state.get("Paused") else self.client.api.start, name)

    @_transient
    def remove_container(self, name: str) -> None:
        try:
            # SIGTERM first: llama-server exits 0 after "cleaning up before exit".
            self._call(self.client.api.stop, name, timeout=30)
            self._call(self.client.api.remove_container, name, force=True)
        except PermanentError as exc:
            if not _absent(exc):
                raise

    def remove_image(self, ref: str) -> None:
        try:
            self._call(self.client.images.remove, ref)
        except PermanentError as exc:
            if not _absent(exc, "ImageNotFound"):
                raise

    def container_logs(self, name: str, tail: int) -> str:
        try:
            return self._call(self.client.api.logs, name, tail=tail).decode(errors="replace")
        except (PermanentError, TransientError):
            return ""  # logs are what a load is doing or why it failed: never a reason to fail on their own

    def _stream(self, stream: Any) -> Any:
        """Iterate a build stream, translating errors raised mid-stream (daemon restarts, 5xx)."""
        with translated(_docker_error):
            yield from stream

    def build_image(self, spec: ImageBuild, context_files: dict[str, Path], on_line: LineSink) -> str:
        import tarfile
        import tempfile

        tail: deque[str] = deque(maxlen=25)
        step = "(before the first step)"
        with tempfile.TemporaryFile() as context:
            with tarfile.open(fileobj=context, mode="w", dereference=True) as tar:
                folder = tarfile.TarInfo("patches")  # COPY patches/ needs the folder even with no patches
                folder.type, folder.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(folder)
                for arcname, path in sorted(context_files.items()):
                    tar.add(str(path), arcname=arcname, recursive=False)
            context.seek(0)
            stream = self._call(
                self.client.api.build, fileobj=context, custom_context=True, dockerfile="Dockerfile.llamacpp",
                tag=spec.tag, buildargs=dict(spec.build_args), labels=dict(spec.labels), rm=True, forcerm=True,
                decode=True,
            )
            image_id = ""
            for chunk in self._stream(stream):
                text = chunk.get("stream", "")
                for line in text.splitlines():
                    if line.startswith("Step "):
                        step = line
                    if line.strip():
                        tail.append(line)
                        on_line(line)
                if "aux" in chunk and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
                if "error" in chunk:
                    raise BuildFailed(f"docker build of {spec.tag} failed at {step}: {chunk['error'].strip()}",
                                      "\n".join(tail))
        return image_id
