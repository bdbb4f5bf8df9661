"""What differs between serving engines (llama.cpp today; vLLM and SGLang, seed 001's routes, next): one
protocol, pure (values in, values out; no ports, no I/O), implemented once per engine folder (engines/<name>/).

Generic code (planning, steps, exporter, bench, tune, verify, reconcile) learns the engine only through a
`ServingEngine` handed to it (`Desired.engine`, or an argument resolved by `engines.engine_for` at an entry
point), never by importing an engine's folder (an import-linter contract in pyproject.toml).
Each member says what it is for seed 001's three recipes, so the next engines fit without a change here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from kimik3_reconciler.model.facts import GpuFact, HostFacts, ModelFact, Observed
    from kimik3_reconciler.model.launch_input import LaunchInput
    from kimik3_reconciler.model.profile import Profile, ServeSpec
    from kimik3_reconciler.model.route import Route


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
    # end to end, the KV cache's used share (0..1), prefix-cache hit and query counters (tokens).
    ttft: str | None = None
    itl: str | None = None
    e2e: str | None = None
    kv_usage: str | None = None
    prefix_cache_hits_total: str | None = None
    prefix_cache_queries_total: str | None = None


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


class EnginePlan(NamedTuple):
    """What the engine renders of its plan once per `kimik3 plan`, beside the image and the launch (held on
    `Desired.plan`, planning/engine_plan.py): `mode`, its sizing of the model on this host's devices (llama.cpp: hybrid
    or all-VRAM, engines/llamacpp/vram_fit.py; None: the engine sizes its memory with its own knobs), and `forecast`,
    where the weights go and what a load reads (llama.cpp: engines/llamacpp/placement.py; None where it has none).
    The launch, the pre-read's memory check and the plan's forecast line read these instead of deriving them."""

    mode: Any = None
    forecast: Any = None


class EngineRoutes(NamedTuple):
    """The routes an engine offers on a host (`kimik3 routes`, the plan's routes line) beside those planning/routes.py
    makes as profiles and judges with the plan's gate (llama.cpp's catalog quants, vLLM's and SGLang's native
    checkpoint: those three offer none here): `kimi`, its ways of serving Kimi-K3; `own`, the profile's model where
    it is none of those."""

    kimi: tuple[Route, ...]
    own: tuple[Route, ...] = ()


class NativeRoute(NamedTuple):
    """How an engine serves the native checkpoint (moonshotai/Kimi-K3) as a route of `kimik3 routes`
    (planning/routes.py makes a profile of it and judges it with the plan's gate): `knobs`, what its profile section
    takes when the profile names another engine (seed 001's recipe: the schema's defaults); `placement`, the route's
    name, formatted with `gpus` (the recipe's tensor-parallel ranks) and the section's knobs; `recipe`, where the
    route comes from, as a feasible route says it."""

    knobs: dict[str, Any]
    placement: str
    recipe: str


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


# How bench (and tune's draws) talks to the server. `llamacpp`: llama-server's native /tokenize {content} and
# /completion (token-id prompts, cache_prompt off, the server's per-request timings); `openai`: the OpenAI
# server's /tokenize {prompt} and streamed /v1/completions with usage on every chunk (vLLM, SGLang).
LoadWire = Literal["llamacpp", "openai"]


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
    model_source: ModelSource
    image_source: ImageSource
    readiness: Readiness
    series: ServerSeries
    # The chat completion's message field that carries the reasoning (verify's two-turn check sends it back):
    # llama-server `reasoning_content`, vLLM `reasoning`.
    reasoning_field: str
    tune_knobs: TuneKnobs
    load_wire: LoadWire
    # Its route of the native checkpoint (vLLM, SGLang); None where it serves none (llama.cpp: GGUF quants).
    native_route: NativeRoute | None
    # Whether verify's vision check sends it an image: llama-server launched with the fork's --mmproj answers one;
    # vLLM and SGLang serve Kimi-K3's vision from the checkpoint itself, which no check sends an image to yet.
    vision_probe: bool

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

    def render_plan(self, profile: Profile, observed: Observed) -> EnginePlan:
        """The engine's plan for this profile on this observation, rendered once per plan (render_desired)."""
        ...

    def routes(
        self, host: HostFacts, gpus: tuple[GpuFact, ...], profile: Profile | None, observed: Observed | None
    ) -> EngineRoutes:
        """This engine's own routes on `gpus` of `host`, judged with their numbers, beyond the profiles
        planning/routes.py judges with the gate (none for llama.cpp, vLLM, SGLang). `profile`: given when the profile
        names this engine: its route is marked (`Route.profile`), sized from its files where `observed` knows them."""
        ...
