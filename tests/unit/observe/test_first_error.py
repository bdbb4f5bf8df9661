"""A failed server's first error (observe/server_log.py first_error, engines/base.py LogSigns.root): vLLM's root
cause is printed a traceback or two before the last lines an apply's error shows (the cluster test's head: "ValueError:
current platform cpu does not support ray." then the API server's "Engine core initialization failed")."""

from __future__ import annotations

import pytest
from support.fakes.state import FakeClock

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import LoadFailed
from kimik3_reconciler.model.specs import HealthWait, MemberWait
from kimik3_reconciler.observe.server_log import first_error
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.cluster import wait_for_members
from kimik3_reconciler.steps.health import _fail_launch
from kimik3_reconciler.steps.report import NullReporter

ROOT = "ValueError: current platform cpu does not support ray."
# The shape of vLLM 0.32's failed start: the engine core logs its exception, prints its traceback, then the API
# server's own traceback ends the log (abridged; the real one has ~60 lines of frames between).
VLLM_LOG = "\n".join(
    [
        "(APIServer pid=1) INFO 12-05 13:02:11 [api_server.py:1885] vLLM API server version 0.32.0",
        "(APIServer pid=1) WARNING 12-05 13:02:12 [config.py:90] Possibly too large swap space: ValueError: nothing",
        "(EngineCore_DP0 pid=240) INFO 12-05 13:02:30 [ray_utils.py:345] Connecting to existing Ray cluster",
        "(EngineCore_DP0 pid=240) ERROR 12-05 13:02:40 [core.py:843] EngineCore failed to start.",
        "(EngineCore_DP0 pid=240) ERROR 12-05 13:02:40 [core.py:843] Traceback (most recent call last):",
        '(EngineCore_DP0 pid=240) ERROR 12-05 13:02:40 [core.py:843]   File "/vllm/ray_utils.py", line 574',
        f"(EngineCore_DP0 pid=240) ERROR 12-05 13:02:40 [core.py:843] {ROOT}",
        "(EngineCore_DP0 pid=240) Process EngineCore_DP0:",
        "(EngineCore_DP0 pid=240) Traceback (most recent call last):",
        f"(EngineCore_DP0 pid=240) {ROOT}",
        "(APIServer pid=1) Traceback (most recent call last):",
        *[f'(APIServer pid=1)   File "/vllm/frame{i}.py", line {i}, in f' for i in range(40)],
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}",
    ]
)


def test_vllms_first_error_is_the_engine_cores_not_the_api_servers_last_line() -> None:
    found = first_error(VLLM_LOG, engine_for("vllm").log_signs)
    assert found is not None and found.endswith(ROOT) and found.startswith("(EngineCore_DP0 pid=240) ERROR")
    assert first_error(f"ValueError: {'x' * 2000}", engine_for("vllm").log_signs) == f"ValueError: {'x' * 288}"


def test_a_log_without_an_exception_line_or_an_engine_without_the_sign_has_none() -> None:
    assert (
        first_error("(APIServer pid=1) INFO 12-05 13:02:11 [a.py:1] started\nKilled", engine_for("vllm").log_signs)
        is None
    )
    assert first_error(VLLM_LOG, engine_for("llamacpp").log_signs) is None  # llama-server: its own signs


class ExitedHead:
    """The head's Docker after its server failed: `tail` honoured as dockerd does."""

    def inspect_container(self, name: str) -> dict:
        return {"State": {"Status": "exited"}}

    def container_logs(self, name: str, tail: int) -> str:
        return "\n".join(VLLM_LOG.splitlines()[-tail:])


def test_a_head_that_exits_while_its_nodes_join_names_vllms_first_error() -> None:
    ports = Ports(docker=ExitedHead(), hub=None, http=None, host=None, state=None, clock=FakeClock())  # type: ignore[arg-type]
    with pytest.raises(LoadFailed) as ended:
        wait_for_members(MemberWait("k3", ("10.0.0.2",), 300.0), ports, NullReporter())
    headline = str(ended.value).splitlines()[0]
    assert headline.startswith("the head's container k3 is exited while its nodes join Ray; its log's first error:")
    assert headline.endswith(ROOT)
    assert ROOT not in ended.value.log_tail  # the last 40 lines alone: the API server's traceback


class FailedServer(ExitedHead):
    """A vLLM server's container that exited while loading: stopped by the failed launch's handling."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def stop_container(self, name: str) -> None:
        self.stopped.append(name)


def test_a_failed_vllm_launch_names_its_first_error_beside_the_cause() -> None:
    docker = FailedServer()
    ports = Ports(docker=docker, hub=None, http=None, host=None, state=None, clock=FakeClock())  # type: ignore[arg-type]
    wait = HealthWait("k3", "http://127.0.0.1:8000/health", 900.0, engine="vllm")
    with pytest.raises(LoadFailed) as failed:
        _fail_launch(wait, {"State": {"Status": "exited", "ExitCode": 1}}, ports, NullReporter())
    headline = str(failed.value).splitlines()[0]
    assert headline.startswith("container k3 exited while loading the model [other: exited, exit code 1, stopped]")
    assert headline.endswith(
        f"; its log's first error: (EngineCore_DP0 pid=240) ERROR 12-05 13:02:40 [core.py:843] {ROOT}"
    )
    assert docker.stopped == ["k3"]
