"""`kimik3 pin FILE`: resolve the profile's branches and tags to what the hub and the registry serve now, and write
those pins into FILE in place (comments and key order kept), the way a lock file is written."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kimik3_reconciler.cli import _err, _out, _run
from kimik3_reconciler.cli.inputs import check_not_made_up, load, parse_text, read_text
from kimik3_reconciler.errors import InputError


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--update",
    is_flag=True,
    help="also resolve again what was pinned before: a revision from the branch "
    "or tag its `# pin:` comment records, an image from its tag",
)
@click.option("--dry-run", is_flag=True, help="say what would be pinned; write nothing")
@click.option("--json", "json_out", is_flag=True, help="print the pins as JSON on stdout")
@_run
def pin(file: str, update: bool, dry_run: bool, json_out: bool) -> None:
    """Pin FILE: each `revision` naming a branch or tag gets the commit the hub serves for it now (the name kept as
    a `# pin: NAME` comment), each image tag the digest the registry serves for it now (`tag@sha256:…`).

    Only the hub and the registry are asked; the host is not touched. Without --update a field already pinned is
    left as it is. Exit 0 (also when nothing needed a pin), 2 invalid profile, 6 hub, 1 registry."""
    from kimik3_reconciler.adapters.atomic_files import write_atomically
    from kimik3_reconciler.model.pinning import pins
    from kimik3_reconciler.model.profile_edit import pinned_from, set_pins

    # rule: pins-not-made-up
    # A placeholder is refused as validate refuses it: called "pinned" here, it would survive the command meant
    # to give the profile real pins.
    loaded = check_not_made_up(load(file, pinned=False))
    text = read_text(file)
    changes: dict[tuple[str, ...], tuple[str, str | None]] = {}
    rows = []
    for found in pins(loaded.profile):
        path = tuple(str(p) for p in found.field)
        name = found.name if not found.pinned else pinned_from(text, path) if found.kind == "hub" else _tag(found.name)
        if name is None or (found.pinned and not update):
            rows.append({"field": ".".join(path), "from": name, "value": found.value, "changed": False})
            continue
        value = _resolve(found.kind, found.source, name, found.endpoint)
        changed = value != found.value
        if changed:
            changes[path] = (value, name if found.kind == "hub" else None)
        rows.append({"field": ".".join(path), "from": name, "value": value, "changed": changed})
    if changes and not dry_run:
        new_text = set_pins(text, changes)
        parse_text(new_text, file)  # what is written validates, or nothing is written
        target = Path(file).resolve()  # through a symlink: the rename must not replace the link with a copy
        if not target.is_file():
            raise InputError(f"{file} is not a regular file: pin rewrites FILE in place; give the profile's own path")
        write_atomically(target, new_text, make_folder=False, mode=target.stat().st_mode & 0o777)
    if json_out:
        click.echo(json.dumps({"file": file, "written": bool(changes) and not dry_run, "pins": rows}, indent=2))
        return
    for row in rows:
        if row["changed"]:
            _out.print(f"{file}: {row['field']}: {row['from']} -> {row['value']}", highlight=False)
        else:
            why = (
                ("unchanged" if update else "pinned (--update resolves it again)")
                if row["from"]
                else "pinned (no branch or tag recorded)"
            )  # --update too: nothing was asked, so not "unchanged"
            _out.print(f"{file}: {row['field']}: {row['value']} {why}", highlight=False)
    if changes:
        _err.print(f"{file}: {'would write' if dry_run else 'wrote'} {len(changes)} pin(s)")


def _resolve(kind: str, source: str, name: str, endpoint: str | None) -> str:
    """The commit (hub) or `tag@digest` (image) served for `name` now."""
    if kind == "hub":
        from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub

        return HuggingFaceHub().commit_of(source, name, endpoint)
    from kimik3_reconciler.adapters.registry import RegistryApi

    return f"{name}@{RegistryApi().digest_of(name)}"


def _tag(ref: str) -> str | None:
    """`ref` (an image reference without its digest) when it names a tag to resolve again, else None: an image pinned
    by digest alone (`repo@sha256:…`) records no tag, as a commit without its `# pin:` comment records no branch."""
    from kimik3_reconciler.errors import PlanError
    from kimik3_reconciler.model.image_ref import tagged_image

    try:
        tagged_image(ref)  # a PlanError when it names no tag
    except PlanError:
        return None
    return ref
