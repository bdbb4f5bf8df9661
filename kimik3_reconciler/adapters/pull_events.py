"""dockerd's pull stream, read (pure): the bytes of the layers seen so far, and its own retries. When a layer's
download fails, dockerd says nothing but "Retrying in N seconds" each second and tries again, up to 5 times by default
(`--max-download-attempts`), waiting 5, 10, 15, 20 and 25 s: 75 s in which the progress line stood still at the last
bytes it showed (issue 38: the registry had died mid-pull)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kimik3_reconciler.errors import PermanentError

_RETRYING = re.compile(r"Retrying in (\d+) seconds?")
_DONE = ("Download complete", "Verifying Checksum", "Pull complete")
Progress = Callable[[int, int], None]
Retry = Callable[[str, int, int], None]  # (layer, dockerd's retry number, seconds until it)


class PullWatch:
    """One pull's events in order: `see` each; `error` words the failure, retries included."""

    def __init__(self, ref: str, on_progress: Progress | None, on_retry: Retry | None):
        self.ref, self.on_progress, self.on_retry = ref, on_progress, on_retry
        self.layers: dict[str, tuple[int, int]] = {}
        self.retries: dict[str, int] = {}  # layer -> retries dockerd began
        self._countdown: dict[str, int] = {}

    def see(self, event: dict[str, Any]) -> None:
        if "error" in event:
            raise PermanentError(f"docker pull {self.ref}: {event['error']}{self._after()}")
        layer, status, detail = event.get("id"), event.get("status", ""), event.get("progressDetail") or {}
        waiting = _RETRYING.fullmatch(status) if layer else None
        if waiting:
            self._retrying(str(layer), int(waiting[1]))
            return
        if layer and status == "Downloading" and detail.get("total"):
            self.layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
        elif layer in self.layers and status in _DONE:
            self.layers[layer] = (self.layers[layer][1], self.layers[layer][1])
        else:
            return
        if self.on_progress is not None:
            self.on_progress(
                sum(done for done, _ in self.layers.values()), sum(total for _, total in self.layers.values())
            )

    def _retrying(self, layer: str, seconds: int) -> None:
        # A countdown that goes up again is dockerd's next retry (each waits 5 s more than the one before).
        if seconds >= self._countdown.get(layer, 0):
            self.retries[layer] = self.retries.get(layer, 0) + 1
        self._countdown[layer] = seconds
        if self.on_retry is not None:
            self.on_retry(layer, self.retries[layer], seconds)

    def _after(self) -> str:
        if not self.retries:
            return ""
        tried = ", ".join(f"layer {layer} {n} time(s)" for layer, n in self.retries.items())
        return f" (after dockerd retried {tried}, waiting 5 s more before each)"
