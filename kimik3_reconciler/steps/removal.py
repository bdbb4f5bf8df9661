"""Destroy: remove the container, and the image or cached model only when the user asked."""

from __future__ import annotations

from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.specs import Removal
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def remove(step: Step, ports: Ports, reporter: Reporter) -> None:
    removal: Removal = step.spec
    if removal.what == "container":
        ports.docker.remove_container(removal.ref)
    elif removal.what == "image":
        ports.docker.remove_image(removal.ref)
    elif removal.what == "model":
        spec = removal.model
        for f in spec.files:
            ports.hub.remove_cached(spec.repo, spec.revision, f.path, spec.cache_dir)
        ports.state.delete(spec.manifest_key)
    reporter.event("removed", what=removal.what, ref=removal.ref)
