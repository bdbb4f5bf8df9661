"""The profile as kimik3 plans with it: frozen values (model/frozen.py) of a validated profile, and what they
compute from their fields (effective batch and fit target, the source pin, the ports the profile binds).

Their fields are model/profile_schema.py's (the pydantic models of shared/PROFILE.md, in the same order and
under the same names): `parse_profile` validates the text there, `to_tree` turns the result into plain data,
and `from_tree` builds these values from it, whether the data comes from that validation or from the
profile cache (cli/profile_cache.py). One way in, so a cached profile plans exactly as a validated one; a
no-op plan never imports pydantic.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.frozen import Frozen
from kimik3_reconciler.model.pins import SourcePin


class Section(Frozen):
    """A validated section of a profile: the fields of model/profile_schema.py's class of the same name."""

    _open = True


class TokenizerSpec(Section):
    """Non-weight files (tokenizer/config) of the original repo, for benchmark clients (seed 000 step 3)."""


class ModelSpec(Section):
    """Which model to serve: repo@revision, and for llama.cpp the GGUF quant folder; from the HF hub cache."""


class BaseImages(Section):
    """The build and runtime base images of the llama.cpp image."""


@functools.cache  # asked several times a plan (the image's tag and labels, the exporter's build label)
def _pin(source: str) -> SourcePin:
    """The pin of `source` in the building engine's table (the registry's `pins`), imported when first asked: the
    table is the engine's, and model/ sits below engines/."""
    from kimik3_reconciler.model.engine_names import builder

    pin: SourcePin = importlib.import_module(builder().pins).pin_for(source)
    return pin


class BuildSpec(Section):
    """How the llama.cpp image is built: source pin, kernels, patches (all part of its fingerprint)."""

    @property
    def pin(self) -> SourcePin:
        """The pin of `source`: the building engine's pin table (the registry's `pins`), loaded when first asked."""
        return _pin(self.source)

    @property
    def effective_commit(self) -> str:
        """The commit to build: `commit`, else the pin of `source`."""
        return self.commit or self.pin.commit

    @property
    def effective_build_number(self) -> int:
        """`build_number`, else the pin's when building the pinned commit, else 0 (llama.cpp's "unknown")."""
        if self.build_number is not None:
            return self.build_number
        return self.pin.build_number if self.effective_commit == self.pin.commit else 0


class SpecDraft(Section):
    """A speculative-decoding draft model (seed 000: DSpark, on the GPU holding output.weight)."""


class ServeSpec(Section):
    """How llama-server runs: address, batching, placement, slots; fixed flags are not here."""


class QuantGate(Section):
    """The PPL/KLD gate a quant passes before it is first served (seed 000 "Quant gate")."""


class GateSpec(Section):
    """Checks an image or a quant must pass before kimik3 serves it."""


class SystemdSpec(Section):
    """Optional productionization as a systemd unit (seed 000 step 7)."""


class RpcWorker(Section):
    """One host running rpc-server (llama.cpp's RPC backend) for the main server (issue 18)."""

    def container_name(self, profile_name: str) -> str:
        """The worker's rpc-server container on its host."""
        return f"{profile_name}-rpc-{self.name}"


class RpcSpec(Section):
    """Workers whose devices llama-server uses through --rpc (llama.cpp's RPC backend)."""


class HandoverSpec(Section):
    """Drain, hold and hand over while kimik3 replaces the server (issue 29)."""


class MetricsSpec(Section):
    """The exporter kimik3 runs next to the server (issue 17): one Prometheus port for the whole deployment."""


class HostSpec(Section):
    """Host preparation (issue 27 item 5): what seed 000 requires of the kernel, set and persisted by kimik3."""


class ImageSpec(Section):
    """The serving image, pulled by digest (vllm, sglang); llama.cpp's is built (`build:`)."""

    @property
    def digest(self) -> str:
        """`sha256:<64 hex>`: what is pulled and run."""
        return self.ref.rsplit("@", 1)[1]


class ClusterNode(Section):
    """One more host of a replica that spans hosts (vllm.cluster, sglang.cluster)."""

    def container_name(self, profile_name: str) -> str:
        """The node's member container on its host."""
        return f"{profile_name}-node-{self.name}"


class ClusterSpec(Section):
    """A replica over several hosts: this host is the head (rank 0), `nodes` the others in rank order."""

    @property
    def size(self) -> int:
        """The hosts of the replica, the head included."""
        return 1 + len(self.nodes)


class VllmSpec(Section):
    """vLLM's own knobs (engine: vllm). The defaults are seed 001's TP8 recipe (profiles/vllm-tp8.yaml)."""


class SglangWorkload(Section):
    """The average request sglang.mamba_full_memory_ratio was computed for."""


class SglangSpec(Section):
    """SGLang's own knobs (engine: sglang): seed 001's TP8/DCP8 recipe on 8x B300."""


class Profile(Section):
    """What should be running on one host: one YAML file, validated, planned and converged."""

    @property
    def workers(self) -> tuple[RpcWorker, ...]:
        """The RPC workers, in the order llama-server gets them (--rpc); none without `rpc:`."""
        return tuple(self.rpc.workers) if self.rpc is not None else ()

    @property
    def cluster(self) -> ClusterSpec | None:
        """The replica's other hosts (vllm.cluster / sglang.cluster: the engine's own section); None: this host only."""
        return getattr(getattr(self, self.engine, None), "cluster", None)

    @property
    def quant_info(self) -> catalog.QuantInfo | None:
        return catalog.lookup(self.model.quant)

    @property
    def quant_mode(self) -> catalog.QuantMode:
        """hybrid or all-vram, from the catalog; an unknown quant counts as hybrid."""
        return catalog.quant_mode(self.model.quant)

    # The effective launch values follow the mode: the catalog's by default; a planner that derived the
    # mode from the host's GPUs passes its own to the *_for methods (batch sizes: engines/llamacpp/sizing.py).
    def fit_target_for(self, mode: catalog.QuantMode) -> int | list[int]:
        """serve.fit_target, else the quant's margin in `mode` (catalog.fit_margin)."""
        if self.serve.fit_target is not None:
            return self.serve.fit_target
        # rule: fit-target-default
        # Seed 000: all-VRAM needs 6144 (step 5) but REAP770 spills at 6144 and runs at 4096 (step 2).
        return catalog.fit_margin(self.model.quant, mode).default

    def ctx_size_for(self, trained: int | None = None) -> int:
        """The total context llama-server gets (-c): serve.ctx_size, else seed 001's 131,072 per request times
        serve.parallel, each slot capped at `trained` (the GGUF's context_length when read, else Kimi-K3's)."""
        if self.serve.ctx_size is not None:
            return self.serve.ctx_size
        # rule: ctx-size-default
        # Seed 001's 131072 is per request (vLLM's --max-model-len); llama-server splits -c over the slots.
        return min(catalog.REQUEST_CONTEXT, trained or catalog.CONTEXT_LENGTH) * self.serve.parallel

    def slot_context(self, trained: int | None = None) -> int:
        """Tokens each request gets: the total over serve.parallel slots (llama-server without --kv-unified)."""
        return self.ctx_size_for(trained) // self.serve.parallel

    @property
    def effective_fit_target(self) -> int | list[int]:
        return self.fit_target_for(self.quant_mode)

    @property
    def gpu_count(self) -> int | None:
        """GPUs this profile claims: 0 for none, len(list), None for all (only the host knows)."""
        if self.gpus == "none":
            return 0
        return None if self.gpus == "all" else len(self.gpus)

    @property
    def vision(self) -> bool:
        """True when the server gets --mmproj: a projector on a fork build (mainline has no vision)."""
        return self.model.mmproj is not None and self.build.source == "fork"

    @property
    def unit_name(self) -> str | None:
        """The systemd unit (without .service), or None when the profile has no `systemd:`."""
        if self.systemd is None:
            return None
        return self.systemd.unit or self.name


SECTIONS: dict[str, type[Section]] = {
    cls.__name__: cls
    for cls in (
        TokenizerSpec,
        ModelSpec,
        BaseImages,
        BuildSpec,
        SpecDraft,
        ServeSpec,
        QuantGate,
        GateSpec,
        SystemdSpec,
        RpcWorker,
        RpcSpec,
        HandoverSpec,
        MetricsSpec,
        HostSpec,
        ImageSpec,
        ClusterNode,
        ClusterSpec,
        VllmSpec,
        SglangWorkload,
        SglangSpec,
        Profile,
    )
}


def from_tree(tree: Any) -> Any:
    """The values of `profile_schema.to_tree`'s data: a tagged model becomes its section's value (a KeyError
    for a class this kimik3 does not know), lists and mappings stay lists and mappings."""
    if isinstance(tree, dict):
        if "@model" in tree:
            section = SECTIONS[tree["@model"]]
            return section(**{name: from_tree(value) for name, value in tree["fields"].items()})
        return {key: from_tree(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [from_tree(item) for item in tree]
    return tree


def handover(profile: Profile) -> HandoverSpec | None:
    """metrics.handover (issue 29): the front holds serve.port across replacements; None when the profile does not
    ask for it."""
    return profile.metrics.handover if profile.metrics is not None and profile.metrics.proxy else None


def upstream_port(profile: Profile) -> int | None:
    """With metrics.proxy, the loopback port llama-server moves to (the proxy takes serve.port); else None."""
    metrics = profile.metrics
    if metrics is None or not metrics.proxy:
        return None
    if metrics.server_port is not None:
        return metrics.server_port
    port = profile.serve.port
    return port + 10000 if port + 10000 <= 65535 else port - 10000


def bind_addresses(profile: Profile) -> tuple[tuple[tuple[str, str], str], ...]:
    """((field, address), ...): the IP literals this host's listeners bind (serve.host, metrics.bind), the wildcard
    excepted (it is every address); loopback/tailscale are resolved by kimik3 itself."""
    import ipaddress  # here: a no-op plan of a loopback profile never needs it

    written = [(("serve", "host"), profile.serve.host)]
    if profile.metrics is not None:
        written.append((("metrics", "bind"), profile.metrics.bind))
    return tuple(
        (field, address)
        for field, address in written
        if address not in ("loopback", "tailscale") and not ipaddress.ip_address(address).is_unspecified
    )


def listened_ports(profile: Profile) -> tuple[int, ...]:
    """The TCP ports this profile's processes bind: serve.port, and with `metrics:` the exporter's port and, with
    its proxy, llama-server's inner port. The host gate refuses a foreign process on any of them."""
    ports = [profile.serve.port]
    if profile.metrics is not None:
        ports.append(profile.metrics.port)
        inner = upstream_port(profile)
        if inner is not None:
            ports.append(inner)
    return tuple(dict.fromkeys(ports))


def node_gpus_of(profile: Profile, node: Any) -> str | tuple[str, ...]:
    """The GPUs a cluster node's member container gets (`node`: one of `profile.cluster.nodes`): its own `gpus`,
    none where the profile's own container gets none (`gpus: none`, vLLM's CPU build: the image every node runs)."""
    # A node's `gpus` defaults to all: a CPU profile's member asked for GPUs its image never uses, through a runtime
    # a CPU host lacks (its `docker run` failed, and the node's GPU plumbing check refused it).
    if gpus_of(profile) == "none" or node.gpus == "none":
        return "none"
    return "all" if node.gpus == "all" else tuple(str(g) for g in node.gpus)


def gpus_of(profile: Profile) -> str | tuple[str, ...]:
    """The GPUs a container of this profile gets, as docker device ids."""
    if profile.build.variant == "cpu" or profile.gpus == "none":
        return "none"
    if profile.gpus == "all":
        return "all"
    return tuple(str(g) for g in profile.gpus)
