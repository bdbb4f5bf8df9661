"""One host's `kimik3 plan --json`, read for the fleet: what changes there, whether its server is replaced, and the
figures the plan prices (predicted downtime, compile time, bytes to fetch or pull); PURE (a JSON document in).

The plan states its figures in each step's `cost` (made by planning/health_step.py, build_time.py, model_step.py,
image_pull.py with model/humanize.py's units); the model step's payload lists the files and which are missing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kimik3_reconciler.model.plan import DiffItem, shown

_DURATION = r"~(\d+(?:\.\d+)?) (s|min)"
_DOWNTIME = re.compile(r"predicted downtime " + _DURATION)
# The image step's build (engines/<name>/: llama.cpp's build_time.py says "compile <what>: ~N min (how)").
_COMPILE = re.compile(r"compile [^\s:]+: " + _DURATION)
_PULL = re.compile(r"(\d+(?:\.\d+)?) (GiB|MiB|B) to pull")
_UNIT_S = {"s": 1.0, "min": 60.0}
_UNIT_BYTES = {"GiB": 1 << 30, "MiB": 1 << 20, "B": 1}
_SERVER_KINDS = ("container", "health")


@dataclass(frozen=True)
class HostPlan:
    """What the fleet needs of one host's plan."""

    host: str
    converged: bool
    summary: str
    changes: tuple[str, ...]  # the changing steps as `kimik3 plan` prints them (step_lines), line by line
    relaunch: bool  # its server is (re)launched: the host serves nothing for `downtime_s`
    downtime_s: float | None  # the health step's predicted downtime; None when the plan states none
    build_s: float | None  # the image compile's predicted duration, when one is planned
    fetch_bytes: int  # model bytes this host lacks
    pull_bytes: int  # image bytes this host pulls
    model: str  # repo@revision/quant: hosts holding the same files can give them to each other
    hub: str  # where the model step fetches from (its endpoint, else the Hugging Face hub)
    # It has a server now (its container is not to be created): only such a host is in the router to leave it.
    serving: bool = True


def step_lines(step: Mapping[str, Any]) -> tuple[str, ...]:
    """A changing step as `kimik3 plan` prints it (render.py's _render_step): symbol, kind, target; the reason; each
    diff item; the cost; warnings. The host's text is escaped (model.plan.shown): it reaches this terminal."""
    symbol, kind, target = (shown(str(step.get(k) or "?")) for k in ("symbol", "kind", "target"))
    lines = [f"{symbol:>3} {kind:<9} {target}", f"      {shown(str(step.get('reason') or ''))}"]
    lines += [
        f"        {DiffItem(str(d.get('field')), d.get('old'), d.get('new'))}"
        for d in step.get("diff") or ()
        if isinstance(d, Mapping)
    ]
    if step.get("cost"):
        lines.append(f"      cost: {shown(str(step['cost']))}")
    lines += [f"      warning: {shown(str(w))}" for w in step.get("warnings") or ()]
    return tuple(lines)


def _seconds(match: re.Match[str] | None) -> float | None:
    return float(match.group(1)) * _UNIT_S[match.group(2)] if match else None


def read_host_plan(host: str, document: Mapping[str, Any]) -> HostPlan:
    """`document`: the host's `kimik3 plan --json` (model/plan.py's Plan.to_json)."""
    steps = [s for s in document.get("steps", []) if isinstance(s, Mapping)]
    changing = [s for s in steps if s.get("action") not in ("noop",)]
    downtime = build = None
    fetch = pull = 0
    model, hub = "", "the Hugging Face hub"
    for step in steps:
        cost, spec = str(step.get("cost") or ""), step.get("spec") if isinstance(step.get("spec"), Mapping) else {}
        if step.get("kind") == "model" and spec:
            model = f"{spec.get('repo')}@{str(spec.get('revision'))[:12]}/{spec.get('quant')}"
            hub = str(spec.get("endpoint") or hub)
            if step.get("action") != "noop":
                missing = set(spec.get("missing") or ())
                fetch += sum(int(f.get("size") or 0) for f in spec.get("files") or () if f.get("path") in missing)
        if step.get("action") == "noop":
            continue
        downtime = _seconds(_DOWNTIME.search(cost)) if downtime is None else downtime
        build = _seconds(_COMPILE.search(cost)) if build is None else build
        if step.get("kind") == "image" and (found := _PULL.search(cost)):
            pull += int(float(found.group(1)) * _UNIT_BYTES[found.group(2)])
    relaunch = any(
        s.get("kind") == "container" and s.get("action") in ("create", "replace", "update") for s in changing
    )
    lines = tuple(line for s in changing for line in step_lines(s))
    return HostPlan(
        host,
        bool(document.get("converged")),
        str(document.get("summary") or ""),
        lines,
        relaunch,
        downtime if relaunch else 0.0 if not changing else downtime,
        build,
        fetch,
        pull,
        model,
        hub,
        not any(s.get("kind") == "container" and s.get("action") == "create" for s in changing),
    )
