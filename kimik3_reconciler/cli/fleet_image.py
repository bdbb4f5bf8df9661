"""`kimik3 fleet image push|pull` (hidden; run on the hosts by `fleet apply --registry`): images once per site.

push (on the first host rolled, once its server passed every gate): the image its server runs, tagged
`REGISTRY/kimik3/<profile name>:<image id[:12]>` and pushed to the site's registry; prints the reference by the
digest the registry stored it under, as JSON (`{"ref": ...}`), for the playbook to hand to the other hosts.
pull (on every other host, before it leaves the router): that reference, by digest. kimik3 finds its images by
their fingerprint label, so the host's `kimik3 apply` then finds the image present and builds nothing."""

from __future__ import annotations

import json

import click

from kimik3_reconciler.cli import _run
from kimik3_reconciler.errors import StepError


def _docker(ctx: click.Context):  # noqa: ANN202 - adapters.docker_engine.DockerEngine
    from kimik3_reconciler.adapters.docker_engine import DockerEngine

    return DockerEngine(ctx.obj.get("docker_host"))


@click.group(name="image", hidden=True)
def image() -> None:
    """The serving image built once, pushed to the site's registry, pulled by digest (run by `fleet apply`)."""


@image.command(name="push")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--registry", required=True, help="the site's registry, ADDRESS:PORT")
@click.pass_context
@_run
def push_cmd(ctx: click.Context, file: str, registry: str) -> None:
    from kimik3_reconciler.cli.inputs import load

    profile = load(file, pinned=False).profile
    docker = _docker(ctx)
    running = docker.inspect_container(profile.name)
    if running is None:  # pushed only after the host's gates passed: its server runs the fleet's image
        raise StepError(f"no container {profile.name} here: nothing to push to {registry}")
    image_id = str(running["Image"])
    repository = f"{registry}/kimik3/{profile.name}"
    digest = docker.push_image(image_id, f"{repository}:{image_id.removeprefix('sha256:')[:12]}")
    click.echo(json.dumps({"ref": f"{repository}@{digest}", "image": image_id}))


@image.command(name="pull")
@click.argument("ref")
@click.pass_context
@_run
def pull_cmd(ctx: click.Context, ref: str) -> None:
    if "@sha256:" not in ref:  # the point: every host runs the bytes the first one pushed, not what a tag says now
        raise StepError(f"{ref}: not a reference by digest")
    click.echo(json.dumps({"ref": ref, "image": _docker(ctx).pull_image(ref)}))


def register(group: click.Group) -> None:
    group.add_command(image)
