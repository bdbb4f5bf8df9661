"""`kimik3 fleet recover`: a group whose member died (an RPC worker, a cluster node) leaves the router, is
re-converged and comes back.

llama.cpp's RPC has no recovery of its own: a dead rpc-server fails the main server on its next call, and a new one
holds none of the tensors placed on the old; a cluster node that left took its head's ranks with it (vLLM's Ray actors,
SGLang's torch.distributed group). So a group with a dead member (fleet/groups.py, read from its main
host's `kimik3 status --json`) is handled as a rollout handles a host, with what the rollout has:
  router: out       every dead group first, without the capacity floor (a group with a dead member serves only
                    errors: keeping it in rotation costs requests, taking it out costs no capacity it has)
  gate: apply       `kimik3 apply` on the main host: its plan relaunches the member through the member's Docker and
                    replaces the main server (its tensors or ranks on the dead member are gone)
  gate: converged   `kimik3 plan --detailed-exitcode` there exits 0
  gate: verify      `kimik3 verify` there (RPC: its `rpc` check, the model's layers on the worker's device)
  router: in        back in rotation, then until the router sends it traffic
A group that fails a gate stays out of the router (its server cannot serve without the member) and is named; the
caller keeps it as left out (`pending`), and the next pass gates it again even when its members look up by then (the
failed pass's apply relaunched them), so no failed or killed pass leaves a group out of the router for good.
The effects come through ports (`GroupRouter`, gather.HostShell); the decisions here are pure of I/O."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kimik3_reconciler.errors import Kimik3Error
from kimik3_reconciler.fleet.gather import HostAnswer, HostShell, gather
from kimik3_reconciler.fleet.groups import MemberState, member_states, spans
from kimik3_reconciler.fleet.values import Fleet, FleetHost
from kimik3_reconciler.model.plan import shown

# What a group passes before it is back in rotation: the rollout's gates, in the rollout's order.
GATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("apply", ("apply", "/dev/stdin")),
    ("converged", ("plan", "--detailed-exitcode", "/dev/stdin")),
    ("verify", ("verify", "/dev/stdin")),
)


class GroupRouter(Protocol):
    """The router, as recovery uses it: a main server out (no floor), and back in; each returns what it saw."""

    def take_out(self, host: FleetHost) -> str: ...

    def put_back(self, host: FleetHost) -> str: ...


@dataclass(frozen=True)
class Recovery:
    """One group's recovery: its dead members, and `failed` the gate it failed (None: back in rotation)."""

    host: str
    dead: tuple[MemberState, ...]
    failed: str | None
    message: str

    @property
    def ok(self) -> bool:
        return self.failed is None


def dead_groups(fleet: Fleet, answers: Sequence[HostAnswer]) -> dict[str, tuple[MemberState, ...]]:
    """Each group (main host name) with a dead member, and those members; a member whose state is unknown (its
    Docker or its main host did not answer) is no reason to act: nothing says it is gone."""
    dead = {}
    for answer in answers:
        host = fleet.host(answer.host)
        if not spans(host.profile) or not answer.ok:
            continue
        found = tuple(w for w in member_states(host, answer.document) if w.dead)
        if found:
            dead[host.name] = found
    return dead


def to_recover(
    fleet: Fleet, answers: Sequence[HostAnswer], pending: Collection[str]
) -> dict[str, tuple[MemberState, ...]]:
    """`dead_groups`, and each `pending` group (an earlier pass took it out and did not put it back: a gate failed,
    the router refused it, the pass was killed) whose main host answered, with no dead member of its own."""
    found = dead_groups(fleet, answers)
    for answer in answers:
        if answer.host in pending and answer.ok and answer.host not in found:
            found[answer.host] = ()
    return found


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return shown(lines[-1]) if lines else ""


def _converge(host: FleetHost, shell: HostShell, timeout_s: float, say: Callable[[str], None]) -> tuple[str, str]:
    """The gates on the main host: ("", "") when all passed, else (the gate, its last line of output)."""
    for gate, words in GATES:
        code, out, err = shell.run(host, (*host.kimik3_command, *words), host.profile_text, timeout_s)
        if code != 0:
            return gate, f"exit {code}: {_last_line(err) or _last_line(out)}"
        say(f"{host.name}: gate {gate} passed")
    return "", ""


def recover(
    fleet: Fleet,
    dead: Mapping[str, tuple[MemberState, ...]],
    router: GroupRouter,
    shell: HostShell,
    timeout_s: float,
    say: Callable[[str], None],
) -> tuple[Recovery, ...]:
    """Every dead group out of the router, then each re-converged and gated (all at once: they are separate hosts)
    and put back; a group failing a gate stays out."""
    hosts = [fleet.host(name) for name in dead]
    for host in hosts:
        why = "; ".join(w.text() for w in dead[host.name])
        kind = "worker" if host.profile.workers else "node"
        cause = f"{kind} dead ({why})" if why else "left out of the router by an earlier pass"
        say(f"{host.name}: {cause}: {router.take_out(host)}")

    def one(host: FleetHost) -> Recovery:
        gate, message = _converge(host, shell, timeout_s, say)
        if gate:
            return Recovery(
                host.name,
                dead[host.name],
                gate,
                f"{host.name} failed gate {gate} ({message}); left out of the router: its main server cannot "
                "serve without its members",
            )
        try:
            rotation = router.put_back(host)
        except Kimik3Error as exc:  # its server stopped answering after verify, or the router refused it
            return Recovery(host.name, dead[host.name], "router: in", f"{host.name}: recreated, not back in: {exc}")
        return Recovery(host.name, dead[host.name], None, f"{host.name}: recreated, {rotation}")

    return gather(hosts, one)
