"""The rules kimik3 enforces, as data: what each does, why, the seed passage it comes from, the modules that
enforce it, and the case files that test it. `kimik3 explain [RULE]` prints them; tests/unit/model/test_rulebook.py
checks that every case exists, that each rule names its seed passage and that each enforcing module marks its guard
with `# rule: <id>`. The book is gathered: the rules here (each a model/rulebook_entry.py `Rule`: the generic ones,
and vLLM's and SGLang's few), then each registered engine's own book, in the registry's order (its entry's `rulebook`
module's RULEBOOK: engines/llamacpp/rulebook.py, seed 000's recipe)"""

from __future__ import annotations

from importlib import import_module

from kimik3_reconciler.model.engine_names import ENGINES
from kimik3_reconciler.model.rulebook_entry import OWN, Rule, profile_rules

_HUB = ("kimik3_reconciler.adapters.hf_hub", "kimik3_reconciler.adapters.hub_download")
_UNITS = ("kimik3_reconciler.planning.unit_step",)
_VERIFY = ("kimik3_reconciler.verify.checks",)
_VERIFY_CASES = ("unit/verify/test_verify.py", "unit/verify/test_verify_stub_server.py")
_VLLM = ("kimik3_reconciler.engines.vllm.rules",)
_SGLANG = ("kimik3_reconciler.engines.sglang.rules",)
_SGLANG_SEED = "seed 001 (the SGLang cookbook's verified 8x B300 TP8/DCP8 profile)"

_GENERIC: tuple[Rule, ...] = (
    Rule(
        "gpu-plumbing-probe",
        "refuse",
        "before anything is downloaded, built or launched, a real container runs "
        "nvidia-smi with the profile's GPUs, requested through CDI when the host has a CDI spec of nvidia.com/gpu, "
        "`--gpus` otherwise where the nvidia runtime is registered or the toolkit's hook is on dockerd's PATH (the "
        "decision a cluster node's member gets: model/gpu_request.py); a host with neither is refused naming what "
        "each way lacks; recorded once per (driver, toolkit, request); gpus: none never probes",
        "a CDI spec file, a registered runtime or the hook only says a toolkit was installed; a broken one is found "
        "after "
        "a download of hundreds of GB otherwise",
        (
            "kimik3_reconciler.planning.gpu_probe",
            "kimik3_reconciler.planning.host_gate",
            "kimik3_reconciler.engines.llamacpp.host_findings",
        ),
        (
            "cases/plan/76-gpu-probe-cdi-host.yaml",
            "cases/plan/77-gpu-probe-recorded.yaml",
            "cases/plan/78-gpu-probe-runtime-host.yaml",
            "cases/plan/225-gpu-probe-hook-only-host.yaml",
            "cases/plan/226-gpu-probe-cdi-only-host.yaml",
            "cases/plan/227-gpu-probe-no-plumbing.yaml",
            "cases/plan/228-gpu-probe-cpu-profile-asks-nothing.yaml",
            "unit/steps/test_gpu_probe.py",
            "integration/test_gpu_probe_docker.py",
        ),
        seed="seed 000 step 1 (GPU containers work via CDI: docker run --rm --device nvidia.com/gpu=all "
        "--entrypoint nvidia-smi nvidia/cuda:13.0.0-base-ubuntu24.04)",
    ),
    Rule(
        "preread-fits-ram",
        "refuse",
        "a swap of a serving container pre-reads the model into the page cache "
        "first when the model's bytes + a reserve (10 % of RAM, at least 2 GiB) fit MemAvailable (the running "
        "server's RSS is already outside it, and the new one takes it again); when they do not, only the first "
        "MemAvailable − reserve bytes of the files in order (at least 1 GiB, else none), the downtime predicted from "
        "that part at the warm rate and the rest at the cold one (issue 27); an image build pre-reads it while it "
        "compiles only when the compile's share (per core) also fits, or, with no server serving, the new server's "
        "host share (placement forecast, else the whole model) if larger; never with serve.load_mode dio",
        "a pre-read larger than free memory evicts its first shards before the load reaches them: the load reads "
        "the disk anyway, after a read that only cost time (and pressure on the serving process)",
        ("kimik3_reconciler.planning.preread_step",),
        (
            "cases/plan/93-preread-before-swap.yaml",
            "cases/plan/94-preread-ram-short.yaml",
            "cases/plan/95-preread-not-with-dio.yaml",
            "cases/plan/103-preread-during-build.yaml",
            "cases/plan/104-preread-build-ram-short.yaml",
            "cases/plan/105-preread-first-deploy-during-build.yaml",
            "cases/plan/106-preread-build-not-with-dio.yaml",
            "cases/plan/127-preread-partial-seed-host.yaml",
            "cases/plan/128-preread-no-room.yaml",
            "cases/plan/129-preread-partial-after-build.yaml",
            "integration/test_load_docker.py",
            "integration/test_partial_preread_docker.py",
        ),
        seed="seed 000 step 5 (a ~15min+ cold load of the real ~861 GB model, paid again by every replacement); "
        "issue 15 (reloads that hide the read)",
    ),
    Rule(
        "gpus-present",
        "refuse",
        "a CUDA profile needs GPUs on the host (NVML sees them) and every GPU it lists (index or UUID) must be there",
        "the build and the download would be for a server that cannot start",
        ("kimik3_reconciler.engines.gpus", "kimik3_reconciler.engines.llamacpp.host_findings"),
        ("unit/planning/test_host_gate.py", "cases/profile/gpus_uuid_uppercase.yaml"),
        seed="seed 000 step 1 (Verify host: nvidia-smi, GPU count/VRAM)",
    ),
    Rule(
        "gpus-unclaimed",
        "refuse",
        "a GPU of the profile holding another job's process is refused (unless "
        "share_gpus: true); kimik3's own containers and those the plan stops first do not count",
        "the hardware is commonly a shared pool: claiming a GPU another job uses breaks both",
        ("kimik3_reconciler.engines.gpus",),
        ("unit/planning/test_host_gate.py",),
        seed="seed 000 step 1 (check nvidia-smi for who else is using the GPUs before claiming any)",
    ),
    Rule(
        "sizing-disk",
        "refuse",
        "a download that does not fit the cache's free disk (+10 % headroom) is refused "
        "with the numbers, before anything is fetched",
        "found after hundreds of GB otherwise",
        ("kimik3_reconciler.planning.model_step",),
        ("unit/planning/test_model_step.py", "unit/orchestrator/test_orchestrator.py"),
        seed="seed 000 step 3 (the script sums the quant's bytes and refuses, with the numbers, if it won't fit)",
    ),
    Rule(
        "pins-not-made-up",
        "refuse",
        "validate and pin refuse a commit or digest that is a placeholder (a run like "
        "0123456789abcdef…, or one character repeated: sha256:000…)",
        "a placeholder validates as a pin and fails only on the GPU host, at the hub or the registry",
        ("kimik3_reconciler.cli.inputs", "kimik3_reconciler.cli.pin_cmd"),
        ("unit/model/test_pins.py",),
        seed="not in the seeds: kimik3's own rule: shipped profiles once carried such placeholders and validated",
    ),
    Rule(
        "image-by-digest",
        "refuse",
        "an image the engine pulls (vLLM, SGLang) is named by digest "
        "(repository[:tag]@sha256:…); a tag alone is refused by plan and apply (`kimik3 pin` writes its digest), and "
        "the pulled image's RepoDigests must hold the digest",
        "a tag moves under a deployment: two hosts, or one host before and after a re-pull, would run other bytes",
        ("kimik3_reconciler.model.image_ref", "kimik3_reconciler.steps.image_pull"),
        ("unit/steps/test_image_pull.py", "cases/plan/182-vllm-pull-digest-moved.yaml"),
        seed="seed 001 (vLLM's `vllm/vllm-openai:kimi-k3`, SGLang's image: pulled by tag there)",
    ),
    Rule(
        "unit-owned",
        "refuse",
        "systemd.unit is installed only where kimik3 can own it: systemd is PID 1, the "
        "name is not a template, and no package's, operator's or other profile's unit (or a masked one) is "
        "overwritten; docker.service and a docker CLI exist",
        "kimik3 never half-installs a unit or overwrites one it did not write",
        _UNITS,
        ("cases/plan/29-systemd-not-pid1.yaml", "unit/steps/test_systemd_unit.py"),
        seed="seed 000 step 7 (one static unit per deployment, installed by hand there; kimik3 installs it)",
    ),
    Rule(
        "numa-balancing",
        "refuse",
        "the host needs kernel.numa_balancing = 0 (with host.prepare kimik3 sets it: rule host-prepare)",
        "measured as a 20+-minute single-request stall; the host gate refuses before any step runs",
        ("kimik3_reconciler.planning.host_gate",),
        (
            "unit/planning/test_host_gate.py",
            "unit/orchestrator/test_orchestrator.py",
            "cases/plan/156-numa-balancing-on-without-prepare.yaml",
        ),
        seed="seed 000 step 5 (numa_balancing=0 and --load-mode none: required, not optional)",
    ),
    Rule(
        "host-prepare",
        "force",
        "with host: {prepare: true}, kimik3 persists kernel.numa_balancing = 0 in "
        "/etc/sysctl.d/90-kimik3.conf and loads it with systemd-sysctl, as the plan's first step (a NOOP once "
        "written and live); the host gate then does not refuse numa_balancing, the step sets it",
        "the seed's host prerequisite, converged like the server instead of set by hand; persisted, so a reboot "
        "keeps it; opt-in, because a kernel setting outlives the deployment and touches every process",
        ("kimik3_reconciler.planning.host_step",),
        (
            "cases/plan/152-host-prepare-sets-numa-balancing.yaml",
            "cases/plan/153-host-prepare-converged.yaml",
            "cases/plan/154-host-prepare-value-moved.yaml",
            "cases/plan/155-host-prepare-file-edited.yaml",
            "cases/plan/159-host-prepare-later-file-overrides.yaml",
            "unit/steps/test_host_prepare.py",
            "integration/test_host_prepare_systemd.py",
        ),
        seed="seed 000 step 5 (numa_balancing=0 and --load-mode none: required, not optional)",
    ),
    Rule(
        "nvidia-open-module",
        "refuse",
        "a requested Blackwell GPU (compute capability 10+) under the proprietary "
        "NVIDIA kernel module is refused; other GPUs under it are a plan warning",
        "seed 000's host needs the open kernel module and NVIDIA supports Blackwell only on it; kimik3 reads "
        "/proc/driver/nvidia/version and cannot switch modules, so it names the package",
        ("kimik3_reconciler.planning.host_gate",),
        (
            "cases/plan/157-proprietary-module-on-blackwell.yaml",
            "cases/plan/158-proprietary-module-on-h200.yaml",
            "unit/steps/test_host_prepare.py",
        ),
        seed="seed 000 Hardware target (Needs the NVIDIA driver (>=570, open kernel module))",
    ),
    Rule(
        "shared-gpus",
        "force",
        "a profile sharing GPUs (or the port) with a running one stops it first",
        "the standing and interactive deployments share the GPUs (systemd Conflicts=)",
        ("kimik3_reconciler.planning.conflict_step",),
        ("unit/planning/test_conflicts.py", "unit/orchestrator/test_orchestrator.py"),
        seed="seed 000 step 7 (the two units Conflicts= each other because they share the GPUs)",
    ),
    Rule(
        "env-file-bare-values",
        "force",
        "unit env files hold bare values, quoted where needed, never a comment",
        "systemd's EnvironmentFile folds an inline `# comment` into the value",
        _UNITS,
        ("unit/planning/test_rendered_units.py", "integration/test_systemd_live.py"),
        seed="seed 000 step 7 (keep /etc/kimi-k3.env values bare)",
    ),
    Rule(
        "units-conflict-ordered",
        "force",
        "units sharing GPUs (or the port) carry Conflicts= and After= each other",
        "starting one must stop the other first, or both hold the GPUs at once",
        _UNITS,
        (
            "cases/plan/25-systemd-unit-absent.yaml",
            "unit/steps/test_systemd_unit.py",
            "integration/test_systemd_live.py",
        ),
        seed="seed 000 step 7 (starting either stops the other)",
    ),
    Rule(
        "cache-dir-local",
        "warn",
        "model.cache_dir on a network filesystem (nfs, cifs, sshfs, ...), named with its type",
        "seed 001: NVMe rather than network-mounted, slow disks; seed 000: weights bind-mounted from local NVMe, "
        "and a cold load reads the whole quant (~17 min for 802 GB)",
        ("kimik3_reconciler.planning.host_gate",),
        ("cases/plan/54-cache-dir-on-nfs.yaml", "unit/observe/test_parsers.py", "integration/test_host_filesystem.py"),
        seed="seed 001 (NVMe rather than network-mounted disks); seed 000 (weights bind-mounted from local NVMe)",
    ),
    Rule(
        "driver-floor",
        "refuse",
        "the NVIDIA driver must be at least the minimum of the runtime base image's CUDA "
        "(NVIDIA's toolkit/driver table; seed 000's 570 when the version is unknown)",
        "seed 001: the CUDA 13 image needs driver R580+ (seed 000's >= 570 predates it); nvidia/cuda images refuse "
        "to start on an older driver",
        ("kimik3_reconciler.engines.llamacpp.host_findings",),
        (
            "cases/plan/55-driver-older-than-cuda13.yaml",
            "unit/planning/test_host_compat.py",
            "integration/test_base_image_cuda_docker.py",
        ),
        seed="seed 001 (driver R580+ for the CUDA 13 image; R575/CUDA 12.9 must upgrade); seed 000 step 1 (driver >= "
        "570)",
    ),
    Rule(
        "bind-address-local",
        "refuse",
        "serve.host and metrics.bind given as an IP must be an address of this host (a socket can bind it)",
        "another address passed the plan and failed the launch (couldn't bind) after the "
        "build and, on a real quant, the download",
        ("kimik3_reconciler.planning.host_gate",),
        ("unit/planning/test_host_gate.py",),
        seed="not in the seeds: shared/PROFILE.md (serve.host: loopback | tailscale | an IP on this host)",
    ),
    Rule(
        "bind-all-interfaces",
        "warn",
        "serve.host or metrics.bind 0.0.0.0 (or ::) is warned: it binds every interface",
        "the seed binds the tailnet address, or loopback only; every interface exposes the API to every network "
        "the host is on",
        profile_rules("listeners"),
        ("cases/profile/serve_host_all_interfaces_warns.yaml", "cases/profile/metrics_bind_all_interfaces_warns.yaml"),
        seed="seed 000 step 5 (--network host bound to the host's Tailscale IP, falls back to loopback-only)",
    ),
    Rule(
        "unit-conflicts-self",
        "refuse",
        "systemd.conflicts never lists the profile's own unit",
        "a unit that Conflicts= with itself stops itself when started",
        profile_rules("listeners"),
        ("cases/profile/systemd_conflicts_own_unit.yaml",),
        seed=f"{OWN}systemd's Conflicts= semantics (seed 000 step 7 uses it between the two units only)",
    ),
    Rule(
        "paths-literal",
        "refuse",
        "a host path in the profile (model.cache_dir, model.local_path, a local build.archive, "
        "build.patches, serve.api_key_file, a local spec_draft.model, rpc.workers[].tls_dir/cache_dir) does not "
        "start with '~' nor hold a $VARIABLE",
        "no shell reads a profile: `~/hub` was a folder named '~' beside the profile, where the model was downloaded",
        profile_rules("paths"),
        ("cases/profile/paths_shell_expansion.yaml",),
        seed=f"{OWN}shared/STYLE.md (never a shell string from profile fields)",
    ),
    Rule(
        "metrics-labels-no-secrets",
        "force",
        "the exporter's series carry profile, quant, build and fingerprint "
        "labels only: the API key (read from its file to scrape a keyed server) and the HF token reach no label, "
        "no metric and no exporter argv",
        "every scraper stores labels and every dashboard shows them",
        ("kimik3_reconciler.planning.metrics_step", "kimik3_reconciler.exporter.collect"),
        ("cases/plan/80-metrics-exporter-started.yaml", "unit/exporter/test_exporter_collect.py"),
        seed="not in the seeds: shared/PROFILE.md (a profile never contains a secret); issue 17",
    ),
    Rule(
        "metrics-ports-distinct",
        "refuse",
        "metrics.port, serve.port and (with the proxy) metrics.server_port "
        "are three different ports; server_port only with proxy: true",
        "two listeners on one port: the second fails to bind after the first is running",
        profile_rules("listeners"),
        ("cases/profile/metrics_port_is_serve_port.yaml",),
        seed="not in the seeds: issue 17 (the exporter and its proxy)",
    ),
    Rule(
        "hub-token-https",
        "force",
        "the HF token is sent only over https or to a loopback mirror; an http "
        "model.endpoint on another host is warned and gets no token",
        "a bearer token over plain http to another host travels in clear text",
        profile_rules("no_secrets") + _HUB,
        (
            "cases/profile/endpoint_http_remote_warns.yaml",
            "cases/profile/endpoint_http_loopback_ok.yaml",
            "unit/adapters/test_hub_token.py",
        ),
        seed="not in the seeds: issue 14 (seed 000 step 3 downloads from the hub; the token must not leak)",
    ),
    Rule(
        "verify-text",
        "check",
        "on real weights the text check fails unless the model says the asked-for word",
        "a broken kernel still talks, fluently and wrongly",
        _VERIFY,
        _VERIFY_CASES,
        seed="seed 000 step 6 (verify.sh: health, models, text, vision)",
    ),
    Rule(
        "verify-tool-call",
        "check",
        "on real weights the tool_call check fails unless the model calls "
        "get_weather with city Oslo (no call, another tool or another city fail)",
        "the vetted quants passed a tool-call verify end to end; an answer without the call is a broken deployment",
        _VERIFY,
        _VERIFY_CASES,
        seed="seed 000 step 2 (verified end-to-end with text+vision+tool-call verify.sh)",
    ),
    Rule(
        "tool-call-retry",
        "check",
        "an unparsed tool call (HTTP 500 from the parser, arguments that are not a JSON "
        "object, call markup left in content) is retried, 3 attempts at most, and counted in verify's report",
        "K3 occasionally emits a tool-call shape the parser does not expect; a model that never does fails",
        _VERIFY,
        _VERIFY_CASES,
        seed="seed 001 (tool-call shapes occasionally unparseable: validate and retry; monitor parse failures)",
    ),
    Rule(
        "verify-vision",
        "check",
        "on real weights with a projector, the vision check fails unless the model names "
        "the red probe image's colour (a shade of red: crimson, scarlet, maroon, reddish...) and no other colour",
        '"it answered" proves nothing about the vision tower',
        _VERIFY,
        _VERIFY_CASES,
        seed="seed 000 step 6 (vision-probe.py: a solid-colour probe image)",
    ),
    Rule(
        "verify-two-turn",
        "check",
        "the whole assistant message (reasoning_content, tool_calls) goes back; on real "
        "weights the server's rendered prompt must carry them and turn 2 must use the tool result",
        "K3 keeps its thinking across turns: a server that drops it answers turn 2 without it",
        _VERIFY,
        _VERIFY_CASES,
        seed="seed 001 (send back the whole previous assistant message, reasoning_content and tool_calls included)",
    ),
    Rule(
        "verify-thinking-budget",
        "check",
        "on real weights a reply cut at max_tokens with no content and no tool "
        "call is asked once more with 4096 tokens, then reported 'inconclusive (thinking used all N tokens)': never "
        "a failure, so never a revert",
        "K3 thinks before it answers: a budget spent thinking says nothing about the deployment, and reverting "
        "over it costs two full loads",
        _VERIFY,
        ("unit/verify/test_verify_stub_server.py",),
        seed=f"{OWN}the model's thinking (seed 001: reasoning_content) is not its answer; seed 000 step 5's "
        "~17-minute load makes a spurious revert expensive",
    ),
    Rule(
        "sglang-memory-ratio",
        "refuse",
        "engine: sglang needs sglang.mamba_full_memory_ratio, a number; a missing "
        "section or value, or seed 001's placeholder text, is refused naming the field",
        "the ratio depends on the workload's average input + output length (the cookbook's calculator): no default "
        "is right, and a placeholder copied from the guide fails at launch, after a multi-terabyte download",
        _SGLANG + ("kimik3_reconciler.model.profile_schema",),
        (
            "cases/profile/sglang_section_missing.yaml",
            "cases/profile/sglang_ratio_placeholder.yaml",
            "cases/profile/sglang_ratio_missing.yaml",
        ),
        seed=_SGLANG_SEED + ': "--mamba-full-memory-ratio <value-from-official-calculator>" ... '
        '"arbeidsbelastningsavhengig" (workload-dependent)',
    ),
    Rule(
        "sglang-owned-flags",
        "refuse",
        "serve.extra_args and serve.env never give an SGLang option kimik3 renders "
        "(--model-path, --port, --tp-size, --mamba-full-memory-ratio, --config, ...), and serve.api_key_file is "
        "refused for engine sglang",
        "argparse takes the last copy of a flag: the running server would not be the profile's; SGLang takes its API "
        "key only as --api-key on the command line, where docker inspect and ps show it",
        _SGLANG,
        ("cases/profile/sglang_owned_flags.yaml", "cases/profile/sglang_api_key_file.yaml"),
        seed=_SGLANG_SEED + "; the secrets rule (never in argv)",
    ),
    Rule(
        "sglang-topology",
        "refuse",
        "sglang.tp_size is at most the GPUs the profile lists and sglang.dcp_size "
        "divides it; engine sglang needs GPUs (gpus: none refused)",
        "one rank per GPU; SGLang asserts tp % dcp == 0 at start; its CPU path is a source build kimik3 does not make",
        _SGLANG,
        ("cases/profile/sglang_topology.yaml", "cases/profile/sglang_no_gpus.yaml"),
        seed=_SGLANG_SEED,
    ),
    Rule(
        "sglang-memory-ratio-workload",
        "warn",
        "sglang.mamba_full_memory_ratio without sglang.workload (the average "
        "request it was computed for) is warned, saying what the ratio splits and SGLang's own fallback",
        "the ratio is the workload's; profiles/sglang-tp8.yaml ships SGLang 0.5.23's fallback 0.9, which passed "
        "without a word (issue 38)",
        _SGLANG,
        ("cases/profile/sglang_ratio_without_workload_warns.yaml", "cases/profile/sglang_ratio_with_workload_ok.yaml"),
        seed=_SGLANG_SEED + ': "--mamba-full-memory-ratio er arbeidsbelastningsavhengig: beregn den ut fra '
        'gjennomsnittlig lengde på input pluss output"',
    ),
    Rule(
        "vllm-owned-flags",
        "refuse",
        "serve.extra_args and serve.env never give a vLLM option kimik3 renders "
        "(--model, --port, --tensor-parallel-size, VLLM_USE_V2_MODEL_RUNNER, ...): the profile's field does",
        "argparse takes the last copy of a flag: the running server would not be the profile's, and the plan would "
        "not see it",
        _VLLM,
        (
            "cases/profile/vllm_owned_flags.yaml",
            "cases/profile/vllm_api_key_file.yaml",
            "cases/profile/cluster_owned_flags.yaml",
        ),
        seed="seed 001 (the vLLM TP8 recipe's flags are the vllm section's fields)",
    ),
    Rule(
        "engine-host-needs",
        "refuse",
        "an engine that holds the whole checkpoint in VRAM (vllm) gets its image's "
        "driver floor (R580+ for the CUDA 13 image), tensor_parallel_size GPUs of the recipe's kinds (B300/GB300, or "
        "vllm.any_gpu: true) and a checkpoint whose safetensors fit gpu_memory_utilization of their VRAM (warned "
        "when under 10 % is left for the KV cache)",
        "found after a multi-terabyte download and a long load otherwise: the container refuses the driver, the "
        "ranks find no GPU, or the weights do not fit",
        ("kimik3_reconciler.planning.host_gate",),
        ("unit/engines/test_vllm_host_gate.py",),
        seed="seed 001 (vLLM: at least 8x GB300, R580+ for the CUDA 13 image; the day-0 guide's 8x B300)",
    ),
    Rule(
        "vllm-tensor-parallel",
        "refuse",
        "vllm.tensor_parallel_size is at most the GPUs the profile lists; with "
        "gpus: none a GPU attention backend is warned about",
        "vLLM puts one tensor-parallel rank on each GPU: more ranks than GPUs never start",
        _VLLM,
        ("cases/profile/vllm_tensor_parallel_gpus.yaml", "cases/profile/vllm_cpu_backend_warns.yaml"),
        seed="seed 001 (TP8 on 8 GPUs)",
    ),
    Rule(
        "cluster-bind-private",
        "refuse",
        "vllm.cluster / sglang.cluster addresses (the head's bind and each node's) are loopback, RFC 1918 or a tailnet "
        "address; never every interface; a public one only with cluster.allow_public: true",
        "Ray's head and raylets and torch.distributed's rendezvous have no authentication: whoever reaches their "
        "ports runs code on every node",
        profile_rules("cluster"),
        ("cases/profile/cluster_public_bind.yaml", "cases/profile/cluster_public_bind_allowed.yaml"),
        seed=OWN + "issue 41 (a replica over several hosts; the rpc-bind-private rule's twin)",
    ),
    Rule(
        "cluster-hosts-once",
        "refuse",
        "each host of a cluster is listed once (by its address, its Docker URL's host and its name; the head's bind "
        "is no node's); a tcp:// Docker needs tls_dir",
        "one host twice runs two members on one address and counts its GPUs twice",
        profile_rules("cluster"),
        ("cases/profile/cluster_host_twice.yaml",),
        seed=OWN + "issue 41",
    ),
    Rule(
        "vllm-ray-port",
        "refuse",
        "vllm.cluster.port is none of Ray's own default ports (its client server's 10001, its workers' 10002-19999)",
        "Ray's head refuses a GCS port among them at start ('trying to use a port number that is used by other "
        "components'), after every node pulled the image",
        _VLLM,
        ("cases/profile/cluster_ray_port_in_worker_range.yaml",),
        seed=OWN + "issue 41 item 4 (found by the cluster test: Ray 2.60 refused port 19492)",
    ),
    Rule(
        "cluster-member-lost-restarts-replica",
        "force",
        "a vllm.cluster / sglang.cluster member lost (its container gone, exited, changed, or, for vLLM, its address "
        "without a live raylet in Ray's node table read through the head) replaces the head's container (Ray's head "
        "and the server) besides relaunching the member",
        "vLLM's Ray executor does not survive a lost actor, nor SGLang's ranks a lost peer: the head's server keeps "
        "answering /health for a while, serving nothing",
        ("kimik3_reconciler.planning.container_step",),
        (
            "cases/plan/212-vllm-cluster-member-killed.yaml",
            "cases/plan/213-vllm-cluster-member-not-in-ray.yaml",
            "cases/plan/216-sglang-cluster-member-killed.yaml",
        ),
        seed=OWN + "issue 41 item 4 (recreate the replica when a member dies)",
    ),
    Rule(
        "cluster-head-relaunch-takes-nodes",
        "force",
        "a head's container that is launched again (any cause) relaunches every node's member after it",
        "the head's Ray (or SGLang's rendezvous) is a new cluster: a member of the old one never serves it",
        ("kimik3_reconciler.planning.cluster_step",),
        ("cases/plan/214-vllm-cluster-head-relaunched.yaml",),
        seed=OWN + "issue 41 item 4 (the replica is converged as one unit)",
    ),
    Rule(
        "cluster-removed-node-removed",
        "force",
        "a node's member an apply launched (state record cluster-members/<profile>.json) that the profile no longer "
        "names (dropped from the cluster's nodes, or the cluster gone) is removed after the health wait, by apply and "
        "by destroy; when its Docker cannot be reached the plan refuses, naming the node and the hand clean-up",
        "a member left running keeps its Ray worker (or SGLang rank) on that host, rejoining the head's address at "
        "every restart, its GPUs held",
        ("kimik3_reconciler.planning.cluster_step",),
        (
            "cases/plan/217-vllm-cluster-node-dropped.yaml",
            "cases/plan/218-vllm-cluster-dropped-node-unreachable.yaml",
        ),
        seed=OWN + "issue 41 item 4 (a dropped node, as issue 18's dropped RPC worker)",
    ),
    Rule(
        "cluster-node-checkpoint",
        "refuse",
        "before a node's member is launched, a short-lived container of the profile's image on that node lists the "
        "checkpoint at the head's path (model.cache_dir mounted at the same path): a file absent or of another size "
        "than the head verified stops the apply, naming the node, the field and the files, before the head is touched",
        "vLLM and SGLang load the weights from the same local path on every node: a node without them fails its "
        "ranks' load minutes into the head's",
        ("kimik3_reconciler.planning.cluster_step", "kimik3_reconciler.steps.cluster"),
        ("cases/plan/210-vllm-cluster-fresh.yaml", "unit/steps/test_cluster_steps.py"),
        seed=OWN + "issue 41 item 4 (vLLM's multi-node guide: the model at the same path on every node)",
    ),
    Rule(
        "cluster-node-gpu-plumbing",
        "refuse",
        "a cluster node that gets GPUs has, in its Docker's `docker info`, what one way of asking for them needs: the "
        "nvidia runtime for `--gpus`; CDI read, and each requested nvidia.com/gpu device where the daemon lists its "
        "devices, for CDI. Its member asks the head's way where the node gives it, else the other way where the node "
        "lists it; a node that gives neither is refused where its member is launched and none runs there, naming its docker field and what "
        "each way lacks, before anything changes",
        "a node whose Docker cannot give its member the GPUs fails that member's `docker run` after the head's server "
        "was replaced: the replica is down until the node is fixed",
        ("kimik3_reconciler.planning.cluster_step", "kimik3_reconciler.planning.node_gpus"),
        (
            "cases/plan/219-vllm-cluster-node-no-gpu-runtime.yaml",
            "cases/plan/220-vllm-cluster-node-no-cdi-device.yaml",
            "cases/plan/222-vllm-cluster-node-gpus-its-own-way.yaml",
            "cases/plan/223-vllm-cluster-converged-node-plumbing-unseen.yaml",
            "cases/plan/224-vllm-cluster-head-relaunched-node-plumbing-unseen.yaml",
            "unit/planning/test_node_gpus.py",
        ),
        seed=OWN + "issue 41 item 4 (a node's container copies the head's GPU request)",
    ),
    Rule(
        "cluster-ranks",
        "refuse",
        "the tensor- times pipeline-parallel size of a cluster is a multiple of its nodes (the head and "
        "cluster.nodes), and each node lists at least its share of GPUs; a pipeline size in serve.extra_args beside "
        "the pipeline field or a cluster is refused",
        "Ray's placement and SGLang's --nnodes give each node the same number of ranks, one GPU each: a remainder "
        "is found at start, after every node pulled the image",
        profile_rules("cluster"),
        (
            "cases/profile/cluster_ranks_not_multiple.yaml",
            "cases/profile/cluster_node_gpus_short.yaml",
            "cases/profile/cluster_owned_flags.yaml",
        ),
        seed="seed 001 (multi-node infrastructure for production load); vLLM's and SGLang's multi-node guides",
    ),
    Rule(
        "tensor-parallel-heads",
        "refuse",
        "vllm.tensor_parallel_size / sglang.tp_size divides the checkpoint's "
        "attention heads (num_attention_heads in its config.json at the pinned revision, read before any pull)",
        "every rank takes an equal share of the heads: vLLM refuses another size at start, after the image pull and "
        "the checkpoint's download (issue 38)",
        ("kimik3_reconciler.planning.tensor_parallel",),
        ("unit/planning/test_tensor_parallel.py", "integration/test_vllm_inputs_plan.py"),
        seed="seed 001 (TP8 on 8 GPUs); vLLM's ModelConfig.verify_with_parallel_config",
    ),
    Rule(
        "tensor-parallel-idle-gpus",
        "warn",
        "a tensor-parallel size below the GPUs the container gets (the gpus "
        "list, or the host's with gpus: all) is warned, unless serve.extra_args sets a pipeline- or data-parallel "
        "size",
        "the engine uses as many GPUs as ranks; the rest are held from other jobs and idle (issue 38)",
        ("kimik3_reconciler.planning.tensor_parallel",),
        ("unit/planning/test_tensor_parallel.py",),
        seed="seed 001 (TP8 on 8 GPUs)",
    ),
)

RULES: tuple[Rule, ...] = _GENERIC + tuple(
    rule for entry in ENGINES.values() if entry.rulebook for rule in import_module(entry.rulebook).RULEBOOK
)
BY_ID = {rule.id: rule for rule in RULES}
