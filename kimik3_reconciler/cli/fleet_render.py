"""`kimik3 fleet render FILE --target kubernetes [--out DIR]`: the manifests a GitOps repo commits for the fleet
(fleet/targets/kubernetes.py renders them; nothing here reaches a cluster). Without --out, one multi-document YAML on
stdout; with it, a file per object and a kustomization.yaml listing them, files an earlier render wrote and this one
no longer renders removed (only files that start with this command's header)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kimik3_reconciler.cli import _run

HEADER = "# Rendered by `kimik3 fleet render --target kubernetes`: edit the fleet file and render again.\n"


@click.command(name="render")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--target",
    type=click.Choice(["kubernetes"]),
    required=True,
    help="what to render for (kubernetes: a LeaderWorkerSet, the router, its Service)",
)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="write one file per object into DIR")
@click.option(
    "--rollout",
    type=click.Choice(["canary", "all"]),
    default="canary",
    show_default=True,
    help="canary: a change reaches the canary's groups only (partition); all: every group (partition 0)",
)
@click.option(
    "--json", "json_out", is_flag=True, help="print the manifests (and the files written) as one JSON document"
)
@_run
def render_cmd(file: str, target: str, out: str | None, rollout: str, json_out: bool) -> None:
    """Render the fleet for another orchestrator; the fleet file's `kubernetes:` section says what no host can."""
    from kimik3_reconciler.cli.fleet_cmd import load_fleet
    from kimik3_reconciler.fleet.targets.kubernetes import render_kubernetes
    from kimik3_reconciler.fleet.targets.kubernetes_objects import manifest_yaml

    manifests = render_kubernetes(load_fleet(file), rollout)  # type: ignore[arg-type]
    document = {"ok": True, "target": target, "rollout": rollout, "manifests": [m.body for m in manifests]}
    if out is None:
        if json_out:
            click.echo(json.dumps(document, indent=2))
        else:
            click.echo(HEADER + "---\n".join(manifest_yaml(m) for m in manifests), nl=False)
        return
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    names = [m.file_name for m in manifests]
    for manifest in manifests:
        (folder / manifest.file_name).write_text(HEADER + manifest_yaml(manifest))
    kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
    (folder / "kustomization.yaml").write_text(HEADER + kustomization + "".join(f"- {n}\n" for n in names))
    for stale in sorted(folder.glob("*.yaml")):
        # An object this render no longer has: its file goes, so the GitOps repo's diff deletes it too. Only ours.
        if stale.name not in names and stale.name != "kustomization.yaml" and stale.read_text().startswith(HEADER):
            stale.unlink()
    if json_out:
        click.echo(
            json.dumps({**document, "files": [str(folder / n) for n in [*names, "kustomization.yaml"]]}, indent=2)
        )
    else:
        click.echo(f"{folder}: {len(manifests)} manifests and kustomization.yaml ({rollout} rollout)")
