"""`kimik3 verify`: check the profile's running llama-server end to end, one timed CheckResult per check.

Checks, in order: health, models, text, tool_call, vision (fork + mmproj only, else skipped),
two_turn (verify/checks.py). What the model says is judged only on real weights: the served
quant's first shard says whether it is one of kimik3's random-weights tiny models (model/weights.py),
and then the content checks report "not checkable (random weights)" instead of passing. When a check
fails because the server died, its log names the cause (observe/server_log.py: a CUDA out-of-memory on
the first request after an all-VRAM load names its fix). The API key is read at the last moment and
never reported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kimik3_reconciler.engines import ServingEngine, engine_for
from kimik3_reconciler.errors import InputError, PermanentError, StepError, VerifyFailed
from kimik3_reconciler.model.api_keys import api_keys
from kimik3_reconciler.model.facts import ContainerFact, Observed
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.records import verify_key
from kimik3_reconciler.model.weights import Weights
from kimik3_reconciler.observe.served_weights import served_weights
from kimik3_reconciler.observe.server_log import classify_load_failure
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.planning import render_desired
from kimik3_reconciler.planning.container_step import plan_container
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.statistic import write_statistic
from kimik3_reconciler.verify import checks
from kimik3_reconciler.verify.checks import MAINLINE_SKIP, WEATHER_TOOL, Server, Session, solid_png
from kimik3_reconciler.verify.report import NOT_CHECKABLE, CheckResult, Status, ToolCallCounts, VerifyReport
from kimik3_reconciler.verify.workers import check_workers

__all__ = [
    "MAINLINE_SKIP",
    "NOT_CHECKABLE",
    "WEATHER_TOOL",
    "CheckResult",
    "Status",
    "ToolCallCounts",
    "VerifyReport",
    "serving_endpoint",
    "solid_png",
    "verify",
]

CRASH_LOG_TAIL = 200  # a crash's lines sit behind the request's own log lines
RPC_LOG_TAIL = 100_000  # the load lines come first; verify's own requests follow them


def verification(orchestrator: Orchestrator, loaded: LoadedProfile) -> Callable[[], None]:
    """The check an apply runs after it changed something: verify, VerifyFailed naming the failures."""

    def check() -> None:
        report = verify(orchestrator, loaded)
        if not report.ok:
            raise VerifyFailed(report.failure_text())

    return check


def verify(orchestrator: Orchestrator, loaded: LoadedProfile) -> VerifyReport:
    """Run every check against the profile's running container; refuse when it is not serving."""
    observed = orchestrator.observe(loaded)
    server, chat = _serving(loaded, observed), orchestrator.ports.chat
    if chat is None:
        raise PermanentError("verify needs a chat port: none is wired into these ports")
    # rule: verify-random-weights
    # Only a file that says it is random excuses the content checks: unmarked or unreadable is a real model.
    engine = engine_for(loaded.profile.engine)  # the registry: what the engine's server answers (engines/base.py)
    weights = _weights(orchestrator.ports, observed, engine)
    report = VerifyReport(profile=loaded.profile.name, weights=weights)
    session = Session(chat, server, loaded.profile, weights.random, engine.reasoning_field, report.tool_calls)
    named: list[tuple[str, Callable[[], checks.Verdict]]] = [
        ("health", lambda: _health(orchestrator.ports, server, engine.readiness.path)),
        ("models", lambda: _models(session, loaded.profile.name)),
        ("text", lambda: checks.text(session)),
        ("tool_call", lambda: checks.tool_call(session)),
        ("vision", lambda: checks.vision(session)),
        ("two_turn", lambda: checks.two_turn(session)),
    ]
    if loaded.profile.workers:  # placement over RPC: the load log and the workers' sockets, not a request
        named.append(
            (
                "rpc",
                lambda: check_workers(
                    loaded.profile,
                    observed,
                    orchestrator.ports.docker.container_logs(loaded.profile.name, RPC_LOG_TAIL),
                ),
            )
        )
    clock, container = orchestrator.ports.clock, observed.container
    assert container is not None  # _serving refused otherwise
    for name, check in named:
        started = clock.monotonic()
        if report.crash:  # every later request would only meet a dead (or reloading) server
            report.checks.append(CheckResult(name, Status.FAILED, f"not run: the server crashed ({report.crash})", 0.0))
            continue
        try:
            status, detail = check()
        except StepError as exc:  # adapters translate SDK errors; one failed check does not stop the rest
            status, detail = Status.FAILED, str(exc)
        if status is Status.FAILED:  # rule: cuda-oom-first-request
            # A failed request may be a dead server: its log names the cause and the fix (a CUDA OOM on the
            # first request after an all-VRAM load needs more fit_target margin, not another try).
            report.crash = _crash(orchestrator.ports, container, engine)
            if report.crash:
                detail = f"the server crashed during this check: {report.crash} ({detail})"
        report.checks.append(CheckResult(name, status, detail, round(clock.monotonic() - started, 3)))
    # The exporter's verify series (issue 17): outcomes per check, tool-call parse failures and retries.
    # A statistic: a full state dir warns, it does not turn a passing verify into a failed apply (issue 30).
    write_statistic(
        orchestrator.ports.state,
        verify_key(loaded.profile.name),
        {**report.to_json(), "date": clock.now().isoformat(timespec="seconds")},
        orchestrator.reporter,
    )
    return report


def serving_endpoint(loaded: LoadedProfile, observed: Observed) -> Server:
    """Where the profile's current container answers, and its API key (bench and tune load it there)."""
    return _serving(loaded, observed)


def _serving(loaded: LoadedProfile, observed: Observed) -> Server:
    container = observed.container
    if container is None or not container.serving:
        state = "absent" if container is None else f"{container.state}, health {container.health}"
        raise PermanentError(f"{loaded.profile.name} is not serving ({state}); run `kimik3 apply` first")
    _require_current(loaded, observed)
    # The container's own launch inputs say where it listens (it may predate an edit of the profile).
    port = container.inputs.get("serve.port", loaded.profile.serve.port)
    base_url = f"http://{_probe(container.inputs)}:{port}"
    return Server(base_url, _sent_key(loaded, observed))


def _sent_key(loaded: LoadedProfile, observed: Observed) -> str | None:
    """The key verify, bench and tune send: the first the server holds (model/api_keys.py: a stripped line is not
    a key it holds). Read at the last moment, held only for the requests, never logged."""
    if not observed.inputs.api_key_file:
        return None
    try:
        keys: tuple[str, ...] | None = api_keys(Path(observed.inputs.api_key_file).read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        keys = None
    problem = observed.inputs.api_key_problem
    if keys == () or not problem:
        # No key in the file: the server started without one and answers anyone, so the checks run unauthenticated
        # (plan refuses to launch it again like this; destroy tears it down).
        return keys[0] if keys else None
    # A key no request can carry (a CR of a CRLF file, a space, non-UTF-8): the server refuses every client.
    raise InputError(f"serve.api_key_file: {loaded.profile.serve.api_key_file} {problem}", (("serve", "api_key_file"),))


def _require_current(loaded: LoadedProfile, observed: Observed) -> None:
    """The running container must be this profile's current launch: checks passing against another quant
    or image would vouch for a deployment the profile does not describe. The container planner decides,
    so verify and plan never disagree on "current"."""
    if observed.model.listing_error:  # no manifest here and the hub is down: the shard's name (part of the
        return  # launch) is unknown, so "current" cannot be judged; the checks still run
    (step,) = plan_container(render_desired(loaded.profile, observed), observed)
    if step.action in (Action.CREATE, Action.REPLACE):
        moved = "; ".join(str(d) for d in step.diff) or step.reason
        raise VerifyFailed(
            f"{loaded.profile.name}: the running container is not this profile's current deployment "
            f"({loaded.source}): {moved}; run `kimik3 apply {loaded.source}`"
        )


def _weights(ports: Ports, observed: Observed, engine: ServingEngine) -> Weights:
    """Real or random, from the shard the current container opens (_require_current made sure it is this one)."""
    if observed.model.listing_error:
        return Weights(
            False, f"the quant's files are not known ({observed.model.listing_error}): judged as a real model"
        )
    return served_weights(ports.hub, observed.model, engine.model_entry(observed.model), engine.weight_headers)


def _crash(ports: Ports, container: ContainerFact, engine: ServingEngine) -> str | None:
    """Why the server died (or restarted) since verify observed it, read from its log by the engine's signs; None
    while it still runs."""
    inspect = ports.docker.inspect_container(container.name)
    state = (inspect or {}).get("State") or {}
    restarted = (inspect or {}).get("RestartCount", 0) != container.restart_count or (
        container.started_at is not None and state.get("StartedAt") not in (None, container.started_at)
    )
    if inspect is not None and state.get("Status") == "running" and not restarted:
        return None
    logs = ports.docker.container_logs(container.name, CRASH_LOG_TAIL) if inspect is not None else ""
    cause = classify_load_failure(
        state.get("ExitCode"), bool(state.get("OOMKilled")), logs, engine.log_signs, while_serving=True
    )
    status = (
        "gone"
        if inspect is None
        else (
            "restarted by its restart policy" if restarted and state.get("Status") == "running" else state.get("Status")
        )
    )
    return f"container {container.name} {cause.headline} [{cause.cause}: {status}, exit code {state.get('ExitCode')}]"


def _probe(inputs: dict[str, object]) -> str:
    bind = str(inputs.get("host.bind", "127.0.0.1"))
    if bind in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{bind}]" if ":" in bind else bind


# --- the server checks (the chat ones are in verify/checks.py) ------------------------------


def _health(ports: Ports, server: Server, path: str) -> checks.Verdict:
    status = ports.http.health(f"{server.base_url}{path}")
    return (Status.OK if status == "ok" else Status.FAILED), f"{path}: {status}"


def _models(session: Session, name: str) -> checks.Verdict:
    entries = session.chat.models(session.server.base_url, session.server.api_key).get("data") or []
    # llama-server's --alias is the profile name; `id` is the smallest alias, so look at both.
    names = sorted({str(e.get("id")) for e in entries} | {str(a) for e in entries for a in e.get("aliases") or ()})
    if name in names:
        return Status.OK, f"serves {name!r}"
    return Status.FAILED, f"{name!r} is not among the served names {names}"
