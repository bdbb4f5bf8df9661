"""dockerd's pull stream read by adapters/pull_events.py, on a real one: tests/fixtures/docker/pull-registry-killed.jsonl
was recorded from dockerd 20.10.24 (this machine's) pulling a 64 MiB one-layer image from Debian's docker-registry on
loopback, killed (SIGKILL) at the first Downloading event. The layer showed 100 %, then 75 "Retrying in N seconds"
events over 75 s (five retries: 5, 10, 15, 20, 25 s), then the error (issue 38 item 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimik3_reconciler.adapters.pull_events import PullWatch
from kimik3_reconciler.errors import PermanentError

EVENTS = [
    json.loads(line)
    for line in (Path(__file__).resolve().parents[2] / "fixtures" / "docker" / "pull-registry-killed.jsonl")
    .read_text()
    .splitlines()
]
LAYER = "185b1527b61c"


def test_dockerds_retries_are_counted_and_named_in_the_error() -> None:
    progress: list[tuple[int, int]] = []
    retries: list[tuple[str, int, int]] = []
    watch = PullWatch(
        "127.0.0.1:52631/i38e/pullfault@sha256:c0ea",
        lambda d, t: progress.append((d, t)),
        lambda layer, n, s: retries.append((layer, n, s)),
    )
    with pytest.raises(PermanentError) as failed:
        for event in EVENTS:
            watch.see(event)
    assert progress[-1][0] == progress[-1][1] == 67129528  # the layer at 100 %, before any retry
    assert retries[0] == (LAYER, 1, 5) and retries[-1] == (LAYER, 5, 1) and len(retries) == 75
    assert [s for _, n, s in retries if n == 2][:2] == [10, 9]  # each retry waits 5 s more than the one before
    assert str(failed.value) == (
        "docker pull 127.0.0.1:52631/i38e/pullfault@sha256:c0ea: dial tcp 127.0.0.1:52631: "
        f"connect: connection refused (after dockerd retried layer {LAYER} 5 time(s), "
        "waiting 5 s more before each)"
    )


def test_a_pull_without_retries_says_dockerds_error_alone() -> None:
    watch = PullWatch("r@sha256:1", None, None)
    watch.see({"status": "Pulling fs layer", "progressDetail": {}, "id": LAYER})
    with pytest.raises(PermanentError, match=r"^docker pull r@sha256:1: manifest unknown$"):
        watch.see({"error": "manifest unknown"})
