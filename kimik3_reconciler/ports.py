"""Protocols for every side effect; adapters/ implements them, tests/support/fakes/ fakes them (a module per port)."""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.host_lock import LockAttempt, LockHolder
from kimik3_reconciler.model.specs import ContainerSpec, DockerHost, ImageBuild, ModelDownload
from kimik3_reconciler.model.state_room import StateRoom

if TYPE_CHECKING:
    from threading import Event  # the pre-read's stop flag

    from kimik3_reconciler.model.bench import RequestSample  # `kimik3 bench` only

LineSink = Callable[[str], None]
PullProgress = Callable[[int, int], None]  # (bytes, of bytes)
PullRetry = Callable[[str, int, int], None]  # (layer, dockerd's retry number, seconds until it)
FileProgress = Callable[[str, int, int], None]  # (file, bytes, of bytes)
Tally = Callable[[int], None]  # called with the bytes each chunk read
Messages = list[dict[str, Any]]  # an OpenAI chat's messages (or tools), as plain dicts


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """One request to a server's chat API (ChatPort): where, with what key, which messages and tools, for which
    served `model` (None: a fixed name, llama-server only). `max_tokens` and `thinking_effort` (low/high/max, the
    chat template's variable; None: the template's own) count only for a completion, not a template render."""

    base_url: str
    api_key: str | None
    messages: Messages
    tools: Messages | None = None
    max_tokens: int = 32
    thinking_effort: str | None = None
    model: str | None = None


@dataclasses.dataclass(frozen=True)
class LoadLevel:
    """One level of a `kimik3 bench` sweep (LoadPort.run_level): every prompt (token ids) sent to the server at
    `base_url` with `concurrency` requests in flight, each asking for exactly `output_tokens`, on the engine's
    `wire` (engines/base.py LoadWire)."""

    base_url: str
    api_key: str | None
    prompts: list[list[int]]
    output_tokens: int
    concurrency: int
    wire: str = "native"


class DockerPort(Protocol):
    """The Docker engine, as kimik3 uses it (inspect dicts are docker's own JSON shapes)."""

    def info(self) -> dict[str, Any]: ...
    def list_images(self, label: str) -> list[dict[str, Any]]: ...
    def image_id(self, ref: str) -> str | None: ...
    def inspect_image(self, ref: str) -> dict[str, Any] | None: ...  # None: no such image
    def pull_image(self, ref: str, on_progress: PullProgress | None = None, on_retry: PullRetry | None = None) -> str:
        """`on_progress(bytes, of bytes)`; `on_retry(layer, dockerd's retry number, seconds until it)` each second
        dockerd waits to download a failed layer again."""
        ...

    def tag_image(self, image_id: str, tag: str) -> None: ...
    def build_image(self, spec: ImageBuild, context_files: dict[str, Path], on_line: LineSink) -> str: ...
    def remove_image(self, ref: str) -> None: ...
    def inspect_container(self, name: str) -> dict[str, Any] | None: ...
    def list_containers(self, label: str) -> list[dict[str, Any]]: ...  # inspect dicts, stopped ones too
    def stop_container(self, name: str) -> None: ...
    def run_container(self, spec: ContainerSpec) -> str: ...
    def run_to_completion(self, spec: ContainerSpec, timeout_s: float) -> tuple[int, str, str]: ...
    def start_container(self, name: str) -> None: ...
    def remove_container(self, name: str) -> None: ...
    def container_logs(self, name: str, tail: int) -> str: ...
    def inspect_volume(self, name: str) -> dict[str, Any] | None: ...  # None: no such volume
    def remove_volume(self, name: str) -> None: ...  # gone already: nothing to do
    def exec_output(self, name: str, argv: list[str]) -> str: ...  # stdout of argv run in a running container


class HubPort(Protocol):
    """A Hugging Face hub (or mirror) and the local HF cache."""

    def default_cache_dir(self) -> str: ...
    def list_files(self, repo: str, revision: str, paths: Iterable[str], endpoint: str | None) -> list[RemoteFile]: ...
    def cached_file(self, repo: str, revision: str, path: str, cache_dir: str) -> Path | None: ...
    def cached_blob(self, repo: str, file: RemoteFile, cache_dir: str) -> Path | None:
        """The file's content-addressed blob in the cache, linked from a snapshot or not (None: absent)."""
        ...

    def list_repo(self, repo: str, revision: str, endpoint: str | None) -> list[RemoteFile]: ...
    def remove_cached(self, repo: str, revision: str, path: str, cache_dir: str) -> None: ...
    def read_head(self, repo: str, revision: str, path: str, endpoint: str | None, nbytes: int) -> bytes: ...
    def download(self, spec: ModelDownload, on_progress: FileProgress, on_line: LineSink | None = None) -> int:
        """Make spec.missing present and verified; the bytes that came from the hub (a blob already in the
        cache is verified and adopted, not fetched; one a site peer gave is counted as adopted). `on_line`: where
        each file taken from, or refused from, a peer is said."""
        ...

    def repo_cache_dir(self, repo: str, cache_dir: str) -> Path: ...


class RegistryPort(Protocol):
    """A container registry's HTTP API (docker distribution v2), read without credentials."""

    def pull_bytes(self, ref: str) -> int:
        """What pulling `ref` (pinned by digest) moves: its manifest's config and layers, compressed, for this
        host's platform. A StepError saying why when the registry does not answer or wants a login."""
        ...


class HttpPort(Protocol):
    """Plain HTTP: llama-server's /health and chat, and source archive downloads."""

    def health(self, url: str) -> str:  # "ok" | "loading" | "unreachable"
        ...

    def fetch(self, url: str, dest: Path) -> str:  # returns the sha256 of what landed at dest
        ...

    def chat(self, base_url: str, model: str, prompt: str, api_key: str | None) -> str: ...

    def free_port(self) -> int:  # a free TCP port on 127.0.0.1, for throw-away servers
        ...

    def get(self, url: str, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[int, str]:
        """GET url (Bearer api_key if given): (status, body); (0, reason) when nothing answers."""
        ...


class ChatPort(Protocol):
    """llama-server's OpenAI-compatible API, as `kimik3 verify` uses it (replies as plain dicts)."""

    def models(self, base_url: str, api_key: str | None) -> dict[str, Any]:  # GET /v1/models, its JSON
        ...

    def chat(self, request: ChatRequest) -> dict[str, Any]:
        """The first choice: `{"message": {role, content, [reasoning_content | reasoning], [tool_calls]},
        "finish_reason"}`; `request.model`: the served name asked for (vLLM answers only to its own).

        With `tools`, tool_choice is "auto"; `message` can be appended to the next request as is.
        `thinking_effort` (low/high/max) goes to the chat template (Kimi-K3's defaults to max).
        """
        ...

    def apply_template(self, request: ChatRequest) -> str:
        """The prompt the server's chat template renders from `request.messages` and tools (llama-server's
        /apply-template; vLLM's /tokenize then /detokenize, for the served `model`); max_tokens and
        thinking_effort are not used."""
        ...


class LoadPort(Protocol):
    """The load generator `kimik3 bench` drives (adapters/bench_client.py): token ids from the server's own
    tokenizer, its Prometheus `/metrics`, and closed-loop streamed requests. `wire`: the engine's request shapes
    (engines/base.py LoadWire: llama-server's native endpoints, or an OpenAI server's)."""

    def tokenize(self, base_url: str, api_key: str | None, text: str, wire: str = "native") -> list[int]: ...
    def metrics(self, base_url: str, api_key: str | None) -> str | None: ...  # None: not served

    def run_level(self, level: LoadLevel) -> tuple[list[RequestSample], float]:
        """Send every prompt of the level (closed loop); the per-request samples and the level's wall time
        (seconds)."""
        ...


class HostPort(Protocol):
    """Raw host facts (pure parsers in observe/host.py turn them into HostFacts)."""

    def lscpu_parseable(self) -> str: ...
    def cpuinfo(self) -> str: ...
    def tailscale_ipv4(self) -> str | None: ...
    def has_address(self, address: str) -> bool: ...  # an IP literal this host can bind (False: not one of its own)
    def disk_free(self, path: str) -> int: ...  # free bytes on the filesystem that holds (or will hold) path
    def mounts(self) -> str: ...  # /proc/self/mounts, as read
    def real_path(self, path: str) -> str: ...  # symlinks resolved (of the nearest existing ancestor)
    def nvml(self) -> dict[str, Any]: ...  # {"driver", "gpus": [...]} or {"error": "..."} (no driver)
    def meminfo(self) -> str: ...
    def numa_balancing(self) -> str | None: ...
    def nvidia_version(self) -> str | None: ...  # /proc/driver/nvidia/version; None: no NVIDIA module loaded
    def numa_nodes(self) -> int: ...
    def cdi_specs(self) -> list[str]: ...
    def cdi_spec_text(self, path: str) -> str: ...  # "" when unreadable
    def runtime_hook(self) -> bool: ...  # the toolkit's nvidia-container-runtime-hook is on dockerd's PATH (`--gpus`)
    def container_toolkit_version(self) -> str: ...  # `nvidia-ctk --version` (or nvidia-container-cli); "" if absent
    def tcp_tables(self) -> str: ...  # /proc/net/tcp then /proc/net/tcp6, as read
    def tcp_listening(self) -> str: ...  # the LISTEN sockets only, in tcp_tables' line format (cheap)
    def process_rss(self, pid: int) -> int | None: ...  # resident bytes (VmRSS); None: gone or unreadable
    def page_cache_bytes(self, path: str) -> tuple[int, int] | None: ...  # (cached bytes, size): mincore
    def socket_owners(
        self, inodes: set[int], likely: frozenset[int] = frozenset()
    ) -> dict[int, tuple[int, str]]: ...  # inode -> (pid, program); `likely` pids are looked at first
    def tcp_connect(self, address: str, port: int, timeout_s: float = 2.0) -> bool: ...  # a TCP connect succeeds
    def process_cgroup(self, pid: int) -> str: ...  # /proc/<pid>/cgroup as read ("" when gone or unreadable)
    def process_file(self, pid: int, name: str) -> str: ...  # /proc/<pid>/<name> (io) as read; "" if unreadable
    def preread(
        self, paths: list[str], workers: int, on_bytes: Tally, stop: Event | None = None, limit_bytes: int | None = None
    ) -> None:
        """Read every byte of `paths` into the page cache (with `limit_bytes`: only their first that many bytes,
        the files in the order given), `workers` chunks in parallel; `on_bytes(n)` per chunk
        (called from the reading threads). Once `stop` is set it returns early: no chunk is read after the ones
        the readers hold."""
        ...

    def resident_bytes(self, paths: list[str]) -> int: ...  # bytes of these files the page cache holds (mincore)
    def file_digest(self, path: str, algorithm: str, prefix: bytes = b"") -> str:
        """The hex digest (hashlib's `algorithm`) of `prefix` then every byte of the file: a model file re-hashed
        to check it (a 50 GB shard: the one read that a plan must not repeat; tests count its bytes here)."""
        ...


class StatePort(Protocol):
    """kimik3's state directory, keyed by relative path: JSON records (manifests, results) and artifacts
    (files or folders kimik3 made: the smoke model, reference logits, fetched source archives).

    An artifact exists whole or not at all: `produce` builds it at a staging path and renames it into
    place only when `make` returns. Steps never move or delete state files themselves.
    """

    def read(self, key: str) -> dict[str, Any] | None: ...
    def write(self, key: str, value: dict[str, Any]) -> None: ...  # atomic and durable
    def delete(self, key: str) -> None: ...

    def artifact(self, key: str) -> Path | None:  # a finished artifact, to read or mount; None when absent
        ...

    def produce(self, key: str, make: Callable[[Path], None]) -> Path:
        """The artifact, made once: `make(staging)` writes the file or folder at `staging` (a fresh path in
        a private folder beside the key), renamed into place when `make` returns. One producer per key at
        a time; a second waits and gets the first one's artifact. An exception from `make` leaves nothing;
        leftovers of a killed producer are swept. To replace an artifact, `discard` it first."""
        ...

    def discard(self, key: str) -> None: ...  # remove an artifact (file or folder), if present

    def room(self) -> StateRoom | None:
        """What the state dir's file system has left (checked before an apply takes a server down: the records it
        writes after that must fit); None when it cannot be told."""
        ...


class CachePort(Protocol):
    """kimik3's cache dir (apart from the state dir, so `plan` writes no state): JSON values derived from content
    that is re-read whenever their key moves. Never raises: an entry that does not read back is None, and an
    unwritable cache dir keeps nothing (a cache only costs speed)."""

    def read(self, key: str) -> dict[str, Any] | None: ...
    def write(self, key: str, value: dict[str, Any]) -> None: ...  # atomic; a failure keeps nothing, silently


class ClockPort(Protocol):
    """Time, so waits and recorded dates are testable."""

    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def now(self) -> datetime.datetime: ...  # timezone-aware UTC, for records


class UnitsPort(Protocol):
    """systemd (systemctl, maybe through a command prefix) and unit/env files under the install root.

    Paths are as systemd sees them (/etc/systemd/system/x.service); the adapter prefixes its root.
    """

    def booted(self) -> bool:  # systemd is PID 1 (/run/systemd/system exists)
        ...

    def system_state(self) -> str:  # `systemctl is-system-running`: running, degraded, offline, ...
        ...

    def which(self, program: str) -> str | None:  # absolute path of a program where systemd runs units
        ...

    def list_files(self, directory: str, suffix: str) -> list[str]: ...  # regular files, not symlinks
    def read_file(self, path: str) -> str | None: ...
    def write_file(self, path: str, text: str) -> None: ...  # atomic (temp file + rename), mode 0644
    def remove_file(self, path: str) -> None: ...

    def show(self, units: list[str], properties: list[str]) -> str:  # raw `systemctl show` output
        ...

    def systemctl(self, *args: str) -> None: ...  # daemon-reload, enable, disable, start, stop, reset-failed

    # Kernel settings where systemd runs (host.prepare): systemd-sysctl loads a sysctl.d file as boot does.
    def sysctl_value(self, name: str) -> str | None: ...  # /proc/sys/<name with / for .>; None: no such knob
    def sysctl_load(self, path: str) -> None: ...  # systemd-sysctl PATH: that file's settings, written to /proc/sys


class LockPort(Protocol):
    """The per-host lock (state dir): one kimik3 changes the host at a time. The kernel frees it when its
    holder dies (flock); a JSON record beside it names the holder. Taking it: locking.py."""

    def try_acquire(self, holder: LockHolder) -> LockAttempt: ...  # never blocks
    def release(self, holder: LockHolder) -> None: ...
    def holder(self) -> tuple[LockHolder | None, bool]: ...  # the record, and whether a live process holds it
    def break_lock(self) -> None: ...  # force-unlock: remove the record and the lock file
    def alive(self, holder: LockHolder) -> bool | None: ...  # its process runs; None: another host, unknown


class ProcessPort(Protocol):
    """kimik3's own helper processes on the host (the metrics exporter, the front): started detached, found again
    by pid."""

    def spawn(self, args: tuple[str, ...], log_key: str, reads: tuple[str, ...]) -> int:
        """Start `python -m kimik3_reconciler <args>` in its own session (it outlives this kimik3), stdout and
        stderr appended to the state directory's file `log_key`, its environment the variables named in `reads`
        (model/helper_env.py) and the state dir, nothing else; its pid."""
        ...

    def cmdline(self, pid: int) -> tuple[str, ...] | None:  # argv of a live pid; None: no such process
        ...

    def invocation(self) -> tuple[tuple[str, ...], dict[str, str]]:
        """How `spawn` runs kimik3: (argv prefix `python -m kimik3_reconciler`, the environment it must have:
        the state dir, the import path), for a systemd unit that runs the exporter instead."""
        ...

    def terminate(self, pid: int, timeout_s: float) -> None:  # SIGTERM, then SIGKILL after timeout_s
        ...


class FrontPort(Protocol):
    """The front's control paths (issue 29: hold and release while an apply replaces the server)."""

    def post(self, url: str, token: str, body: dict[str, Any], timeout_s: float) -> tuple[int, dict[str, Any] | str]:
        """POST `body` as JSON with the token header: (status, the JSON answer); (0, why) when nothing answers."""
        ...


@dataclasses.dataclass(eq=False, repr=False)
class Ports:
    """The bundle of effects the orchestrator runs on; the CLI wires real adapters, tests wire fakes."""

    docker: DockerPort
    hub: HubPort
    http: HttpPort
    host: HostPort
    state: StatePort
    clock: ClockPort
    chat: ChatPort | None = None  # only `kimik3 verify` talks to the server beyond /health
    units: UnitsPort | None = None  # None: systemd is not looked at (planner tests on fakes without it)
    lock: LockPort | None = None  # None: nothing is locked (orchestrator tests on fakes that do not test the lock)
    load: LoadPort | None = None  # only `kimik3 bench` and `kimik3 tune` load the server
    processes: ProcessPort | None = None  # None: no exporter is looked at (tests that do not start one)
    # An RPC worker host's Docker (rpc.workers[].docker), and the apply lock on it (kept in its Docker); None: no
    # workers wired.
    worker_docker: Callable[[DockerHost], DockerPort] | None = None
    worker_lock: Callable[[DockerHost], LockPort] | None = None
    cache: CachePort | None = None  # None: nothing is cached (a source archive is hashed on every plan)
    front: FrontPort | None = None  # None: no front is held or released (tests without one; metrics.handover needs it)
    registry: RegistryPort | None = None  # None: a pull's size is not asked (the plan says "unknown size")
    # `kimik3 verify` of the profile being applied (VerifyFailed when a check fails): set only on the copy an apply
    # that verifies runs its steps with (`verifying`), None otherwise (then `<= verify` steps are left for a later
    # apply).
    verifier: Callable[[], None] | None = dataclasses.field(default=None, init=False, repr=False)

    def verifying(self, check: Callable[[], None] | None) -> Ports:
        """These ports with `check` as the verifier, for one apply's steps; these (shared) ports do not change.
        None: these ports as they are."""
        if check is None:
            return self
        wired = copy.copy(self)
        wired.verifier = check
        return wired
