"""`kimik3 bench`: a closed-loop concurrency sweep against the profile's converged server.

It refuses a host that is not converged (NotConverged names the plan's changes: a measurement of
something the profile does not describe is worse than none). Prompts are token ids of exact length
from the server's own `/tokenize`; each level's client figures are cross-checked in the same run
against the server's per-request `timings` and the `/metrics` counters (model/bench.py), and the run
is kept in state under the container's fingerprint (benchmark/store.py).
"""

from __future__ import annotations

from collections.abc import Callable

from kimik3_reconciler.engines import ServerSeries, engine_for
from kimik3_reconciler.errors import NotConverged, PermanentError
from kimik3_reconciler.model.bench import BenchRun, BenchSettings, LevelResult, RequestSample, summarise
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.ports import LoadLevel, LoadPort
from kimik3_reconciler.verify import serving_endpoint
from kimik3_reconciler.verify.checks import Server

__all__ = ["converged_deployment", "exact_prompts", "parse_metrics", "run_sweep", "sweep_levels"]

# Text the prompts are cut from: the server's tokenizer turns it into ids; it is repeated to any length.
_PROSE = (
    "The reconciler observes the host, plans the changes the profile asks for, applies them in order and "
    "observes again until nothing is left to change. Weights are read once; experts that do not fit the "
    "GPUs stay in system memory and are copied for each prompt. "
)


def converged_deployment(orchestrator: Orchestrator, loaded: LoadedProfile) -> Observed:
    """The observed host, when it is converged to the profile; else NotConverged naming the plan's changes."""
    current = orchestrator.plan(loaded)
    if not current.converged:
        pending = tuple(f"{s.kind} {s.action.name.lower()} {s.target}: {s.reason}" for s in current.changes)
        raise NotConverged(
            f"{loaded.profile.name} is not converged, so a benchmark would measure something the "
            f"profile does not describe; run `kimik3 apply {loaded.source}` first. The plan's "
            "changes:\n  - " + "\n  - ".join(pending),
            pending,
        )
    observed = orchestrator.observe(loaded)
    if observed.container is None or observed.container.fingerprint is None:
        raise PermanentError(f"{loaded.profile.name}: no container fingerprint to keep the results under")
    return observed


def exact_prompts(
    load: LoadPort, server: Server, count: int, length: int, salt: int = 0, wire: str = "native"
) -> list[list[int]]:
    """`count` prompts of exactly `length` token ids, each starting at a different place in the text (no
    shared prefix, so no request is a prompt-cache hit of another even where the cache is on)."""
    pool = load.tokenize(server.base_url, server.api_key, _PROSE, wire)
    if not pool:
        raise PermanentError(f"{server.base_url}/tokenize returned no tokens")
    prompts = []
    for i in range(count):
        start = (salt * 7919 + i * 131) % len(pool)
        prompts.append([pool[(start + j) % len(pool)] for j in range(length)])
    return prompts


def parse_metrics(text: str | None, prefix: str) -> dict[str, float]:
    """Prometheus text → {sample name: value} for the server's own series (`prefix`: the engine's, llama-server
    `llamacpp:`, vLLM `vllm:`), each summed over its labels: vLLM labels every sample (engine, model_name), so
    `vllm:generation_tokens_total` is the sum over its engines; llama-server's are unlabelled. Line by line: a line
    that does not parse is skipped, not the whole reading (the level's cross-check needs one counter)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for line in (text or "").splitlines():
        if not line.startswith(prefix):
            continue
        try:
            samples = [s for family in text_string_to_metric_families(line + "\n") for s in family.samples]
        except ValueError:
            continue
        for sample in samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def run_sweep(
    orchestrator: Orchestrator,
    loaded: LoadedProfile,
    settings: BenchSettings,
    observed: Observed,
    on_level: Callable[[LevelResult], None] = lambda _level: None,
) -> BenchRun:
    """Every level of the grid, `repetitions` times over; a level's samples are pooled across repetitions."""
    load = orchestrator.ports.load
    if load is None:
        raise PermanentError("bench needs a load port: none is wired into these ports")
    engine = engine_for(loaded.profile.engine)  # the registry: the server's own counter names and request shapes
    levels = sweep_levels(load, serving_endpoint(loaded, observed), settings, engine.series, on_level, engine.load_wire)
    container = observed.container
    assert container is not None and container.fingerprint is not None  # converged_deployment checked
    # The launch inputs (label kimik3.inputs) a run is filed with: what tune moves, and what it cannot (the engine's
    # bench_knobs, host.threads), then an engine section's knobs (vllm.max_num_seqs); serve.* are among the first.
    tune = engine.tune_knobs
    filed = (
        *engine.bench_knobs.filed,
        "host.threads",
        *(f"{tune.section}.{n}" for n in tune.names if tune.section != "serve"),
    )
    knobs = {k: container.inputs.get(k) for k in filed if k in container.inputs}
    return BenchRun(
        loaded.profile.name,
        container.fingerprint,
        orchestrator.ports.clock.now().isoformat(timespec="seconds"),
        settings,
        tuple(levels),
        knobs,
    )


def sweep_levels(
    load: LoadPort,
    server: Server,
    settings: BenchSettings,
    series: ServerSeries,
    on_level: Callable[[LevelResult], None] = lambda _level: None,
    wire: str = "native",
) -> tuple[LevelResult, ...]:
    """The sweep itself, against any server that answers the OpenAI API (a container, or a native process as
    tools/gpu_proof runs one): each level `repetitions` times, samples pooled, the server's generated-tokens
    counter (`series`: the engine's names) diffed; `wire`: the engine's request shapes."""
    counter = series.generated_tokens_total
    levels = []
    for concurrency in settings.grid:
        samples: list[RequestSample] = []
        wall, predicted = 0.0, 0.0
        for rep in range(settings.repetitions):
            prompts = exact_prompts(
                load,
                server,
                concurrency * settings.prompts,
                settings.prompt_tokens,
                salt=concurrency * 100 + rep,
                wire=wire,
            )
            before = parse_metrics(load.metrics(server.base_url, server.api_key), series.prefix).get(counter)
            got, seconds = load.run_level(
                LoadLevel(server.base_url, server.api_key, prompts, settings.output_tokens, concurrency, wire)
            )
            after = parse_metrics(load.metrics(server.base_url, server.api_key), series.prefix).get(counter)
            samples += got
            wall += seconds
            predicted = predicted + (after - before) if before is not None and after is not None else float("nan")
        level = summarise(concurrency, samples, wall, None if predicted != predicted else predicted)
        on_level(level)
        levels.append(level)
    return tuple(levels)
