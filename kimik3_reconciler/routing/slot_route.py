"""The `slots` routing policy of kimik3's router (issue 40: the fleet file's `router.policy: slots`, the default where
the router runs on the controller; adapters/slot_router.py sends the requests): routing from the servers' own word
on their caches, measured by bench/fleet_cache.py and bench/fleet_cache_rollout.py against smg's cache_aware
(docs/operations.md, "Prefix-cache routing").

smg's cache-aware policy routes an HTTP worker by a tree of the prompts it sent where: a guess at what each server
holds, purged when the worker leaves the router (a rolled host comes back holding nothing in smg's eyes, even when
the warm rollout restored its slots). This policy learns instead from what each server says it reused: every
llama-server reply carries `timings.cache_n` (prompt tokens taken from its cache) and `timings.prompt_n` (tokens it
had to evaluate). A conversation's prompt, once answered by a replica, is held there (its slot, then its
`--cache-ram` prompt cache); its next turn goes back there. The server's answer to that next turn confirms it (a
high cache_n) or refutes it:

- a reply that reused (almost) nothing, not even the agent's system prompt, says the server holds nothing it was
  thought to hold (restarted cold, or evicted): every entry for that replica made before that request is dropped;
- a replica that leaves the rotation keeps its entries (unlike smg's tree): its server may come back holding them
  (slots restored by the warm rollout); the first replies say which.

Load: a conversation follows its entry unless that replica runs `slack` more requests than the least busy one in
rotation; a new (or displaced) conversation goes to the least busy replica among those that answered its agent's
system prompt, unless another runs `slack` fewer, and ties go to the replica given a new conversation longest ago
(so a rejoined, idle replica takes new conversations at once).

Pure (no I/O): the router sends the requests and calls `pick` and `answered`; `decisions` counts why each pick
went where it went (followed / new / displaced) and `voids` what replies voided (its metrics).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

COLD = 0.05  # a reply that reused under this fraction of its prompt: the server held nothing of it
# Conversation prefixes remembered (the oldest forgotten first): a router runs for months, and a replica's own cache
# holds far fewer prompts than this, so an entry forgotten here was long evicted there. At the bound (tracemalloc,
# 8 replicas): 54 MiB where conversations share their first message (an agent's system prompt), 120 MiB where each
# has its own (`systems` then holds as many entries, each with its replica dict).
MAX_HELD = 200_000
DECISIONS = ("followed", "new", "displaced")  # why a request went where it went (Ticket.decision)


def prefix_keys(messages: list[dict]) -> list[str]:
    """One key per prefix of the conversation (messages[:1], messages[:2], ...): a digest of the messages so far."""
    digest = hashlib.sha256()
    keys = []
    for message in messages:
        digest.update(json.dumps(message, sort_keys=True).encode())
        keys.append(digest.copy().hexdigest()[:24])
    return keys


@dataclass(frozen=True)
class Holder:
    url: str
    seq: int  # when it was learned (the policy's request sequence)


@dataclass(frozen=True)
class Ticket:
    """A request routed: where, its sequence number, and whether it went there because the replica was believed to
    hold part of its prompt (only such a request's miss says the replica lost what it held)."""

    url: str
    seq: int
    expected: bool
    decision: str = "new"  # followed: to the replica holding its conversation; new: none held it; displaced: the
    # replica holding it was `slack` busier than the least busy one, or out of rotation


@dataclass
class SlotRoute:
    """The policy's state: which replica the servers confirmed holds each conversation prefix."""

    slack: int = 2
    held: OrderedDict[str, Holder] = field(default_factory=OrderedDict)  # prefix key -> the replica that answered it
    max_held: int = MAX_HELD
    systems: OrderedDict[str, dict[str, int]] = field(default_factory=OrderedDict)  # system key -> {replica: seq}
    cold_since: dict[str, int] = field(default_factory=dict)  # replica -> the seq before which its entries are void
    running: dict[str, int] = field(default_factory=dict)  # replica -> requests sent and not yet answered
    last_new: dict[str, int] = field(default_factory=dict)  # replica -> seq it was last given a new conversation
    seq: int = 0
    voids: int = 0  # replies that voided what a replica was believed to hold (for the report)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _valid(self, holder: Holder | None) -> bool:
        return holder is not None and holder.seq >= self.cold_since.get(holder.url, 0)

    def pick(self, keys: list[str], rotation: list[str]) -> Ticket:
        """Where a request whose prefixes are `keys` goes, among `rotation` (never empty); give the ticket back to
        `answered`. Counts the request as running there."""
        if not rotation:
            raise ValueError("no replica in rotation")
        with self._lock:
            self.seq += 1
            load = {url: self.running.get(url, 0) for url in rotation}
            least = min(load.values())
            url, known = self._follow(keys[1:], load, least)
            expected = url is not None
            decision = "followed" if expected else "displaced" if known else "new"
            if url is None:
                url = self._place(keys[0], load, least)
                expected = self._holds_system(keys[0], url)
            self.running[url] = self.running.get(url, 0) + 1
            return Ticket(url, self.seq, expected, decision)

    def _follow(self, keys: list[str], load: dict[str, int], least: int) -> tuple[str | None, bool]:
        """The replica holding the longest prefix of this conversation (past its system prompt), if in rotation and
        not `slack` busier than the least busy; and whether any replica was believed to hold some of it."""
        known = False
        for key in reversed(keys):
            holder = self.held.get(key)
            if not self._valid(holder):
                continue
            known = True
            if holder.url in load:  # type: ignore[union-attr]
                url = holder.url if load[holder.url] <= least + self.slack else None  # type: ignore[union-attr]
                return url, known
        return None, known

    def _holds_system(self, system: str, url: str) -> bool:
        return self.systems.get(system, {}).get(url, -1) >= self.cold_since.get(url, 0)

    def _place(self, system: str, load: dict[str, int], least: int) -> str:
        """A new or displaced conversation: a replica that holds its system prompt unless another is `slack` less
        busy; among equals, the one given a new conversation longest ago."""
        near = [u for u in load if self._holds_system(system, u) and load[u] <= least + self.slack] or list(load)
        low = min(load[u] for u in near)
        url = min((u for u in near if load[u] == low), key=lambda u: (self.last_new.get(u, 0), u))
        self.last_new[url] = self.seq
        return url

    def answered(self, ticket: Ticket, keys: list[str], cached: int | None, evaluated: int | None) -> bool:
        """The reply to the request of `ticket` (prefixes `keys`) ended: `cached`/`evaluated` are its
        `timings.cache_n`/`prompt_n` (None: no timings, a failed request: nothing learned). True when this reply
        voided what its replica was believed to hold (the caller's count: `voids` moves under other requests too)."""
        url, seq = ticket.url, ticket.seq
        voided = False
        with self._lock:
            self.running[url] = max(0, self.running.get(url, 0) - 1)
            if cached is None or evaluated is None:
                return False
            # Sent there for what it held, and it reused nothing, not even the system prompt: a server restarted
            # cold or one that evicted it; whatever was learned of it before this request is void. (A miss on a
            # request placed anywhere says nothing: that replica was not thought to hold it.)
            if ticket.expected and cached < COLD * (cached + evaluated):
                self.cold_since[url] = max(self.cold_since.get(url, 0), seq)
                self.voids += 1
                voided = True
            self.held[keys[-1]] = Holder(url, seq)
            self.held.move_to_end(keys[-1])
            while len(self.held) > self.max_held:
                self.held.popitem(last=False)
            self.systems.setdefault(keys[0], {})[url] = seq
            self.systems.move_to_end(keys[0])
            while len(self.systems) > self.max_held:  # a client whose first message is unique per conversation
                self.systems.popitem(last=False)
        return voided

    def holders(self) -> dict[str, int]:
        """How many conversation prefixes each replica is believed to hold (valid entries only): for the report."""
        with self._lock:
            out: dict[str, int] = {}
            for holder in self.held.values():
                if self._valid(holder):
                    out[holder.url] = out.get(holder.url, 0) + 1
            return out
