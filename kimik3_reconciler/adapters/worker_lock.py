"""The apply lock on an RPC worker host, kept in that host's Docker (kimik3 has no other foothold there).

The lock is a container that never runs: `kimik3-host-lock`, created from an empty image kimik3
imports once (`kimik3-lock:1`, no files). Docker refuses a second container of that name (409), which
makes creation an atomic test-and-set on the worker; the holder's record is the container's label.
A holder on this host whose process is gone is stale and taken over (a flock would have been freed by
the kernel); a holder on another host is reported, never guessed dead: `kimik3 force-unlock ID FILE` removes it.
"""

from __future__ import annotations

import io
import json
import tarfile

import docker.errors

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.adapters.host_lock import process_alive
from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import TransientError
from kimik3_reconciler.model.host_lock import WORKER_HOLDER_LABEL as HOLDER_LABEL
from kimik3_reconciler.model.host_lock import WORKER_LOCK_CONTAINER as LOCK_CONTAINER
from kimik3_reconciler.model.host_lock import LockAttempt, LockHolder

LOCK_IMAGE = "kimik3-lock:1"


def _empty_tar() -> bytes:
    buffer = io.BytesIO()
    tarfile.open(fileobj=buffer, mode="w").close()
    return buffer.getvalue()


def _error(exc: Exception) -> TransientError | None:
    if isinstance(exc, docker.errors.DockerException):
        return TransientError(f"worker lock: {exc}")
    return None


class DockerHostLock:
    """LockPort over one worker's Docker."""

    def __init__(self, engine: DockerEngine, name: str, container: str = LOCK_CONTAINER):
        # `container`: another name only in tests that share one dockerd with a real kimik3.
        self.engine, self.name, self.container = engine, name, container

    @property
    def _api(self):  # noqa: ANN202 - docker.APIClient
        return self.engine.client.api

    def _ensure_image(self) -> None:
        with translated(_error):
            try:
                self._api.inspect_image(LOCK_IMAGE)
            except docker.errors.ImageNotFound:
                repository, _, tag = LOCK_IMAGE.partition(":")
                self._api.import_image_from_data(_empty_tar(), repository=repository, tag=tag)

    def _record(self) -> LockHolder | None:
        with translated(_error):
            try:
                labels = (self._api.inspect_container(self.container).get("Config") or {}).get("Labels") or {}
            except docker.errors.NotFound:
                return None
        try:
            return LockHolder.from_json(json.loads(labels.get(HOLDER_LABEL, "{}")))
        except ValueError:
            return None

    def _create(self, holder: LockHolder) -> bool:
        with translated(_error):
            try:
                self._api.create_container(
                    LOCK_IMAGE,
                    command=["kimik3-lock"],
                    name=self.container,
                    labels={HOLDER_LABEL: json.dumps(holder.to_json())},
                )
                return True
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # the name is taken: someone holds the lock
                    return False
                raise

    def _remove(self) -> None:
        with translated(_error):
            try:
                self._api.remove_container(self.container, force=True)
            except docker.errors.NotFound:
                pass

    def try_acquire(self, holder: LockHolder) -> LockAttempt:
        self._ensure_image()
        if self._create(holder):
            return LockAttempt(acquired=True)
        current = self._record()
        if current is not None and current.id == holder.id:
            return LockAttempt(acquired=True)  # this very run took it: the same Docker reached by another URL
        if current is not None and self.alive(current) is False:
            self._remove()  # its holder ran here and is gone: take over, as the flock would have been freed
            if self._create(holder):
                return LockAttempt(acquired=True, holder=current)
            current = self._record()
        return LockAttempt(acquired=False, holder=current)

    def release(self, holder: LockHolder) -> None:
        current = self._record()
        if current is not None and current.id == holder.id:
            self._remove()

    def holder(self) -> tuple[LockHolder | None, bool]:
        current = self._record()
        return current, current is not None and self.alive(current) is not False

    def break_lock(self) -> None:
        self._remove()

    def alive(self, holder: LockHolder) -> bool | None:
        return process_alive(holder)
