"""Issue 40 item 2 against the real llama-server (b11434, the demo's CPU image), through kimik3's own steps: a server
launched with serve.slot_save keeps a conversation's slot through a container swap (the fleet's warm step: saved
after the drain, restored before the host rejoins), so the conversation's next turn is answered from the cache;
an unwarmed server after the same swap prefills it all. The server holds an API key (serve.api_key_file), as a
fleet's servers do: every warm request must carry it (llama-server answers 401 on /slots, /props and chat
without it)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realparts import (
    chat_turn,
    demo_hub,
    demo_profile,
    destroyed_after,
    kimik3,
    remove_leftovers,
    write_profile,
)

from kimik3_reconciler.cli.fleet_warm import save_before_swap, warm_after_swap
from kimik3_reconciler.fleet.warm import warm_record
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import slots_volume

pytestmark = pytest.mark.docker

NAME, PORT = "k3warm-i40", 19241
URL = f"http://127.0.0.1:{PORT}"
KEY = "k3-warm-key-0123456789"
SYSTEM = "You are the build agent of a large repository. " + " ".join(
    f"Rule {i}: keep change {i} small, tested and described." for i in range(40)
)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("kimik3-warm")
    remove_leftovers(NAME)
    subprocess.run(["docker", "volume", "rm", "-f", slots_volume(NAME)], capture_output=True)
    with demo_hub() as hub:
        profile = demo_profile(work, NAME, PORT, hub.url)
        (work / "api-key").write_text(f"{KEY}\n")
        profile["serve"].update(slot_save=True, parallel=1, ctx_size=4096, api_key_file=str(work / "api-key"))
        write_profile(work, profile)
        try:
            with destroyed_after(work, NAME):
                yield work
        finally:  # after the container that mounts it is gone
            subprocess.run(["docker", "volume", "rm", "-f", slots_volume(NAME)], capture_output=True)


def _swap(work: Path, generation: int):  # noqa: ANN202 - Profile
    """A change that keeps model and context (an env var) rolled by `kimik3 apply`: the container is replaced."""
    import yaml

    profile = yaml.safe_load((work / "profile.yaml").read_text())
    profile["serve"]["env"] = {"K3_WARM_GENERATION": str(generation)}
    path = write_profile(work, profile)
    out = kimik3(work, "apply", "profile.yaml", "--no-verify-server")
    assert "removed" in out.stdout + out.stderr or generation == 0, out.stdout
    return parse_profile(path.read_text(), str(path)).profile


def _turn(messages: list[dict]) -> dict:
    return chat_turn(URL, NAME, messages, api_key=KEY)


def _rolled(work: Path, profile) -> Path:  # noqa: ANN001 - Profile
    """The rollout record's path, with the host's warm record as after a rollout that rolled it (what its server
    runs)."""
    record = work / "state" / "fleet" / "f" / "rollout.json"
    (record.parent / "warm").mkdir(mode=0o700, parents=True, exist_ok=True)
    (record.parent / "warm" / "h.json").write_text(json.dumps(warm_record(profile)))
    return record


def test_a_restored_slot_answers_the_next_turn_from_its_cache(work: Path) -> None:
    profile = _swap(work, 0)
    record = _rolled(work, profile)
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Plan the first change."}]
    one = _turn(first)
    following = [
        *first,
        {"role": "assistant", "content": one["choices"][0]["message"].get("content") or "ok"},
        {"role": "user", "content": "Now the second."},
    ]

    said = save_before_swap(record, "h", URL, profile, 0)
    assert "saved 1 slot(s)" in said, said
    profile = _swap(work, 1)
    done = warm_after_swap(record, "h", URL, profile, ())
    assert done["how"] == "restore" and done["slots"] == 1 and not done["failed"], done
    warm = _turn(following)["timings"]

    # The same swap without the warm step: the next turn is prefilled from its first token.
    profile = _swap(work, 2)
    cold = _turn(following)["timings"]
    print(
        f"\nnext turn after a swap: warm cache_n={warm['cache_n']} prompt_n={warm['prompt_n']}; "
        f"cold cache_n={cold['cache_n']} prompt_n={cold['prompt_n']}; restored {done['tokens']} tokens"
    )
    assert cold["cache_n"] == 0
    assert warm["cache_n"] >= one["usage"]["prompt_tokens"] - 1  # all of turn one's prompt, at most its last token
    assert warm["prompt_n"] < cold["prompt_n"] / 4


def test_the_declared_prompts_are_prefilled_behind_the_key(work: Path) -> None:
    import httpx

    profile = _swap(work, 0)  # generation 0: this test may run first (random order), then it creates the server
    assert httpx.get(f"{URL}/slots", timeout=30).status_code == 401  # the server does refuse a request without it
    record = _rolled(work, profile)
    hot = [{"role": "system", "content": SYSTEM.replace("build agent", "review agent")}]
    done = warm_after_swap(record, "h", URL, profile, ({"messages": hot},))
    assert done["how"] == "prefill" and done["prompts"] == 1 and not done["failed"], done
    assert KEY not in (record.parent / "warm" / "h.json").read_text()
    # The server took the prompt: its slot holds it (asked with the key), nothing generated after it.
    slots = httpx.get(f"{URL}/slots", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    shared = max(int(s.get("n_prompt_tokens") or 0) for s in slots)
    assert shared > 1000, slots
    # A conversation's first turn with that system prompt finds all of it cached: the slot holds exactly the prefix
    # (after a chat prefill, a recurrent state that a diverging turn could not cut back to it: 1,651 of 2,156 here).
    turn = _turn([*hot, {"role": "user", "content": "Review the first change."}])["timings"]
    print(f"\nfirst turn after the prefill: cache_n={turn['cache_n']} prompt_n={turn['prompt_n']}; prefilled {shared}")
    assert turn["cache_n"] >= shared - 1, (turn, shared)


def test_the_router_steps_read_the_server_behind_the_key(work: Path) -> None:
    """The drain's count of the server's requests and the traffic check after `router: in` read its /metrics, which
    llama-server refuses without the key: unread, the drain would not wait for the requests the router sent there."""
    from kimik3_reconciler.cli.fleet_apply import MetricsRefused, _served_tokens, server_in_flight, server_key
    from kimik3_reconciler.engines import engine_for

    profile = _swap(work, 0)
    key = server_key(profile, "h")
    series = engine_for(profile.engine).series
    gauges = (series.running, series.waiting)
    with pytest.raises(MetricsRefused):  # refused without the key: the drain would wait its whole timeout
        server_in_flight(URL, gauges)()
    assert server_in_flight(URL, gauges, key)() == 0
    before = _served_tokens(URL, key)
    assert before is not None and _served_tokens(URL, None) is None
    _turn([{"role": "user", "content": "Say something."}])
    assert _served_tokens(URL, key) > before
