"""What `fleet plan` and `fleet status` print: JSON documents and text lines; PURE (values in, data out).

The router's view of each host (in rotation, breaker, requests in flight) comes through `RouterView` when a router
adapter is wired in; without one those columns say "-". Each host's prefix-cache hits are its server's own counters
(fleet/server_load.py), since that server started; the fleet's are every host's tokens added."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from kimik3_reconciler.engines.base import PrefixCacheTokens
from kimik3_reconciler.fleet.gather import HostAnswer
from kimik3_reconciler.fleet.groups import group_hosts, member_states, members, spans, worker_address, worker_endpoint
from kimik3_reconciler.fleet.host_plan import HostPlan
from kimik3_reconciler.fleet.pricing import ImageShare, RolloutPrice
from kimik3_reconciler.fleet.values import Fleet, FleetHost


@dataclass(frozen=True)
class RouterRow:
    """One host as the router sees it."""

    state: str  # e.g. "in rotation", "out", "breaker open"
    in_flight: int | None = None


class RouterView(Protocol):
    """The seam for a router adapter (smg): each host's state in the router, by host name."""

    def rows(self, fleet: Fleet) -> Mapping[str, RouterRow]: ...


def group_json(host: FleetHost) -> list[dict[str, Any]]:
    """A group's members (fleet/groups.py): name, kind (worker | node), the host it runs on, where it is reached."""
    return [
        {"name": m.name, "kind": m.kind, "host": worker_address(m), "endpoint": worker_endpoint(m)}
        for m in members(host.profile)
    ]


def group_line(host: FleetHost) -> str:
    listed = group_json(host)
    what = "main server and RPC workers" if listed[0]["kind"] == "worker" else "head and cluster nodes"
    named = ", ".join(f"{m['name']} on {m['host']} ({m['endpoint']})" for m in listed)
    return (
        f"  group: replica {host.name} spans hosts {', '.join(group_hosts(host))}: its {what} {named}: one replica "
        "(out, applied, gated, back in together)"
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} B"


def price_json(price: RolloutPrice) -> dict[str, Any]:
    return {
        "batches": [asdict(b) for b in price.batches],
        "duration_s": price.duration_s,
        "duration_max_s": price.duration_max_s,
        "hosts": price.hosts,
        "min_serving": price.min_serving,
        "timeline": [{"at_s": t, "serving": n, "event": e} for t, n, e in price.timeline],
        "transfers": [asdict(t) for t in price.transfers],
        "hub_bytes": price.hub_bytes,
        "peer_bytes": price.peer_bytes,
        "unpriced": list(price.unpriced),
        "image": asdict(price.image) if price.image else None,
    }


def plan_document(
    fleet: Fleet, answers: tuple[HostAnswer, ...], plans: Mapping[str, HostPlan], price: RolloutPrice
) -> dict[str, Any]:
    hosts = []
    for answer in answers:
        host = fleet.host(answer.host)
        entry: dict[str, Any] = {
            "host": host.name,
            "target": host.ssh_target,
            "ok": answer.ok,
            "kimik3": answer.version,
        }
        if spans(host.profile):
            entry["workers"] = group_json(host)
            entry["spans"] = list(group_hosts(host))
        if not answer.ok:
            entry.update(problem=answer.problem, message=answer.message)
        else:
            p = plans[answer.host]
            entry.update(
                converged=p.converged,
                summary=p.summary,
                relaunch=p.relaunch,
                downtime_s=p.downtime_s,
                build_s=p.build_s,
                fetch_bytes=p.fetch_bytes,
                pull_bytes=p.pull_bytes,
                plan=answer.document,
            )
        hosts.append(entry)
    return {
        "fleet": fleet.name,
        "ok": all(a.ok for a in answers),
        "converged": all(a.ok and plans[a.host].converged for a in answers),
        "hosts": hosts,
        "rollout": price_json(price),
    }


def plan_lines(
    fleet: Fleet, answers: tuple[HostAnswer, ...], plans: Mapping[str, HostPlan], price: RolloutPrice
) -> list[str]:
    lines = []
    for answer in answers:
        host = fleet.host(answer.host)
        if not answer.ok:
            lines.append(f"host {host.name} ({host.ssh_target}): NOT PLANNED ({answer.problem}): {answer.message}")
            continue
        p = plans[answer.host]
        lines.append(f"host {host.name} ({host.ssh_target}): {p.summary}")
        lines += [group_line(host)] if spans(host.profile) else []
        lines += list(p.changes)
    lines.append("")
    lines.append(
        f"rollout: {price.hosts} hosts, at most {price.hosts - price.min_serving} out at once "
        f"(at least {price.min_serving} serving)"
    )
    unplanned = [a.host for a in answers if not a.ok]
    if unplanned:
        # Priced without them (fleet/pricing.py): "nothing to roll" alone read as "converged" when no host answered.
        lines.append(f"  not planned (above): {', '.join(unplanned)}: priced without them, counted as not serving")
    if not price.batches:
        lines.append(
            "  nothing to roll: no planned host has changes"
            if len(unplanned) < len(answers)
            else "  nothing to roll: no host was planned"
        )
    pulls = set(price.image.pullers) if price.image else set()
    for i, batch in enumerate(price.batches, 1):
        what = "canary" if batch.canary else f"batch {i}"
        downtime = ", ".join(
            f"{h} ~{_duration(plans[h].downtime_s or 0)} downtime" + _compile_text(plans[h], h in pulls)
            for h in batch.hosts
        )
        lines.append(
            f"  {what}: {', '.join(_replica(fleet, h) for h in batch.hosts)} at +{_duration(batch.start_s)}: "
            f"{downtime}; "
            f"{batch.serving} serving meanwhile"
            + (
                f" (below the floor of {price.min_serving}: fleet apply waits up to {_duration(batch.capacity_wait_s)}"
                f" for the others' capacity, then halts the rollout there, {', '.join(batch.hosts)} kept in)"
                if batch.capacity_wait_s
                else ""
            )
        )
    lines.append(
        f"  duration: ~{_duration(price.duration_s)} with immediate drains, "
        f"~{_duration(price.duration_max_s)} "
        f"if every drain takes its whole timeout"
        + (" (and each capacity wait)" if any(b.capacity_wait_s for b in price.batches) else "")
    )
    lines.append("  capacity: " + " → ".join(f"{n}@+{_duration(t)}" for t, n, _ in price.timeline))
    for t in price.transfers:
        lines.append(f"  bytes: {t.host} needs {_gib(t.bytes)} of {t.model} from {t.source}")
    if price.transfers:
        lines.append(f"  bytes: {_gib(price.hub_bytes)} from the hub, {_gib(price.peer_bytes)} between hosts")
    if price.unpriced:
        lines.append(f"  unpriced: {', '.join(price.unpriced)} (their plans state no predicted downtime)")
    if price.image:
        lines.append(image_line(price.image, plans))
    return lines


def _replica(fleet: Fleet, name: str) -> str:
    """A batch's replica by its host's name, and the hosts it spans where it is a group (out and back as one)."""
    host = fleet.host(name)
    return f"{name} (spans {', '.join(group_hosts(host))})" if spans(host.profile) else name


def _compile_text(plan: HostPlan, pulls_image: bool) -> str:
    if not plan.build_s:
        return ""
    if pulls_image:  # `fleet apply --registry`: pulled by digest before it leaves the router
        return f" (the image pulled before, not its ~{_duration(plan.build_s)} compile)"
    return f" + ~{_duration(plan.build_s)} compile"


def image_line(image: ImageShare, plans: Mapping[str, HostPlan]) -> str:
    """Where the image comes from with the site's registry (fleet/pricing.py ImageShare), as one line."""
    first = plans.get(image.pusher)
    built = (
        f"built on {image.pusher} (~{_duration(first.build_s)} compile)"
        if first and first.build_s
        else f"the one {image.pusher} runs"
    )
    others = [h for h in image.builders if h != image.pusher]
    line = f"  image: {built}, pushed to {image.registry} once {image.pusher} is back in rotation"
    if image.pullers:
        line += f"; pulled by digest by {', '.join(image.pullers)} before each leaves the router"
        line += (
            f": ~{_duration(image.compile_saved_s)} of compile not spent ({', '.join(image.compiles_saved)})"
            if image.compiles_saved
            else " (no later host's plan compiles)"
        )
    if others:  # rolled with the first host: no reference to pull yet
        line += f"; {', '.join(others)} (the first batch) build{'s its' if len(others) == 1 else ' their'} own"
    return line + "; the plans state no image size, and no link rate prices the push and the pulls"


def prefix_cache_json(tokens: PrefixCacheTokens | None) -> dict[str, Any] | None:
    """Prompt tokens taken from the prefix cache of all sent, and their share (None: no counter read)."""
    if tokens is None:
        return None
    return {"hit_tokens": int(tokens.hits), "prompt_tokens": int(tokens.prompt), "hit_rate": tokens.rate}


def _tokens(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"


def prefix_cache_text(cache: dict[str, Any] | None) -> str | None:
    if not cache or cache["hit_rate"] is None:
        return None
    return f"{100 * cache['hit_rate']:.0f}% of {_tokens(cache['prompt_tokens'])}"


def status_row(
    fleet: Fleet,
    answer: HostAnswer,
    router: Mapping[str, RouterRow],
    in_flight: int | None = None,
    prefix_cache: PrefixCacheTokens | None = None,
) -> dict[str, Any]:
    """One row of `fleet status`: the host's container and model as its own `kimik3 status --json` reports them;
    requests in flight from its server's /metrics (`in_flight`), else from the router; the prefix-cache tokens its
    server's counters report (`prefix_cache`, since the server started)."""
    host = fleet.host(answer.host)
    in_router = router.get(host.name)
    row: dict[str, Any] = {
        "host": host.name,
        "target": host.ssh_target,
        "kimik3": answer.version,
        "router": in_router.state if in_router else None,
        "in_flight": in_flight if in_flight is not None else in_router.in_flight if in_router else None,
        "prefix_cache": prefix_cache_json(prefix_cache),
    }
    if spans(host.profile):
        states = member_states(host, answer.document if answer.ok else None)
        row["workers"] = [asdict(w) for w in states]
        row["group"] = "; ".join(w.text() for w in states)
    if not answer.ok:
        return {**row, "ok": False, "problem": answer.problem, "message": answer.message, "health": answer.problem}
    doc = answer.document or {}
    container = doc.get("container") or {}
    inputs = container.get("inputs") or {}
    model = doc.get("model") or {}
    drift = (
        "no container"
        if not container
        else f"container {container.get('state')}"
        if container.get("state") != "running"
        else "unverified launch"
        if doc.get("unverified")
        else "none seen"
    )
    return {
        **row,
        "ok": True,
        "fingerprint": (container.get("fingerprint") or "")[:12] or None,
        "quant": inputs.get("model.quant") or model.get("quant"),
        "build": container.get("image") or None,
        "health": container.get("health") or container.get("state") or "absent",
        "drift": drift,
        "locked": bool((doc.get("lock") or {}).get("held")),
    }


STATUS_COLUMNS = (
    "host",
    "fingerprint",
    "quant",
    "build",
    "kimik3",
    "health",
    "in_flight",
    "cache_hits",
    "router",
    "drift",
)


def fleet_prefix_cache(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fleet's prefix-cache tokens: every host's that has a reading, added."""
    readings = [r["prefix_cache"] for r in rows if r.get("prefix_cache")]
    return prefix_cache_json(
        PrefixCacheTokens.total(PrefixCacheTokens(c["hit_tokens"], c["prompt_tokens"]) for c in readings)
    )


def _cell(row: dict[str, Any], column: str) -> str:
    value = prefix_cache_text(row.get("prefix_cache")) if column == "cache_hits" else row.get(column)
    return "-" if value is None else str(value)


def status_lines(rows: list[dict[str, Any]]) -> list[str]:
    # A fleet with groups gets a column of each group's members (up | dead | unknown, and why).
    columns = STATUS_COLUMNS + (("group",) if any(r.get("workers") for r in rows) else ())
    table = [list(columns)] + [[_cell(r, c) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    fleet = prefix_cache_text(fleet_prefix_cache(rows))
    if fleet:  # cache_hits: prompt tokens the servers took from their prefix caches, by their own counters
        out.append(f"fleet: {fleet} prompt tokens from the servers' prefix caches (since each server started)")
    out += [f"{r['host']}: {r['message']}" for r in rows if not r["ok"]]
    return out
