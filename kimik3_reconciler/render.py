"""Render plans and status for people (styled lines, rich on a terminal) — the CLI's view layer, no decisions here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kimik3_reconciler.console import Stream
from kimik3_reconciler.console import Styled as Text
from kimik3_reconciler.model.plan import Action, Plan, Step

if TYPE_CHECKING:  # annotations only: `kimik3 plan` imports this module, and must not pay for what status reads
    from kimik3_reconciler.model.facts import Observed
    from kimik3_reconciler.model.host_lock import LockHolder
    from kimik3_reconciler.model.profile import Profile

_STYLE = {
    Action.CREATE: "green",
    Action.UPDATE: "yellow",
    Action.REPLACE: "magenta",
    Action.DELETE: "red",
    Action.READ: "cyan",
    Action.NOOP: "dim",
}


def render_plan(plan: Plan, console: Stream, verbose: bool = False) -> None:
    console.print(Text(f"Plan for {plan.profile}: {plan.summary()}", style="bold"))
    for warning in plan.warnings:
        console.print(Text(f"  warning: {warning}", style="yellow"))
    if plan.forecast is not None:
        for line in plan.forecast.lines():
            console.print(Text(f"  {line}", style="cyan"))
    if plan.routes is not None:
        console.print(Text(f"  {plan.routes.summary()}", style="cyan"))
    hosts = plan.hosts()
    grouped = len(hosts) > 1  # RPC workers: the steps are shown per host, each with what it is sent
    for host, group in hosts.items():
        if grouped:
            ships = f", ships {group['ships_bytes'] / (1 << 20):.1f} MiB" if group["ships_bytes"] else ""
            console.print(Text(f"  on {host}: {group['changes']} change(s){ships}", style="bold"))
            # (apply order across hosts: every worker listens before the main server is (re)launched)
        for step in (s for s in plan.steps if s.host == host):
            _render_step(step, console, verbose)


def _render_step(step: Step, console: Stream, verbose: bool) -> None:
    if not step.changes and not verbose:
        return
    line = Text(f"{step.action.symbol:>3} ", style=_STYLE[step.action])
    line.append(f"{step.kind:<9} {step.target}", style="bold" if step.changes else "dim")
    console.print(line)
    console.print(Text(f"      {step.reason}", style="dim" if not step.changes else ""))
    for item in step.diff:
        console.print(Text(f"        {item}", style="yellow"))
    if step.cost:
        console.print(Text(f"      cost: {step.cost}", style="cyan"))
    for warning in step.warnings:
        console.print(Text(f"      warning: {warning}", style="yellow"))


def status_document(observed: Observed, holder: LockHolder | None, locked: bool) -> dict[str, Any]:
    """`kimik3 status --json`: the observation (secrets masked by the facts) and who holds the host lock."""
    data = observed.model_dump(mode="json", exclude={"host": {"cpu_flags"}})
    data["lock"] = {"held": locked, "holder": holder.to_json() if locked and holder else None}
    return data


def _served(profile: Profile, argv: tuple[str, ...], console: Stream) -> None:
    from kimik3_reconciler.engines import engine_for
    from kimik3_reconciler.planning.launch import served_names_in, served_note

    engine = engine_for(profile.engine)
    names = served_names_in(argv, engine.served_name_flag)
    if names:
        console.print(Text(f"model name {served_note(engine, names)}"))


def render_status(
    profile: Profile, observed: Observed, holder: LockHolder | None, locked: bool, console: Stream
) -> None:
    """`kimik3 status`: one line per thing observed for this profile (lock, container, images, model, gate
    records, last good, exporter, units)."""
    from kimik3_reconciler.planning import profile_images

    if locked:  # another kimik3 is changing the host now: what is observed may be half-way
        console.print(f"lock       held: {holder.describe() if holder else 'by another kimik3'}")
    c, m = observed.container, observed.model
    console.print(f"profile    {profile.name}")
    console.print(f"container  {c.state + ' (' + (c.health or '-') + ')' + ' ' + c.id[:12] if c else 'absent'}")
    if c and c.running:  # the names clients may send, from the running argv (issue 38: seed 001's send the repo id)
        _served(profile, c.running.command, console)
    if c and c.crash:  # read from its log: the cause, and for a CUDA OOM the fix
        console.print(Text(f"crashed    exit code {c.exit_code}: {c.crash}"))
    wanted, images = profile_images(profile, observed)  # this profile's, not every kimik3 image here
    console.print(
        f"images     {', '.join(images) if images else 'none'}"
        + ("" if any("current" in i for i in images) else f"; wants {wanted}, not built")
    )
    # No verified manifest here and the hub unreachable: "0/0 files" read as an empty quant; say what is unknown.
    counted = (
        f"file list unknown ({m.listing_error})"
        if m.listing_error and not m.files
        else f"{len(m.files) - len(m.missing)}/{len(m.files)} files"
    )
    source = (
        f"{m.local_path} (local {m.quant}" + (", never verified" if m.recorded_digest is None else "") + ")"
        if m.local_path is not None
        else f"{m.repo}@{m.revision[:12]}/{m.quant}"
    )
    console.print(
        Text(
            f"model      {source}: {counted}"
            + (f", {len(m.corrupt)} corrupt (sha256 mismatch)" if m.corrupt else "")
            + (
                f", {len(m.changed)} changed since verified (stat moved; not re-hashed here: `kimik3 plan` "
                "re-hashes them)"
                if m.changed
                else ""
            )
        )
    )
    for fingerprint, record in observed.gate_records.items():  # quant gate results, per image
        verdict = "passed" if record.get("passed") else "FAILED"
        console.print(
            f"gate       {verdict} on {record.get('date')} (image {record.get('image')}, {fingerprint}): "
            f"{record.get('why')}"
        )
    if observed.last_good:
        console.print(f"last good  recorded {observed.last_good} (the revert target)")
    if observed.exporter is not None:
        e = observed.exporter
        how = ("serving " + (e.serving or "") if e.serving else "not answering") if e.alive else "not running"
        console.print(f"metrics    exporter pid {e.pid}: {how} (kimik3 status --watch shows its numbers)")
    for unit in observed.systemd.units if observed.systemd else ():
        if unit.profile == profile.name:
            edited = ", edited by hand" if unit.unit_file and unit.unit_file.edited else ""
            console.print(f"unit       {unit.name}: {unit.active_state}, {unit.unit_file_state or '-'}{edited}")
