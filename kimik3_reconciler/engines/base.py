"""What differs between serving engines (llama.cpp today; vLLM and SGLang, seed 001's routes, next): one
protocol, pure (values in, values out; no ports, no I/O), implemented once per engine folder (engines/<name>/).

Generic code (planning, steps, exporter, bench, tune, verify, reconcile) learns the engine only through a
`ServingEngine` handed to it (`Desired.engine`, or an argument resolved by `engines.engine_for` at an entry
point), never by importing an engine's folder (an import-linter contract in pyproject.toml).
Each member says what it is for seed 001's three recipes, so the next engines fit without a change here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pathlib import Path

    from kimik3_reconciler.model.facts import HostFacts, ModelFact, ModelLayout, Observed, RemoteFile
    from kimik3_reconciler.model.launch_input import LaunchInput
    from kimik3_reconciler.model.profile import Profile, RpcWorker, ServeSpec
    from kimik3_reconciler.model.route import Route
    from kimik3_reconciler.model.specs import ImageBuild


# The values below are NamedTuples, not dataclasses: every plan imports this module, and four generated dataclasses
# cost it ~2 ms more (python -X importtime, a no-op plan of the demo; bench/plan_seam.py).
class ModelSource(NamedTuple):
    """What of the model repo the engine serves. `gguf`: one quant's shards (`model.quant`'s folder, or a GGUF made
    on this host: `model.local_path`, listed as `<quant>/<name>` alike), opened by their first shard;
    `safetensors` (vLLM, SGLang): the whole checkpoint at the pinned revision, opened as a folder. Downloaded (or,
    local, hashed), verified and mounted read-only by kimik3 either way (the container gets no token)."""

    format: Literal["gguf", "safetensors"]

    @property
    def suffix(self) -> str:
        """The weight files' suffix (the exporter's page-cache residency reads those files)."""
        return f".{self.format}"


class ImageSource(NamedTuple):
    """How the image is obtained: `build` from pinned source (llama.cpp: Dockerfile.llamacpp, cmake flags from
    the profile) or `pull` by digest (vLLM's `vllm/vllm-openai@sha256:…`, SGLang's)."""

    kind: Literal["build", "pull"]


class Readiness(NamedTuple):
    """What loading and ready look like on the wire. `path` answers 200 once the model is loaded. While it
    loads, llama-server answers `path` with 503 (`while_loading="503"`); vLLM's port refuses connections
    (`"refused"`): a health wait must read "no answer" as loading there, and as a failure only when the
    container exits."""

    path: str
    while_loading: Literal["503", "refused"]
    # Seconds the server may take to start beyond reading its weights (the health wait's timeout adds the read at a
    # pessimistic rate): llama-server 120; vLLM compiles and captures CUDA graphs (minutes on 8 GPUs).
    startup_s: float = 120.0
    # Seconds every launch spends beside reading the weights, for the downtime forecast until this host has recorded
    # a launch of the container (then that record is the forecast), and where that figure comes from. llama-server:
    # 0 (its load is the read, and the load rates measured here carry the rest); vLLM: imports, the engine's
    # processes, the KV cache's profiling run (and torch.compile and CUDA graphs on GPUs).
    fixed_s: float = 0.0
    fixed_source: str = ""

    @property
    def loading(self) -> str:
        """How a loading server looks, for a plan's reason."""
        return f"{self.path} 503" if self.while_loading == "503" else "its port refuses connections"


class ServerSeries(NamedTuple):
    """The server's own Prometheus names (its /metrics), by what kimik3 shows of them (`status --watch`, the
    exporter's re-labelled families, bench's counter). llama-server: `llamacpp:*`; vLLM: `vllm:*`
    (num_requests_running, num_requests_waiting, generation_tokens_total, prompt_tokens_total, its histograms).
    `slots`: the path of per-slot state where the engine has one (llama-server's /slots), else None."""

    prefix: str
    running: str
    waiting: str
    generated_tokens_total: str
    prompt_tokens_total: str
    slots: str | None
    # The server's own latency histograms and cache gauges, where it has them (vLLM; llama-server has none: the
    # exporter's latency proxy measures TTFT/ITL in front of it): time to first token, inter-token latency, request
    # end to end, the KV cache's used share (0..1).
    ttft: str | None = None
    itl: str | None = None
    e2e: str | None = None
    kv_usage: str | None = None
    # The prefix cache's counters (tokens): those taken from the cache, and those asked for in all (vLLM's
    # `prefix_cache_queries_total`). None for the second where the server counts only the tokens it evaluated
    # (llama-server's `prompt_tokens_total` excludes the cached ones): the prompt is then hits + evaluated.
    prefix_cache_hits_total: str | None = None
    prefix_cache_queries_total: str | None = None

    @classmethod
    def openai(cls, prefix: str, running: str, waiting: str, *as_named: str, **more: str) -> ServerSeries:
        """An OpenAI server's names (vLLM, SGLang), each `prefix` + the name given: `running`, `waiting`, the
        `generation_tokens_total` and `prompt_tokens_total` counters, no slots, and the optional fields: `as_named`
        those the server names as the field is named, `more` the others (field=name)."""
        named = {field: prefix + name for field, name in (*((f, f) for f in as_named), *more.items())}
        counters = (prefix + "generation_tokens_total", prefix + "prompt_tokens_total")
        return cls(prefix, prefix + running, prefix + waiting, *counters, None, **named)

    def prefix_cache(self, value: Callable[[str], float | None]) -> PrefixCacheTokens | None:
        """The server's prefix-cache tokens since it started, from its counters (`value(name)`: a series' value
        summed over its label sets, None when absent); None where the engine or this server has no such counter."""
        hits = value(self.prefix_cache_hits_total) if self.prefix_cache_hits_total else None
        if hits is None:
            return None
        if self.prefix_cache_queries_total:
            prompt = value(self.prefix_cache_queries_total)
        else:
            evaluated = value(self.prompt_tokens_total)
            prompt = None if evaluated is None else hits + evaluated
        return None if prompt is None else PrefixCacheTokens(hits, prompt)


class PrefixCacheTokens(NamedTuple):
    """Prompt tokens a server took from its prefix cache (`hits`) of all the prompt tokens it was sent (`prompt`),
    as its own counters say (since it started, or between two readings: `since`)."""

    hits: float
    prompt: float

    @property
    def rate(self) -> float | None:
        return self.hits / self.prompt if self.prompt else None

    def since(self, before: PrefixCacheTokens | None) -> PrefixCacheTokens:
        """The tokens between `before` and this reading; this reading whole where the server restarted in between
        (its counters went down) or there is no earlier reading."""
        if before is None or self.prompt < before.prompt or self.hits < before.hits:
            return self
        return PrefixCacheTokens(self.hits - before.hits, self.prompt - before.prompt)

    @staticmethod
    def total(readings: Iterable[PrefixCacheTokens | None]) -> PrefixCacheTokens | None:
        """The fleet's: every reading's tokens added (None when no server had a reading)."""
        known = [r for r in readings if r is not None]
        return PrefixCacheTokens(sum(r.hits for r in known), sum(r.prompt for r in known)) if known else None


class HostNeeds(NamedTuple):
    """What a host needs to run an engine's recipe (the host gate, planning/host_gate.py, refuses with numbers):
    the NVIDIA driver branch its image's CUDA needs, how many GPUs and of which kinds (NVML name fragments; an
    empty tuple accepts any), where those numbers come from, the profile field that overrides the kinds, and the share of VRAM the engine may take (the checkpoint's weights
    must fit in it, with room left for the KV cache)."""

    min_driver: tuple[int, ...]
    gpus: int
    gpu_kinds: tuple[str, ...]
    source: str
    kinds_override: str
    memory_share: float = 1.0  # the share of each GPU's memory the engine takes (vLLM: gpu_memory_utilization)
    gpus_field: str = "vllm.tensor_parallel_size"  # the profile field that sets `gpus` (SGLang: sglang.tp_size)
    # The hosts one replica spans (vllm.cluster / sglang.cluster: the head and its nodes), and the field that says so.
    hosts: int = 1
    hosts_field: str = ""
    # Pipeline-parallel stages from the profile's own field (vllm.pipeline_parallel_size, sglang.pp_size): the
    # replica uses gpus × pipeline GPUs.
    pipeline: int = 1


class TuneKnobs(NamedTuple):
    """What `kimik3 tune` may move on an engine: the profile section its knobs live in (`serve` for llama.cpp,
    `vllm`, `sglang`: a candidate's values are written there) and their names in it (`--space NAME=...` takes
    these only)."""

    section: str
    names: tuple[str, ...]
    # How tune orders and writes them. `split`: the knobs that place the weights, ranked before any load by the
    # engine's `split_rank` (never searched blind); `line`: the others' order, searched one at a time; `placement`: the
    # knobs whose equal values put the same tensors in the same places (such candidates run one after the other, so a
    # load finds the weights it needs still in the page cache); `automatic`: the knobs whose unset value is the
    # engine's own choice (searched as model/tuning.FIT, written back unset); `raised`: (field, knob) pairs: the field
    # is raised to at least the searched knob's value when it is not searched itself.
    split: tuple[str, ...] = ()
    line: tuple[str, ...] = ()
    placement: tuple[str, ...] = ()
    automatic: tuple[str, ...] = ()
    raised: tuple[tuple[str, str], ...] = ()


class BenchKnobs(NamedTuple):
    """The launch inputs (label kimik3.inputs, named as the profile names them) a bench run is filed with beside
    host.threads and its engine section's tune knobs (`filed`: what tune moves and what it cannot, in that order), and
    those the run's plot label names first (`labelled`)."""

    filed: tuple[str, ...] = ()
    labelled: tuple[str, ...] = ()


class EnginePlan(NamedTuple):
    """What the engine renders of its plan once per `kimik3 plan`, beside the image and the launch (held on
    `Desired.plan`, planning/engine_plan.py): `mode`, its sizing of the model on this host's devices (llama.cpp: hybrid
    or all-VRAM, engines/llamacpp/vram_fit.py; None: the engine sizes its memory with its own knobs), and `forecast`,
    where the weights go and what a load reads (llama.cpp: engines/llamacpp/placement.py; None where it has none).
    `serve`: the serve fields the launch takes from that sizing where the profile leaves them out (llama.cpp: batch,
    ubatch, ctx_size, fit_target of the mode this host runs the quant in; none for an engine whose section holds its
    knobs); `notes`: what the plan says of the sizing (a mode that is not the catalog's); `context`: what each request
    gets, as the plan says it where it launches ("": the names a client may send stand there instead).
    The gate, the launch, the pre-read's memory check and the plan's forecast line read these instead of deriving
    them."""

    mode: Any = None
    forecast: Any = None
    serve: tuple[tuple[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    context: str = ""


class RouteCandidate(NamedTuple):
    """One way an engine offers to serve on a host (`kimik3 routes`, the plan's routes line), for planning/routes.py
    to judge with the plan's own gate: `profile`, the route as a profile (None: the engine decided it without the gate,
    `route` says how: a quant the catalog refuses, GPUs kimik3 builds no image for); `size`, the bytes of its weights
    the gate sizes it at; `judge(refusals, plan)`, the route once the gate judged `profile` on the host (the gate's
    refusals and the engine's plan on the route's observation). `ours`: the profile's own route (marked; the plan's
    verdict stands over the route's); `own_plan`: the plan's observation and verdict judge it where its profile is the
    plan's (False: judged on the route's own observation, as any other); `kimi`: a route of Kimi-K3 (False: the
    profile's own model, none of the engine's catalog)."""

    profile: Profile | None
    size: int | None = None
    judge: Callable[[list[str], EnginePlan], Route] | None = None
    route: Route | None = None
    ours: bool = False
    own_plan: bool = True
    kimi: bool = True


class NativeRoute(NamedTuple):
    """How an engine serves the native checkpoint (moonshotai/Kimi-K3) as a route of `kimik3 routes`
    (planning/routes.py makes a profile of it and judges it with the plan's gate): `knobs`, what its profile section
    takes when the profile names another engine (seed 001's recipe: the schema's defaults); `placement`, the route's
    name, formatted with `gpus` (the recipe's tensor-parallel ranks) and the section's knobs; `recipe`, where the
    route comes from, as a feasible route says it."""

    knobs: dict[str, Any]
    placement: str
    recipe: str
    # Where the route stands in seed 001's order ("choose the engine by your hardware": vLLM first on an 8-GPU
    # Blackwell-class server), and why to start there.
    rank: int = 0
    because: str = ""


class MemberProcess(NamedTuple):
    """One process a host of a replica that spans hosts runs: `role` (`ray-head`, `ray-worker`, `server`) and its
    whole argv, the program first (`ray start …`, `vllm serve …`, `sglang serve …`): a list, never a shell string."""

    role: str
    command: tuple[str, ...]


class NodeLaunch(NamedTuple):
    """One host of a replica that spans hosts, as the engine renders it: `name` (`head`: the profile's own host; else
    the node's name in the profile), its rank (the head 0, the nodes in profile order), the Docker that reaches it
    (None: this host's), the address it is reached at, what it runs in order (each started once the one before it
    is up), and the environment those processes get beside the server's."""

    name: str
    rank: int
    docker: str | None
    bind: str
    processes: tuple[MemberProcess, ...]
    env: tuple[tuple[str, str], ...] = ()


class LogSigns(NamedTuple):
    """What the server's own log lines say of a failed launch or a crash (observe/server_log.py classifies by them, in
    this order; each a lower-case fragment of a line): `bind`, it could not bind its port; `gpu_oom`, a GPU allocation
    failed (before the host's: another fix), `gpu_oom_fix` what to change; `oom`, an allocation failed; `bad_model`,
    the model file could not be read, named `bad_model_cause`, with the headline `unreadable` (a cached hub file) or
    `unreadable_local` (model.local_path's file: `{local_model}` in it names it); `served`, lines proving it had
    loaded (a "model loaded" line, a request's own lines); `root`, a regular expression of a line that names a
    failed start's first error, printed long before the log's last lines (a Python server's tracebacks: its last
    lines are the consequence, "Engine core initialization failed. See root cause above"). The defaults are what any
    server's log says."""

    bind: tuple[str, ...] = ("address already in use",)
    gpu_oom: tuple[str, ...] = ()
    gpu_oom_fix: str = ""
    oom: tuple[str, ...] = ("out of memory", "cannot allocate memory")
    bad_model: tuple[str, ...] = ()
    bad_model_cause: str = "bad-model"
    unreadable: str = "failed while loading the model: the model files could not be read"
    unreadable_local: str = "failed while loading the model: model.local_path ({local_model}) could not be read"
    served: tuple[str, ...] = ()
    root: str = ""


class HeaderShort(Exception):
    """A weight file's header is longer than the bytes given: `at_least` bytes will do."""

    def __init__(self, at_least: int, message: str | None = None):
        self.at_least = at_least
        super().__init__(message or f"need at least {at_least} bytes of the header")


class HeaderUnreadable(ValueError):
    """The bytes are no header of the engine's weight format."""


class WeightFilesRefused(ValueError):
    """Why the files at `model.local_path` cannot be served (the text that follows the path in the refusal)."""


class WeightHeaders(Protocol):
    """How an engine's own weight files say what they hold, read from their first bytes (llama.cpp: the GGUF header,
    engines/llamacpp/gguf_header.py; a safetensors checkpoint is read generically). `layout_files`: the model's files
    whose headers give the layout the placement forecast sizes (observe/model_layout.py); `read`: one header from a
    file's first bytes (HeaderShort: more are needed; HeaderUnreadable: not such a file); `metadata`: its key/values
    (verify asks whether the weights are random); `layout`: the headers summed into the model's layout.
    `local_files` and `check_start`: which files of `model.local_path` (a file's name, or a folder's file names) are
    served, and whether a file's first bytes are of the format (observe/local_model.py; WeightFilesRefused: why not)."""

    def layout_files(self, model: ModelFact) -> list[RemoteFile]: ...

    def read(self, data: bytes) -> Any: ...

    def metadata(self, header: Any) -> dict[str, Any]: ...

    def layout(self, headers: list[Any]) -> ModelLayout: ...

    def local_files(self, names: list[str], folder: bool) -> list[str]: ...

    def check_start(self, name: str, head: bytes) -> None: ...


class KldReport(NamedTuple):
    """A quant scored against the reference quant's logits (the quant gate): the mean KL divergence, how often the
    candidate's top token is the reference's (0..1), and its perplexity where the scorer printed one."""

    mean_kld: float
    same_top_p: float
    ppl: float | None = None


class QuantScorer(Protocol):
    """How the engine scores a quant against the reference quant's logits (the quant gate, seed 000; planning and
    steps/quant_gate.py): `program`, the tool as messages name it; `entrypoint`, its path in the engine's image;
    `argv(model, logits, flags, ctx, chunks, text)`, with `text` to write the reference logits over `chunks` x `ctx`
    tokens of it, without to score the candidate against them (paths are the container's); `report(stdout)`, the
    report, None where it printed none (it bailed out)."""

    program: str
    entrypoint: tuple[str, ...]

    def argv(
        self, model: str, logits: str, flags: tuple[str, ...], ctx: int, chunks: int, text: str | None = None
    ) -> tuple[str, ...]: ...

    def report(self, stdout: str) -> KldReport | None: ...


class WorkerServer(Protocol):
    """The engine's worker process on another host (the profile's rpc.workers; planning/worker_step.py renders its
    container): `entrypoint`, in the profile's own image; `argv(worker)`, its flags; `env(cache)`, what points its
    tensor cache at the mounted folder `cache`; `build_cost`, the worker image step's cost as the plan says it."""

    entrypoint: tuple[str, ...]
    build_cost: str

    def argv(self, worker: RpcWorker) -> tuple[str, ...]: ...

    def env(self, cache: str) -> tuple[tuple[str, str], ...]: ...


class SmokeModel(Protocol):
    """The tiny model a new image must serve before the real one goes on it (planning/smoke_step.py, steps/smoke.py;
    seed 000 step 4): `entry`, the file the server opens in the folder `write` fills (the same files every time);
    `what`, the model as the plan says it; `argv(path, threads)`, the smoke server's command without --host/--port
    (`path`: `entry` where the container mounts the folder)."""

    entry: str
    what: str

    def argv(self, path: str, threads: int) -> tuple[str, ...]: ...

    def write(self, folder: Path) -> None: ...


class BuildRecipe(Protocol):
    """An engine's image build for one profile on one observation, as the image planner asks for it
    (planning/image_step.py), each part rendered when asked: `tag`, the tag the build gets; `spec()`, the build's
    payload (its fingerprint decides keep, retag or rebuild); `inputs()`, the flattened inputs its label keeps (a
    rebuild's diff); `cost()`, the build's cost as the plan says it; `refusal()`, why the profile cannot be built
    (None: it can); `notes()`, what the image step's reason adds."""

    tag: str

    def spec(self) -> ImageBuild: ...

    def inputs(self) -> dict[str, object]: ...

    def cost(self) -> str: ...

    def refusal(self) -> str | None: ...

    def notes(self) -> tuple[str, ...]: ...


class SlotStore(NamedTuple):
    """Where an engine keeps a slot's prompt cache across a server swap (a fleet rollout's warm step,
    fleet/warm.py): llama-server saves a slot's KV cache and tokens to a file in the folder its `flag` names
    (`POST /slots/{id}?action=save|restore {"filename"}`, `GET /slots`), mounted at `mount` from a Docker volume
    that outlives the container. vLLM and SGLang have none (None): their rollout prefills the declared prompts
    into their prefix cache, or does nothing."""

    flag: str
    mount: str
    list_path: str


# How bench (and tune's draws) talks to the server. `native`: the server's own (llama-server's) /tokenize {content} and
# /completion (token-id prompts, cache_prompt off, the server's per-request timings); `openai`: the OpenAI
# server's /tokenize {prompt} and streamed /v1/completions with usage on every chunk (vLLM, SGLang).
LoadWire = Literal["native", "openai"]


@runtime_checkable
class ServingEngine(Protocol):
    """One serving engine, as kimik3 deploys it."""

    name: str  # the profile's `engine:` value (model/engine_names.py: the registry)
    # The server process, as a message names it ("… could not bind it"): llama-server, `vllm serve`, `sglang serve`.
    server: str
    # The argv flag that names the served model (`status` reads the running container's names from it), and whether
    # the server answers a request that names another model: llama-server does (checked on b11434); so do SGLang
    # 0.5.23's Python OpenAI routes (srt/entrypoints/openai/serving_base.py never compares `model` with it); vLLM
    # answers only its served names (404 otherwise).
    served_name_flag: str
    answers_any_name: bool
    # The profile `kimik3 routes` judges the routes as when given none (the registry's default engine's: a profile
    # with every default, its model and engine swapped in per route); "" for an engine that is not the default.
    routes_base: str
    model_source: ModelSource
    image_source: ImageSource
    readiness: Readiness
    series: ServerSeries
    # The chat completion's message field that carries the reasoning (verify's two-turn check sends it back):
    # llama-server `reasoning_content`, vLLM `reasoning`.
    reasoning_field: str
    tune_knobs: TuneKnobs
    bench_knobs: BenchKnobs
    load_wire: LoadWire
    # Its route of the native checkpoint (vLLM, SGLang); None where it serves none (llama.cpp: GGUF quants).
    native_route: NativeRoute | None
    # Its worker process on other hosts (rpc.workers); None where it has none.
    workers: WorkerServer | None
    # Its scorer of a quant against the reference quant (the quant gate); None where it serves no quants.
    quant_scorer: QuantScorer | None
    # The tiny model a new build must serve first (gate.smoke); None where no image is built (a pulled image's first
    # launch's health wait and verify are its test).
    smoke: SmokeModel | None
    # What its log lines say of a failed launch or a crash (observe/server_log.py).
    log_signs: LogSigns
    # The reader of its own weight files' headers (llama.cpp: GGUF); None where the model is a safetensors checkpoint.
    weight_headers: WeightHeaders | None
    # Whether verify's vision check sends it an image: llama-server launched with the fork's --mmproj answers one;
    # vLLM and SGLang serve Kimi-K3's vision from the checkpoint itself, which no check sends an image to yet.
    vision_probe: bool
    # Its slot save and restore (SlotStore), where the server has one, for a rollout that keeps the prompt caches;
    # None: no such API (vLLM, SGLang: the rollout prefills the operator's declared hot prompts instead).
    slot_store: SlotStore | None
    # How a rollout's warm step prefills a declared hot prompt (adapters/slot_cache.py `prefill`). True: the exact
    # prefix a turn starts with, rendered by the server's own template without the generation prompt (`POST
    # /apply-template`) and processed with nothing generated (`POST /completion` n_predict 0): llama-server, whose
    # recurrent layers cannot cut a chat prefill's state back to the shared part. False: a chat request generating
    # one token (vLLM, SGLang: their block prefix caches keep every full block of the prompt).
    exact_prefill: bool

    def model_entry(self, model: ModelFact) -> str:
        """What the server opens, relative to the mounted snapshot: GGUF, the quant's -00001-of- shard (or its
        only file); a safetensors checkpoint, "." (the snapshot folder itself)."""
        ...

    def served_names(self, value: LaunchInput) -> tuple[str, ...]:
        """The model names the server lists (/v1/models) and answers to, the profile's name first (verify, bench and
        the exporter ask for it). vLLM: the checkpoint's repo id too, the name seed 001's client examples send
        (`--served-model-name` takes several); llama-server's --alias and SGLang's --served-model-name take one."""
        ...

    def owned_flags(self, threads: int, load_mode: str) -> tuple[str, ...]:
        """The fixed flags (never knobs) every process of this engine that opens the real model carries: the
        server, and for llama.cpp the smoke test and the quant gate's llama-perplexity too (one source)."""
        ...

    def placement_flags(self, serve: ServeSpec, manual_split: bool = True) -> tuple[str, ...]:
        """How the weights are placed over the devices (llama.cpp: --fit with margins or the manual
        --n-cpu-moe split; vLLM/SGLang: tensor/data-parallel sizes)."""
        ...

    def server_argv(self, launch: LaunchInput, snapshot: str) -> tuple[str, ...]:
        """The server's argv (the image's entrypoint runs it) from the launch input; `snapshot`: where the
        model's snapshot is mounted in the container. Env and mounts are generic (planning/launch.py)."""
        ...

    def cluster_launch(self, value: LaunchInput, snapshot: str) -> tuple[NodeLaunch, ...]:
        """A replica over several hosts, host by host, the head (this host) first: what each runs (vLLM: Ray's head
        and the server, then a Ray worker per node; SGLang: the server at each node's rank). () on one host
        (llama.cpp's hosts beyond this one are its RPC workers, rendered by its worker step)."""
        ...

    def server_env(self, value: LaunchInput) -> tuple[tuple[str, str], ...]:
        """What the engine sets in the server's environment beside serve.env (vLLM: VLLM_USE_V2_MODEL_RUNNER,
        HF_HUB_OFFLINE; llama.cpp: nothing). The engine's value wins over serve.env (its rules refuse the names)."""
        ...

    def host_needs(self, profile: Profile) -> HostNeeds | None:
        """What the host must have for this profile on GPUs; None where the generic gate derives it (llama.cpp: the
        driver from the built image's CUDA, the GPUs from `gpus` and the quant's fit)."""
        ...

    def request_room(self, profile: Profile, trained: int | None) -> tuple[int, str]:
        """The most tokens (prompt + output) one request can hold on this profile, and what sets it, as a refusal
        says it (llama.cpp: a slot's ctx_size/parallel; vLLM: max_model_len). `trained`: the model's trained
        context where known. Bench and tune's candidate check refuse a request that would not fit before any load."""
        ...

    def tune_space(self, profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
        """The knobs `kimik3 tune` may search on this host (`tune_knobs`' fields), each with the running value among
        its values (llama.cpp: ubatch, parallel, fit_target or n_cpu_moe; vLLM: max_num_seqs,
        max_num_batched_tokens, gpu_memory_utilization, …)."""
        ...

    def split_rank(
        self, profile: Profile, observed: Observed, plan: EnginePlan, knobs: dict[str, Any]
    ) -> tuple[Any, ...]:
        """How promising a tune candidate's `tune_knobs.split` values are before any load, lower first, from the
        candidate's `plan` (llama.cpp: its placement forecast); () where the engine has no split knobs."""
        ...

    def build_recipe(self, profile: Profile, observed: Observed) -> BuildRecipe | None:
        """The image build this profile renders on this host (llama.cpp: Dockerfile.llamacpp's build args, patches
        and CMake flags); None where the engine pulls its image by digest (nothing is built)."""
        ...

    def render_plan(self, profile: Profile, observed: Observed) -> EnginePlan:
        """The engine's plan for this profile on this observation, rendered once per plan (render_desired)."""
        ...

    def host_findings(
        self, profile: Profile, observed: Observed, plan: EnginePlan, stoppable: frozenset[int], ours_running: bool
    ) -> tuple[list[str], list[str]]:
        """(refusals, warnings) of the host gate that are this engine's own, judged from its `plan`, where it has no
        `host_needs` (llama.cpp: its GPUs and driver, its image's kernels for these GPUs and this CPU, the quant's
        VRAM + RAM). `stoppable`: pids the plan stops first; `ours_running`: a kimik3 server holds memory here now."""
        ...

    def draft_device(self, profile: Profile, host_gpus: int | None) -> str | None:
        """The device the speculative draft runs on (LaunchInput.draft_device), None without a draft or where the
        engine places it itself. `host_gpus`: the host's GPU count where NVML gave it."""
        ...

    def route_candidates(
        self, base: Profile, host: HostFacts, profile: Profile | None, observed: Observed | None
    ) -> tuple[RouteCandidate, ...]:
        """The ways this engine serves on `host`, made from `base` (the user's profile, or `kimik3 routes`' default)
        for planning/routes.py to judge with the plan's gate. `profile`: the user's, whose own route is marked
        (`ours`), sized from its files where `observed` knows them."""
        ...

    def route_rank(self, route: Route) -> tuple[int, str] | None:
        """Where one of its feasible routes stands in seed 001's order (lower: start there) and why; None: after
        every ranked route."""
        ...


class CheckpointDefaults:
    """What an engine that serves a whole checkpoint from a pulled image, sized by its own knobs (vLLM, SGLang, the
    tests' probe), answers where llama.cpp has its own: an OpenAI server answering to `--served-model-name` (its
    profile's name), the snapshot folder as its model, the default log signs, no vision probe, slot store, rpc
    workers, quant gate, smoke test or weight headers of its own, no build recipe, no engine plan (the whole
    checkpoint in VRAM: no mode, no split), no placement flags, no host findings beyond its `host_needs` (the gate's
    checkpoint findings judge those), no draft device, no split knobs to rank, no routes profile of its own
    (llama.cpp, the default engine, gives that). An engine class inherits it and states only what differs."""

    routes_base = ""  # not the default engine: `kimik3 routes` without a profile starts from llama.cpp's
    served_name_flag = "--served-model-name"
    model_source = ModelSource("safetensors")
    image_source = ImageSource("pull")
    load_wire: LoadWire = "openai"
    bench_knobs = BenchKnobs()  # its section's tune knobs file a run (and label it)
    vision_probe = False  # its vision is the checkpoint's, which no check sends an image to yet
    slot_store: SlotStore | None = None  # no slot save/restore: a rollout prefills the declared hot prompts
    exact_prefill = False  # a chat request generating one token: its block prefix cache keeps every full block
    log_signs = LogSigns()  # what any server's log says (address in use, out of memory)
    workers: WorkerServer | None = None  # no rpc.workers: its ranks are its own processes
    quant_scorer: QuantScorer | None = None  # the checkpoint, not a quant: no quant gate
    smoke: SmokeModel | None = None  # a pulled image: its first launch's health wait and verify are its test
    weight_headers: WeightHeaders | None = None  # a safetensors checkpoint: read generically (observe/served_weights)

    def model_entry(self, model: ModelFact) -> str:
        return "."  # the snapshot folder: config.json, the tokenizer (and custom code) and the safetensors shards

    def served_names(self, value: LaunchInput) -> tuple[str, ...]:
        return (value.name,)

    def placement_flags(self, serve: ServeSpec, manual_split: bool = True) -> tuple[str, ...]:
        return ()  # its parallelism is a knob of its own profile section: server_argv renders it

    def build_recipe(self, profile: Profile, observed: Observed) -> None:
        return None  # its image is pulled by digest (image.ref)

    def render_plan(self, profile: Profile, observed: Observed) -> EnginePlan:
        return EnginePlan()  # the whole checkpoint in VRAM, sized by its memory knob: no mode, no split

    def host_findings(
        self, profile: Profile, observed: Observed, plan: EnginePlan, stoppable: frozenset[int], ours_running: bool
    ) -> tuple[list[str], list[str]]:
        return [], []

    def draft_device(self, profile: Profile, host_gpus: int | None) -> str | None:
        return None

    def cluster_launch(self, value: LaunchInput, snapshot: str) -> tuple[NodeLaunch, ...]:
        return ()  # one host: an engine with a cluster renders its hosts (LaunchedByModule: its launch module)

    def split_rank(
        self, profile: Profile, observed: Observed, plan: EnginePlan, knobs: dict[str, Any]
    ) -> tuple[Any, ...]:
        return ()


class CheckpointLaunch(Protocol):
    """An engine folder's launch module (engines/vllm/launch.py, engines/sglang/launch.py): the flags kimik3 renders
    itself, the server's argv, its cluster's per-node launches and its environment."""

    OWNED_FLAGS: tuple[str, ...]

    def server_argv(self, value: LaunchInput, snapshot: str) -> tuple[str, ...]: ...
    def cluster_launch(self, value: LaunchInput, snapshot: str) -> tuple[NodeLaunch, ...]: ...
    def server_env(self, value: LaunchInput) -> tuple[tuple[str, str], ...]: ...


class LaunchedByModule(CheckpointDefaults):
    """CheckpointDefaults whose argv, cluster launch, environment and owned flags are its `launch` module's."""

    launch: CheckpointLaunch

    def owned_flags(self, threads: int, load_mode: str = "none") -> tuple[str, ...]:
        return self.launch.OWNED_FLAGS

    def server_argv(self, value: LaunchInput, snapshot: str) -> tuple[str, ...]:
        return self.launch.server_argv(value, snapshot)

    def cluster_launch(self, value: LaunchInput, snapshot: str) -> tuple[NodeLaunch, ...]:
        return self.launch.cluster_launch(value, snapshot)

    def server_env(self, value: LaunchInput) -> tuple[tuple[str, str], ...]:
        return self.launch.server_env(value)
