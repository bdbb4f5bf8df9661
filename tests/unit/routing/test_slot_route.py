"""routing/slot_route.py's decisions (the policy of kimik3's router): a conversation goes back to the replica whose server said it reused it, a new
one to the least busy (a rejoined replica first), a replica out of rotation keeps what it held, and a reply that
reused nothing where a hit was expected voids what was believed of that replica."""

from __future__ import annotations

import pytest

from kimik3_reconciler.routing.slot_route import COLD, SlotRoute, prefix_keys

A, B, C = "http://a", "http://b", "http://c"
ALL = [A, B, C]


def conversation(agent: int, name: str, turns: int) -> list[dict]:
    """A request of `turns` turns: the agent's system prompt, the task, then a call and a result per turn."""
    out = [{"role": "system", "content": f"agent {agent}"}, {"role": "user", "content": f"task {name}"}]
    for turn in range(1, turns):
        out += [{"role": "assistant", "content": f"call {turn}"}, {"role": "user", "content": f"result {turn}"}]
    return out


def turn(route: SlotRoute, messages: list[dict], rotation: list[str], cached: int = 900, evaluated: int = 100) -> str:
    """One request routed and answered (by default a hit: 90 % of the prompt reused); where it went."""
    keys = prefix_keys(messages)
    ticket = route.pick(keys, rotation)
    route.answered(ticket, keys, cached, evaluated)
    return ticket.url


def test_each_request_shares_the_keys_of_the_turns_before_it():
    first, second = prefix_keys(conversation(0, "x", 1)), prefix_keys(conversation(0, "x", 2))
    assert second[: len(first)] == first and len(second) == len(first) + 2
    assert prefix_keys(conversation(0, "y", 1))[0] == first[0]  # the same agent's system prompt: the same key
    assert prefix_keys(conversation(0, "y", 1))[1] != first[1]


def test_a_conversation_goes_back_to_the_replica_that_answered_it():
    route = SlotRoute()
    homes = {name: turn(route, conversation(agent, name, 1), ALL) for agent, name in enumerate("xyz")}
    assert sorted(homes.values()) == ALL  # three agents' new conversations, idle replicas: one each
    for turns in (2, 3):
        for agent, (name, home) in enumerate(homes.items()):
            assert turn(route, conversation(agent, name, turns), ALL) == home


def test_a_replica_that_runs_slack_more_than_the_least_busy_loses_the_conversation():
    route = SlotRoute(slack=1)
    home = turn(route, conversation(0, "x", 1), ALL)
    route.running[home] = 2  # two requests running there, none elsewhere
    assert route.pick(prefix_keys(conversation(0, "x", 2)), ALL).url != home
    route.running = {home: 1}  # within the slack: it follows its prefix
    assert route.pick(prefix_keys(conversation(0, "x", 2)), ALL).url == home


def test_a_new_conversation_prefers_a_replica_holding_its_system_prompt_unless_another_is_much_less_busy():
    route = SlotRoute(slack=1)
    assert turn(route, conversation(7, "x", 1), [A]) == A  # A holds agent 7's system prompt
    assert route.pick(prefix_keys(conversation(7, "y", 1)), ALL).url == A  # all idle: A, it holds the prompt
    route.running = {A: 2}  # the pick above and one more running on A: 2 busier than B and C
    assert route.pick(prefix_keys(conversation(7, "z", 1)), ALL).url in (B, C)


def test_a_rejoined_idle_replica_takes_the_next_new_conversations():
    route = SlotRoute()
    assert turn(route, conversation(0, "old", 1), [C]) == C  # C served the agent before it left
    for name in "uvwx":
        turn(route, conversation(0, name, 1), [A, B])  # C out of rotation: A and B served these
    assert turn(route, conversation(0, "new", 1), ALL) == C  # back, idle, given a new conversation longest ago


def test_sequential_new_conversations_of_an_agent_stay_where_its_system_prompt_is():
    route = SlotRoute()
    assert {turn(route, conversation(0, name, 1), ALL) for name in "uvwx"} == {A}  # nothing else runs: no spill


def test_a_replica_out_of_rotation_keeps_what_it_held_and_gets_it_back():
    route = SlotRoute()
    homes = {name: turn(route, conversation(agent, name, 1), ALL) for agent, name in enumerate("xyz")}
    away = homes["z"]
    rest = [u for u in ALL if u != away]
    moved = turn(route, conversation(2, "z", 2), rest)  # z's turn while its replica is out: elsewhere
    assert moved != away
    assert turn(route, conversation(2, "z", 3), ALL) == moved  # its latest turn is there now: it stays
    back = SlotRoute()
    homes = {name: turn(back, conversation(agent, name, 1), ALL) for agent, name in enumerate("xyz")}
    turn(back, conversation(0, "x", 2), [u for u in ALL if u != homes["z"]])  # others' turns while z's is out
    assert turn(back, conversation(2, "z", 2), ALL) == homes["z"]  # no turn while out: back to what it holds


def test_a_miss_where_a_hit_was_expected_voids_what_that_replica_was_thought_to_hold():
    route = SlotRoute()
    homes = {name: turn(route, conversation(0, name, 1), [A]) for name in "xy"}
    assert set(homes.values()) == {A}
    # x's next turn on A reused nothing: A restarted cold; y's entry (learned before) is void too
    assert turn(route, conversation(0, "x", 2), ALL, cached=0, evaluated=1000) == A
    assert route.cold_since[A] > 0 and route.voids == 1
    assert route.holders() == {A: 1}  # only what A answered since: x's turn 2
    assert turn(route, conversation(0, "x", 3), ALL) == A  # x's new entry (the miss re-filled A) is kept
    assert turn(route, conversation(0, "y", 2), [B, C]) in (B, C)


def test_a_miss_on_a_replica_not_thought_to_hold_the_prompt_says_nothing():
    route = SlotRoute()
    assert turn(route, conversation(0, "x", 1), [A]) == A
    assert turn(route, conversation(1, "new", 1), [B], cached=0, evaluated=1000) == B  # a new agent: a cold start
    assert B not in route.cold_since and route.holders() == {A: 1, B: 1}


def test_the_cold_bound_is_a_fraction_of_the_prompt():
    route = SlotRoute()
    turn(route, conversation(0, "x", 1), [A])
    below = int(COLD * 1000) - 1
    turn(route, conversation(0, "x", 2), [A], cached=below, evaluated=1000 - below)
    assert A in route.cold_since
    other = SlotRoute()
    turn(other, conversation(0, "x", 1), [A])
    turn(other, conversation(0, "x", 2), [A], cached=300, evaluated=700)  # the system prompt's part: not cold
    assert A not in other.cold_since


def test_a_failed_request_learns_nothing_and_ends_its_count():
    route = SlotRoute()
    keys = prefix_keys(conversation(0, "x", 1))
    ticket = route.pick(keys, [A])
    assert route.running[A] == 1
    route.answered(ticket, keys, None, None)
    assert route.running[A] == 0 and route.holders() == {}


def test_no_replica_in_rotation_is_refused():
    with pytest.raises(ValueError, match="no replica in rotation"):
        SlotRoute().pick(prefix_keys(conversation(0, "x", 1)), [])


def test_only_the_reply_that_voided_says_so():
    route = SlotRoute()
    for name in "xy":
        turn(route, conversation(0, name, 1), [A])
    keys = {name: prefix_keys(conversation(0, name, 2)) for name in "xy"}
    tickets = {name: route.pick(keys[name], [A]) for name in "xy"}  # both expected at A, both running at once
    assert route.answered(tickets["x"], keys["x"], 0, 1000) is True  # x's reply reused nothing: A's entries void
    assert route.answered(tickets["y"], keys["y"], 900, 100) is False  # y's, ending after it, reused its prefix
    assert route.voids == 1
