"""Render plans and status for people (styled lines, rich on a terminal) — the CLI's view layer, no decisions here."""

from __future__ import annotations

from kimik3_reconciler.console import Stream, Styled as Text
from kimik3_reconciler.model.plan import Action, Plan, Step

_STYLE = {
    Action.CREATE: "green", Action.UPDATE: "yellow", Action.REPLACE: "magenta",
    Action.DELETE: "red", Action.READ: "cyan", Action.NOOP: "dim",
}


def render_plan(plan: Plan, console: Stream, verbose: bool = False) -> None:
    console.print(Text(f"Plan for {plan.profile}: {plan.summary()}", style="bold"))
    for warning in plan.warnings:
        console.print(Text(f"  warning: {warning}", style="yellow"))
    if plan.forecast is not None:
        for line in plan.forecast.lines():
            console.print(Text(f"  {line}", style="cyan"))
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
