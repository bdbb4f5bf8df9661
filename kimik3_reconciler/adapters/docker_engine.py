"""The Docker engine: reads over the unix socket (adapters/docker_socket.py) or through the docker SDK, writes
through the SDK; errors of both become errors.py's (`daemon_fault`), transient ones are retried.

The SDK (and requests, urllib3) is imported when first needed, so a no-op plan on the local socket
never loads it (docs/design.md "Observation costs")."""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
import types
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimik3_reconciler import logs
from kimik3_reconciler.adapters.docker_socket import (
    EngineApiError,
    EngineSocket,
    EngineUnreachable,
    engine_socket,
    unix_socket_path,
)
from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import BuildFailed, InputError, Kimik3Error, PermanentError, TransientError
from kimik3_reconciler.model.specs import ContainerSpec, ImageBuild
from kimik3_reconciler.ports import LineSink, PullProgress, PullRetry

if TYPE_CHECKING:
    import docker
    import docker.tls
    import docker.types
    from tenacity import RetryCallState

# A daemon restart (systemctl restart docker, an upgrade) takes dockerd ~13 s to stop a loading server plus its
# own start: keep trying well past that, so a restart during a 17-minute load does not fail the apply.
DAEMON_RESTART_S = 90.0
CLIENT_TIMEOUT_S = 120  # one Docker API call; a stop waits 60 s for llama-server within it


def _say_retrying(state: RetryCallState) -> None:
    """One line per retry: what failed, and how long kimik3 keeps trying (an operator must not guess)."""
    error = state.outcome.exception() if state.outcome else None
    waited = state.seconds_since_start or 0.0
    logs.logger("kimik3").warning(
        "docker-retry",
        call=getattr(state.fn, "__name__", "docker"),
        message=f"{error}: the docker daemon is not answering; kimik3 keeps trying for {DAEMON_RESTART_S:.0f} s "
        f"in all ({waited:.0f} s so far, attempt {state.attempt_number})",
    )


class _transient:  # noqa: N801 - used as a decorator
    """The one retry layer: public DockerEngine methods carry it; they call each other only through the
    undecorated `_inspect_container`, so a retried call never nests another 90 s of retries.

    tenacity (~15 ms of imports: concurrent.futures, logging, asyncio support) is loaded at a method's first
    transient error, which a converged plan never meets. That error is then handed to tenacity as its first
    attempt's outcome, so the retries, their messages and the 90 s window are those of a method decorated
    with tenacity from the start. `.retry` is tenacity's controller of the method (tests replace its sleep)."""

    def __init__(self, fn: Any):
        functools.update_wrapper(self, fn)
        self.fn, self._retried = fn, None

    @property
    def retry(self) -> Any:
        return self._tenacity().retry

    def _tenacity(self) -> Any:
        if self._retried is None:
            from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

            self._retried = retry(
                retry=retry_if_exception_type(TransientError),
                stop=stop_after_delay(DAEMON_RESTART_S),
                wait=wait_exponential(multiplier=0.5, max=5),
                before_sleep=_say_retrying,
                reraise=True,
            )(self.fn)
        return self._retried

    def __get__(self, engine: Any, owner: type | None = None) -> Any:
        return self if engine is None else types.MethodType(self, engine)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not getattr(args[0], "rides_out_restarts", True):  # the exporter's: its scrape asks again, never waits 90 s
            return self.fn(*args, **kwargs)
        if self._retried is not None:
            return self._retried(*args, **kwargs)
        try:
            return self.fn(*args, **kwargs)
        except TransientError as error:
            first = [error]

        @functools.wraps(self.fn)
        def attempt(*args: Any, **kwargs: Any) -> Any:
            if first:  # tenacity's first attempt is the call that just failed
                raise first.pop()
            return self.fn(*args, **kwargs)

        return self._tenacity().retry.copy()(attempt, *args, **kwargs)


# What a restarting daemon looks like from the client: the socket is there (or was, a moment ago) but
# nobody accepts or a connection is cut. Anything else (no socket ever, no permission, a 5xx from a
# running daemon) does not get better by waiting 90 s.
_RESTARTING_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE})
_RESTARTING_SAYS = ("is restarting", "daemon is shutting down", "shutting down", "daemon is not running")

# dockerd answers 500 when it cannot give a container the devices it asks for; retrying will not help.
_NO_DEVICES = ("could not select device driver", "unresolvable CDI devices", "CDI device injection failed")


def os_error_in(exc: BaseException) -> OSError | None:
    """The OSError (with an errno) an SDK exception wraps, searched through causes, contexts and args:
    requests' ConnectionError holds urllib3's ProtocolError, which holds the socket's own error."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError) and item.errno is not None:
            return item
        todo.extend((item.__cause__, item.__context__, *getattr(item, "args", ()), getattr(item, "reason", None)))
    return None


def daemon_fault(
    exc: Exception, answered_before: bool, where: str, timeout_s: float = CLIENT_TIMEOUT_S
) -> Kimik3Error | None:
    """What a Docker exception means, from the SDK or the socket reader alike: TransientError only for a daemon
    that looks like it is restarting; a clear PermanentError for a daemon that is not there, not ours to use,
    or failing; None: not Docker's. `answered_before`: this process reached the daemon earlier (a socket that
    vanished since = a restart)."""
    # The socket reader's two classes first: they need no SDK import (a no-op plan never loads it).
    if isinstance(exc, EngineApiError):
        return _refusal(exc.message, exc.is_server_error(), exc)
    if isinstance(exc, EngineUnreachable):
        if isinstance(exc.__cause__, TimeoutError):
            return PermanentError(f"the docker daemon at {where} did not answer within {timeout_s:g} s: {exc}")
        return _unreachable(exc, True, answered_before, where)
    import docker.errors  # an SDK call raised (so it is loaded), or an error of no one's (a bug): passes below
    import requests.exceptions

    if isinstance(exc, requests.exceptions.Timeout):
        return PermanentError(f"the docker daemon at {where} did not answer within {timeout_s:g} s: {exc}")
    if isinstance(exc, docker.errors.APIError):
        return _refusal(str(exc.explanation or exc), exc.is_server_error(), exc)
    if isinstance(exc, _cut_streams()):
        # A stream (a build's, a pull's) cut mid-answer reaches us from urllib3 unwrapped: the daemon hung up.
        return _unreachable(exc, True, answered_before, where)
    if not isinstance(exc, (requests.exceptions.ConnectionError, docker.errors.DockerException)):
        return None
    return _unreachable(exc, isinstance(exc, requests.exceptions.ConnectionError), answered_before, where)


def _cut_streams() -> tuple[type[Exception], ...]:
    """What reading a streamed answer raises when the daemon's end goes: the SDK iterates urllib3's response
    itself (docker.api.client._stream_helper), so requests never wraps these into its ConnectionError."""
    import requests.exceptions
    import urllib3.exceptions

    return urllib3.exceptions.ProtocolError, requests.exceptions.ChunkedEncodingError


def _refusal(said: str, server_error: bool, exc: Exception) -> Kimik3Error:
    """The daemon answered with an error status: transient only while it says it is restarting."""
    if any(s in said for s in _NO_DEVICES):
        return PermanentError(f"docker: {said}")
    if server_error and any(marker in said.lower() for marker in _RESTARTING_SAYS):
        return TransientError(f"docker daemon restarting: {said}")
    return PermanentError(f"docker: {exc}")


def _unreachable(exc: Exception, connection_error: bool, answered_before: bool, where: str) -> Kimik3Error:
    """No answer: the socket's own error (errno) says whether the daemon is restarting, absent or not ours."""
    cause = os_error_in(exc)
    code = cause.errno if cause is not None else None
    if code in (errno.EACCES, errno.EPERM):
        return PermanentError(
            f"permission denied on the docker daemon's socket {where}: run kimik3 as root or as a "
            "member of the docker group"
        )
    if code == errno.ENOENT:
        if answered_before:  # dockerd removes its socket while it restarts
            return TransientError(f"docker daemon not answering: its socket {where} is gone (restarting?)")
        return PermanentError(f"no docker daemon: {where} does not exist (is dockerd running? DOCKER_HOST?)")
    if code == errno.ECONNREFUSED and _not_a_socket(where):
        # A path that is there but no socket (a directory, a file: a DOCKER_HOST typo) never starts answering:
        # 90 s of "restarting?" retries would only hide the typo.
        return PermanentError(
            f"no docker daemon: {where} is not a socket (DOCKER_HOST or --docker-host names the "
            "daemon's socket, e.g. unix:///var/run/docker.sock)"
        )
    if code in _RESTARTING_ERRNOS or (code is None and connection_error):
        # No errno: "Connection aborted" with the daemon hanging up mid-request, as a stopping dockerd does.
        return TransientError(f"docker daemon not answering: {exc}")
    if connection_error:
        return PermanentError(f"cannot reach the docker daemon at {where}: {exc}")
    return PermanentError(f"docker: {exc}")


def _not_a_socket(where: str) -> bool:
    path = unix_socket_path(where) if "://" in where else where
    try:
        return path is not None and not stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


# What the docker SDK connects to (docker.utils.parse_host); anything else is a typo in DOCKER_HOST / --docker-host.
_DOCKER_URL_SCHEMES = frozenset({"unix", "http+unix", "tcp", "http", "https", "ssh", "npipe"})
_HOST_PORT = re.compile(r"[\w.\-\[\]:]+:\d+")  # HOST:PORT without a scheme: the SDK reads it as tcp


def check_docker_url(url: str) -> None:
    """InputError (exit 2) naming DOCKER_HOST / --docker-host for a URL no Docker daemon can be at: the SDK's own
    "Invalid bind address protocol" (exit 1, "a step failed") named neither the variable nor what to write."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else "tcp" if _HOST_PORT.fullmatch(url.strip()) else ""
    if scheme not in _DOCKER_URL_SCHEMES:
        raise InputError(
            f"DOCKER_HOST (or --docker-host) {url!r} is not a docker daemon URL: write "
            "unix:///var/run/docker.sock, tcp://HOST:PORT or ssh://USER@HOST (or unset it for the local "
            "socket)"
        )


def _absent(exc: PermanentError, sdk_class: str = "NotFound") -> bool:
    """Whether a PermanentError says the object does not exist (404): the docker-side cause tells."""
    cause = exc.__cause__
    if isinstance(cause, EngineApiError):
        return cause.status == 404
    import docker.errors

    return isinstance(cause, getattr(docker.errors, sdk_class))


def _device_requests(spec: ContainerSpec) -> list[docker.types.DeviceRequest]:
    """The GPUs of `spec`: CDI devices (`docker run --device nvidia.com/gpu=all`, what the docker CLI sends:
    driver "cdi") or the nvidia runtime's request (`docker run --gpus all`: capability "gpu")."""
    import docker.types

    if spec.gpus == "none":
        return []
    ids = ["all"] if spec.gpus == "all" else list(spec.gpus)
    if spec.gpu_request == "cdi":
        return [docker.types.DeviceRequest(driver="cdi", device_ids=[f"nvidia.com/gpu={i}" for i in ids])]
    if spec.gpus == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [docker.types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


class DockerEngine:
    """`rides_out_restarts`: transient errors are retried for DAEMON_RESTART_S (an apply must outlast a dockerd
    restart); off for the metrics exporter, whose scrape answers within its own bound and asks again at the next
    one. `timeout_s`: one API call's socket timeout."""

    def __init__(
        self,
        base_url: str | None = None,
        tls: docker.tls.TLSConfig | None = None,
        rides_out_restarts: bool = True,
        timeout_s: float = CLIENT_TIMEOUT_S,
    ):
        self._base_url = base_url
        self._tls = tls
        self.rides_out_restarts, self._timeout_s = rides_out_restarts, timeout_s
        self._client: docker.DockerClient | None = None
        self._reads: Any = None  # EngineSocket, or the SDK's APIClient: the same read calls and answers
        self._answered = False  # the daemon answered once in this process: a vanished socket is a restart

    @property
    def where(self) -> str:
        return self._base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"

    def _translate(self, exc: Exception) -> Kimik3Error | None:
        return daemon_fault(exc, self._answered, self.where, self._timeout_s)

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            import docker
            import docker.errors

            if self._base_url or os.environ.get("DOCKER_HOST"):
                check_docker_url(self.where)
            try:
                # ssh://: the SDK runs the `ssh` client (`docker system dial-stdio` on the far side), so the
                # operator's ssh config, keys and known_hosts apply as for any ssh login (the SDK still
                # wants paramiko importable for ssh:// URLs).
                remote = {"use_ssh_client": True} if (self._base_url or "").startswith("ssh://") else {}
                self._client = (
                    docker.DockerClient(
                        base_url=self._base_url, timeout=self._timeout_s, tls=self._tls or False, **remote
                    )
                    if self._base_url
                    else docker.from_env(timeout=self._timeout_s)
                )
            except docker.errors.DockerException as exc:
                raise (self._translate(exc) or PermanentError(f"docker: {exc}")) from exc
            self._answered = True  # the client asked the daemon for its API version
        return self._client

    @property
    def reads(self) -> Any:
        """Where reads go: the daemon's unix socket when the SDK would use one (docker_socket.engine_socket),
        else the SDK's own APIClient (tcp, ssh, TLS, a named context)."""
        if self._reads is None:
            path = engine_socket(self._base_url)
            self._reads = EngineSocket(path, timeout=self._timeout_s) if path else self.client.api
        return self._reads

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with translated(self._translate):
            result = fn(*args, **kwargs)
        self._answered = True
        return result

    def _inspect(self, call: str, ref: str) -> dict[str, Any] | None:
        """One inspect through `reads` (no retry layer of its own); None when the object does not exist."""
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
        # As the SDK's images.list(): the listing, then each image's inspect (its `attrs`); one gone in between
        # is skipped.
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
    def pull_image(self, ref: str, on_progress: PullProgress | None = None, on_retry: PullRetry | None = None) -> str:
        """Pull `ref` (by digest where kimik3 pins one), reporting (bytes, of bytes) over the layers seen so far and
        dockerd's own retries of a layer (adapters/pull_events.py). The pull's own stream is read (the SDK's
        images.pull drops its error events and then says only "no such image"): an error event is a
        PermanentError with dockerd's words."""
        from docker.utils import parse_repository_tag

        from kimik3_reconciler.adapters.pull_events import PullWatch

        repository, tag = parse_repository_tag(ref)
        watch = PullWatch(ref, on_progress, on_retry)
        with translated(self._translate):
            for event in self.client.api.pull(repository, tag=tag, stream=True, decode=True):
                watch.see(event)
        self._answered = True
        return str(self._call(self.reads.inspect_image, ref)["Id"])

    def push_image(self, image_id: str, ref: str) -> str:
        """`image_id` tagged `ref` (REGISTRY/REPOSITORY:TAG) and pushed there; the digest the registry stored it
        under (sha256:…). An error event of the push stream is a PermanentError with dockerd's words."""
        from kimik3_reconciler.errors import PermanentError

        repository, _, tag = ref.rpartition(":")
        self._call(self.client.api.tag, image_id, repository, tag, force=True)
        digest = None
        with translated(self._translate):
            for event in self.client.api.push(repository, tag=tag, stream=True, decode=True):
                if event.get("error"):
                    raise PermanentError(f"docker push {ref}: {event['error']}")
                digest = (event.get("aux") or {}).get("Digest") or digest
        if not digest:
            raise PermanentError(f"docker push {ref}: the registry named no digest")
        return str(digest)

    @_transient
    def inspect_container(self, name: str) -> dict[str, Any] | None:
        return self._inspect_container(name)

    def _inspect_container(self, name: str) -> dict[str, Any] | None:
        return self._inspect("inspect_container", name)

    @_transient
    def list_containers(self, label: str) -> list[dict[str, Any]]:
        summaries = self._call(self.reads.containers, all=True, filters={"label": label})
        found = (self._inspect_container(s["Id"]) for s in summaries)
        return [i for i in found if i is not None]

    @_transient
    def stop_container(self, name: str) -> None:
        # SIGTERM and a long grace: llama-server frees its GPU memory on a clean exit.
        self._call(self.client.api.stop, name, timeout=60)

    def run_container(self, spec: ContainerSpec) -> str:
        import docker.types

        mounts = [
            docker.types.Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
            for m in spec.mounts
        ]
        # Named volumes (an rpc-server's tensor cache): Docker creates one on first use and keeps it.
        mounts += [docker.types.Mount(target=target, source=volume, type="volume") for volume, target in spec.volumes]
        device_requests = _device_requests(spec)
        container = self._call(
            self.client.containers.run,
            spec.image,
            command=list(spec.command),
            name=spec.name,
            detach=True,
            environment=dict(spec.env),
            mounts=mounts,
            network_mode=spec.network_mode,
            ipc_mode=spec.ipc_mode,
            labels=dict(spec.labels),
            restart_policy={"Name": spec.restart_policy},
            device_requests=device_requests or None,
            entrypoint=list(spec.entrypoint) if spec.entrypoint else None,
        )
        return container.id

    def run_to_completion(self, spec: ContainerSpec, timeout_s: float) -> tuple[int, str, str]:
        """Run a one-shot container (llama-perplexity), wait, and return (exit code, stdout, stderr)."""
        self.remove_container(spec.name)
        try:
            container_id = self.run_container(spec)  # a start that fails leaves a created container: removed below
            result = self._call(self.client.api.wait, container_id, timeout=timeout_s)
            out = self._call(self.client.api.logs, container_id, stdout=True, stderr=False).decode(errors="replace")
            err = self._call(self.client.api.logs, container_id, stdout=False, stderr=True).decode(errors="replace")
            return int(result.get("StatusCode", -1)), out, err
        finally:
            self.remove_container(spec.name)

    @_transient
    def start_container(self, name: str) -> None:
        state = (self._inspect_container(name) or {}).get("State") or {}
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

    @_transient
    def inspect_volume(self, name: str) -> dict[str, Any] | None:
        return self._inspect("inspect_volume", name)

    def remove_volume(self, name: str) -> None:
        try:
            self._call(self.client.api.remove_volume, name)
        except PermanentError as exc:
            if not _absent(exc):
                raise

    def remove_image(self, ref: str) -> None:
        try:
            self._call(self.client.images.remove, ref)
        except PermanentError as exc:
            if not _absent(exc, "ImageNotFound"):
                raise

    @_transient
    def exec_output(self, name: str, argv: list[str]) -> str:
        """Run argv in a running container (no shell) and return its stdout.

        Read from the hijacked socket frame by frame: over ssh:// (the ssh client), exec_start's own
        read-then-close raises BrokenPipeError after the output arrived (docker/docker-py#3218)."""
        from docker.utils.socket import frames_iter

        created = self._call(self.client.api.exec_create, name, argv, stdout=True, stderr=False)
        sock = self._call(self.client.api.exec_start, created["Id"], socket=True)
        try:
            with translated(self._translate):
                return b"".join(data for stream, data in frames_iter(sock, tty=False) if stream == 1 and data).decode(
                    errors="replace"
                )
        finally:
            try:
                sock.close()
            except OSError:
                pass  # the far end is already gone: the output is complete

    def container_logs(self, name: str, tail: int) -> str:
        try:
            return self._call(self.client.api.logs, name, tail=tail).decode(errors="replace")
        except (PermanentError, TransientError):
            return ""  # logs are what a load is doing or why it failed: never a reason to fail on their own

    def _stream(self, stream: Any) -> Any:
        """Iterate a build stream, translating errors raised mid-stream (daemon restarts, 5xx)."""
        with translated(self._translate):
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
                self.client.api.build,
                fileobj=context,
                custom_context=True,
                dockerfile="Dockerfile",  # the context's (steps/image.py names the image's Dockerfile so)
                tag=spec.tag,
                buildargs=dict(spec.build_args),
                labels=dict(spec.labels),
                rm=True,
                forcerm=True,
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
                    raise BuildFailed(
                        f"docker build of {spec.tag} failed at {step}: {chunk['error'].strip()}", "\n".join(tail)
                    )
        return image_id


def remote_engine(url: str, tls_dir: Path | None = None) -> DockerEngine:
    """A worker host's Docker: ssh://user@host through the ssh client, or tcp:// with the TLS client
    certificate in `tls_dir` (ca.pem, cert.pem, key.pem: dockerd's --tlsverify layout)."""
    import docker.tls

    tls = None
    if url.startswith("tcp://"):
        if tls_dir is None:
            raise PermanentError(f"{url}: a tcp:// Docker needs TLS (rpc.workers[].tls_dir): never plain tcp")
        tls = docker.tls.TLSConfig(
            client_cert=(str(tls_dir / "cert.pem"), str(tls_dir / "key.pem")),
            ca_cert=str(tls_dir / "ca.pem"),
            verify=True,
        )
    return DockerEngine(url, tls)
