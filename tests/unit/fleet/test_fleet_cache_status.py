"""`fleet status` shows each host's prefix-cache hits from its server's own counters, and the fleet's: the hosts'
tokens added (not their rates averaged), in the table and in --json."""

from __future__ import annotations

from pathlib import Path

import yaml

from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.engines.base import PrefixCacheTokens
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.gather import HostAnswer
from kimik3_reconciler.fleet.report import fleet_prefix_cache, status_lines, status_row
from kimik3_reconciler.fleet.server_load import read_server

CASES = Path(__file__).parents[2] / "cases" / "fleet"
DEMO = Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml"
METRICS = "llamacpp:prompt_tokens_total {evaluated}\nllamacpp:prompt_tokens_cached_total {cached}\n" + (
    "llamacpp:requests_processing 2\n"
)


def _fleet(tmp_path: Path):  # noqa: ANN202 - fleet.Fleet of hosts a, b, c
    (tmp_path / "demo-cpu.yaml").write_text(DEMO.read_text())
    text = yaml.safe_load((CASES / "ok_rpc_groups.yaml").read_text())["fleet"]
    (tmp_path / "fleet.yaml").write_text(text)
    return parse_fleet(text, str(tmp_path / "fleet.yaml"), read_text)


def test_each_host_and_the_fleet_show_the_servers_hit_tokens(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    served = {"a": (900, 100), "c": (100, 900)}  # cached, evaluated

    def get(host: str):  # noqa: ANN202 - the /metrics of that host's server
        return lambda url: (200, METRICS.format(cached=served[host][0], evaluated=served[host][1]))

    readings = {h: read_server(fleet.host(h), get(h)) for h in served}
    assert readings["a"].in_flight == 2 and readings["a"].prefix_cache == PrefixCacheTokens(900, 1000)
    answer = {"container": {"state": "running"}, "workers": []}
    rows = [
        status_row(fleet, HostAnswer(h, answer, version="1"), {}, readings[h].in_flight, readings[h].prefix_cache)
        for h in served
    ]
    assert rows[0]["prefix_cache"] == {"hit_tokens": 900, "prompt_tokens": 1000, "hit_rate": 0.9}
    # the fleet's share is tokens over tokens: 1000 of 2000, not the mean of 90 % and 10 %
    assert fleet_prefix_cache(rows) == {"hit_tokens": 1000, "prompt_tokens": 2000, "hit_rate": 0.5}
    lines = status_lines(rows)
    assert "cache_hits" in lines[0].split()
    assert "90% of 1.0k" in lines[1] and "10% of 1.0k" in lines[2]
    assert lines[-1].startswith("fleet: 50% of 2.0k prompt tokens from the servers' prefix caches")


def test_a_server_without_an_answer_or_the_counter_shows_a_dash(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    assert read_server(fleet.host("a"), lambda url: (503, "")) is None
    without = read_server(fleet.host("a"), lambda url: (200, "llamacpp:requests_processing 0\n"))
    assert without is not None and without.prefix_cache is None
    row = status_row(fleet, HostAnswer("a", {"container": {"state": "running"}}, version="1"), {}, 0, None)
    assert row["prefix_cache"] is None and fleet_prefix_cache([row]) is None
    assert not any(line.startswith("fleet:") for line in status_lines([row]))
