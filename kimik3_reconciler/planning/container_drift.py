"""Drift: the running container's real config (docker inspect) against the rendered one, field by field.

kimik3's labels say what it launched; they do not say what runs now. A container recreated by hand
with the same labels but another argv, an extra env var or a writable weights mount must plan a
replacement that names the field, so every field `render_container` sets is compared here.
Env values are never shown (a hand-added variable may hold a secret): Terraform's "(sensitive value)".
"""

from __future__ import annotations

from kimik3_reconciler.model.facts import MountFact, RunningConfig, mask_secret_args
from kimik3_reconciler.model.plan import DiffItem
from kimik3_reconciler.model.specs import ContainerSpec

HIDDEN = "(sensitive value)"


def _argv_change(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, str]:
    """The differing stretch of two argvs, with the flag before it and `…` for what both share."""
    old, new = mask_secret_args(old), mask_secret_args(new)  # plans and plan files never show a secret
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    start = max(prefix - 1, 0)  # keep the flag whose value changed

    def stretch(argv: tuple[str, ...]) -> str:
        middle = " ".join(argv[start : len(argv) - suffix]) or "(nothing)"
        return ("… " if start else "") + middle + (" …" if suffix else "")

    return stretch(old), stretch(new)


def _env_diff(spec: ContainerSpec, running: RunningConfig) -> list[DiffItem]:
    defaults = dict(running.defaults)
    # A profile variable equal to the image's default is indistinguishable from the default itself.
    wanted = {k: v for k, v in spec.env if defaults.get(k) != v}
    found = dict(running.env)
    return [
        DiffItem(f"container.env.{key}", HIDDEN if key in found else None, HIDDEN if key in wanted else None)
        for key in sorted(wanted.keys() | found.keys())
        if wanted.get(key) != found.get(key)
    ]


def _mount_text(mount: MountFact | None) -> str | None:
    if mount is None:
        return None
    return f"{mount.source} ({'read-only' if mount.read_only else 'read-write'})"


def _mount_diff(spec: ContainerSpec, running: RunningConfig) -> list[DiffItem]:
    wanted = {m.target: MountFact(source=m.source, target=m.target, read_only=m.read_only) for m in spec.mounts}
    wanted.update({target: MountFact(source=name, target=target, read_only=False) for name, target in spec.volumes})
    found = {m.target: m for m in running.mounts}
    items = []
    for target in sorted(wanted.keys() | found.keys()):
        old, new = found.get(target), wanted.get(target)
        if old == new:
            continue
        if old is not None and new is not None and old.source == new.source:
            # The weights mount must be read-only: a server that can write its GGUF can corrupt it.
            items.append(
                DiffItem(
                    f"mount {target}",
                    "read-only" if old.read_only else "read-write",
                    "read-only" if new.read_only else "read-write",
                )
            )
        else:
            items.append(DiffItem(f"mount {target}", _mount_text(old), _mount_text(new)))
    return items


def running_drift(spec: ContainerSpec, running: RunningConfig) -> tuple[DiffItem, ...]:
    """Every field where what runs differs from the rendered container (labels aside: the fingerprint's)."""
    items: list[DiffItem] = []
    if running.image != spec.image:
        items.append(DiffItem("container.image", running.image, spec.image))
    # None on either side is the image's own entrypoint, which a spec may also name explicitly.
    wanted_entrypoint = None if spec.entrypoint == running.image_entrypoint else spec.entrypoint
    if running.entrypoint != wanted_entrypoint:
        items.append(
            DiffItem(
                "container.entrypoint",
                " ".join(running.entrypoint or ("(the image's)",)),
                " ".join(spec.entrypoint or ("(the image's)",)),
            )
        )
    if running.command != spec.command:
        items.append(DiffItem("container.command", *_argv_change(running.command, spec.command)))
    items += _env_diff(spec, running)
    items += _mount_diff(spec, running)
    for field in ("gpus", "network_mode", "ipc_mode", "restart_policy"):
        old, new = getattr(running, field), getattr(spec, field)
        if old != new:
            items.append(DiffItem(f"container.{field}", _plain(old), _plain(new)))
    return tuple(items)


def _plain(value: str | tuple[str, ...]) -> str:
    return value if isinstance(value, str) else ",".join(value)
