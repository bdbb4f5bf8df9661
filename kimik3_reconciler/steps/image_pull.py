"""Pull an engine's image by digest (vLLM, SGLang): through dockerd (its logins, never kimik3's argv or logs),
then check that the image docker now holds carries the digest among its RepoDigests."""

from __future__ import annotations

from collections.abc import Callable

from kimik3_reconciler.errors import Kimik3Error, PermanentError, TransientError
from kimik3_reconciler.model.specs import ImagePull
from kimik3_reconciler.observe.pulled_image import holds_digest
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def _watchers(
    spec: ImagePull, reporter: Reporter
) -> tuple[Callable[[int, int], None], Callable[[str, int, int], None]]:
    """The pull's progress, and dockerd's retries of a failed layer said as they start (issue 38: 75 s of a still
    progress line before the error) and counted down on the progress line."""
    shown = {"done": 0, "total": 0}
    said: dict[str, int] = {}

    def progress(done: int, total: int) -> None:
        shown.update(done=done, total=total)
        reporter.progress("pull", done, total)

    def retry(layer: str, attempt: int, seconds: int) -> None:
        if said.get(layer) != attempt:
            said[layer] = attempt
            reporter.event(
                "pull-retry",
                image=spec.by_digest,
                layer=layer,
                retry=attempt,
                in_s=seconds,
                why=f"downloading layer {layer} failed (the registry stopped answering?): dockerd retries "
                f"it, retry {attempt} of 5 by default (--max-download-attempts), waiting 5, 10, 15, "
                "20, 25 s: up to 75 s before the pull fails",
            )
        reporter.progress(
            "pull",
            shown["done"],
            shown["total"],
            phase=f"layer {layer} failed, dockerd retries it in {seconds} s (retry {attempt})",
        )

    return progress, retry


def pull_image(spec: ImagePull, ports: Ports, reporter: Reporter) -> None:
    present = ports.docker.inspect_image(spec.by_digest)
    if present is not None and holds_digest(spec.by_digest, spec.digest, present):
        # Pulled since the plan (another apply, by hand): the digest is the identity, nothing to move.
        reporter.event("present", image=spec.by_digest, id=str(present.get("Id", ""))[:19])
        return
    reporter.event("pull", image=spec.by_digest)
    started = ports.clock.monotonic()
    try:
        ports.docker.pull_image(spec.by_digest, *_watchers(spec, reporter))
    except Kimik3Error as exc:
        # The daemon's message says why (manifest unknown, no route, a login); the ref says which profile field.
        again = TransientError if isinstance(exc, TransientError) else PermanentError
        raise again(f"image.ref {spec.ref}: pulling {spec.by_digest} failed: {exc}") from exc
    pulled = ports.docker.inspect_image(spec.by_digest)
    # rule: image-by-digest
    # What docker holds must be what the profile pins: a daemon or mirror that rewrote the manifest is refused.
    if pulled is None or not holds_digest(spec.by_digest, spec.digest, pulled):
        found = ", ".join((pulled or {}).get("RepoDigests") or ()) or "none"
        raise PermanentError(
            f"image.ref {spec.ref}: the pulled image does not carry {spec.digest} (its RepoDigests: {found})"
        )
    reporter.event(
        "pulled",
        image=spec.by_digest,
        id=str(pulled.get("Id", ""))[:19],
        seconds=round(ports.clock.monotonic() - started, 1),
    )
