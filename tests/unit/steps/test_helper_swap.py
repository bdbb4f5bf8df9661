"""Replacing a helper that owns the public port (issue 38 item 2): the exporter with `metrics.proxy` (no front) and
the front hand their listening sockets to their replacement, so a kimik3 upgrade (or any replacement) refuses no
client; a helper an older kimik3 started cannot, and the plan says what its clients will see.

The swap runs as an apply runs it (steps/exporter.py, steps/front.py, the real process adapter and the real
`metrics-serve` / `front-serve` processes) under a closed-loop client (tests/support/closed_loop.py, keep-alive
connections, half streaming) through the public port, in front of a llama-server look-alike. Before this change
every replacement stopped the old helper first: bench/helper_swap.py measures both ways in one run
(`hand_over=False` is that path; about a third of the requests during the swap were refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.fakes import FAKE_REVISION, FakeHub, fake_ports
from support.fakes.processes import FakeProcesses
from support.helper_swap import swap_under_load
from support.payloads import exporter_config
from test_plan_cases import build_case

from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.records import exporter_config_key, exporter_key
from kimik3_reconciler.model.specs import ExporterRun
from kimik3_reconciler.planning import plan
from kimik3_reconciler.steps.exporter import run_exporter
from kimik3_reconciler.steps.report import NullReporter

CASES = Path(__file__).resolve().parents[2] / "cases" / "plan"


@pytest.mark.parametrize("helper", ["exporter", "front"])
def test_a_helper_that_hands_over_is_replaced_without_refusing_a_client(tmp_path: Path, helper: str) -> None:
    result = swap_under_load(tmp_path, helper, hand_over=True)
    assert result.overlapping >= 4, result  # requests ran while it was replaced (the loop was not idle)
    assert result.refused == 0 and result.failed == 0, result.errors
    assert result.old_gone  # the old process exited (on its own, once its clients had moved over)


def _step(case: str, kind: str, fact: str, **update: object):  # noqa: ANN202
    desired, observed = build_case(yaml.safe_load((CASES / case).read_text()))
    running = getattr(observed, fact)
    observed = observed.model_copy(update={fact: running.model_copy(update=update)})
    return next(s for s in plan(desired, observed).steps if s.kind == kind and s.action is Action.REPLACE)


@pytest.mark.parametrize("hands_over", [True, False])
def test_the_plan_says_what_the_exporters_clients_see_while_it_is_replaced(hands_over: bool) -> None:
    step = _step("81-metrics-exporter-fingerprint-moved.yaml", "metrics", "exporter", hands_over_sockets=hands_over)
    assert step.spec.hand_over is hands_over
    if hands_over:
        assert step.cost.startswith("metrics.port stay open: the new process takes the listening sockets")
    else:
        assert step.cost == (
            "metrics.port refuse connections for about a second (the running process predates the "
            "socket handover: stopped, then its replacement started)"
        )


@pytest.mark.parametrize("hands_over", [True, False])
def test_the_plan_says_what_the_fronts_clients_see_while_it_is_replaced(hands_over: bool) -> None:
    step = _step(
        "190-handover-knob-change.yaml", "front", "front", fingerprint="0123456789abcdef", hands_over_sockets=hands_over
    )
    assert step.spec.hand_over is hands_over and "the public port http://" in step.cost
    assert ("stay open" in step.cost) is hands_over and ("predates the socket handover" in step.cost) is not hands_over


class ProcessesWithoutOffer(FakeProcesses):
    """The old exporter offers nothing (say it hangs): the replacement's first start fails (it cannot bind), the
    next one, after the old one was stopped, answers."""

    def spawn(self, args: tuple[str, ...], log_key: str, reads: tuple[str, ...]) -> int:
        self.answer = len(self.spawned) > 0
        self.spawned.append(self.next_pid + 1)
        self.next_pid += 1
        self.running[self.next_pid] = ("python", "-m", "kimik3_reconciler", *args)
        config = ExporterConfig.from_json(self.state.read(exporter_config_key(args[1])) or {})
        self.http.pages.pop(config.health_url, None)
        if self.answer:
            self.http.pages[config.health_url] = (200, json.dumps({"fingerprint": config.fingerprint}))
        return self.next_pid


def test_a_handover_that_does_not_happen_falls_back_to_stop_then_start(tmp_path: Path) -> None:
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, {}, tmp_path / "hub"))
    processes = ProcessesWithoutOffer(ports.state, ports.http)
    processes.spawned = []
    ports.processes = processes
    processes.running[4000] = ("python", "-m", "kimik3_reconciler", "metrics-serve", "k3")
    config = exporter_config(port=9400, server_url="http://127.0.0.1:18999", proxy_bind="127.0.0.1", proxy_port=8080)
    events = RecordingReporter()
    run_exporter(
        ExporterRun(
            profile="k3",
            config=config.to_json(),
            fingerprint=config.fingerprint,
            health_url=config.health_url,
            replace_pid=4000,
            hand_over=True,
        ),
        ports,
        events,
    )
    assert 4000 not in processes.running and processes.spawned == [4001, 4002] and 4002 in processes.running
    warning = next(fields for name, fields in events.events if name == "warning")
    assert warning["handed_over"] is False and "stopped, then started" in warning["consequence"]
    assert ports.state.read(exporter_key("k3"))["pid"] == 4002


class RecordingReporter(NullReporter):
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def event(self, name: str, **fields: object) -> None:
        self.events.append((name, fields))
