"""The profile's schema: pydantic v2 models of shared/PROFILE.md (per-field checks, no I/O).

Only validation uses them (model/profile_source.py, once per profile text: cli/profile_cache.py keeps the
result) and `kimik3 schema`; kimik3 plans with model/profile.py's values, rebuilt from `to_tree` of a
validated profile, so a no-op plan never imports pydantic. What a profile computes from its fields (effective
batch, pins, ports) is there, not here."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal, Union, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.builtin_patches import BUILTIN_PATCH_NAMES
from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE, ENGINES, engine_sections, own_fields

SHA40 = r"[0-9a-f]{40}"
GPU_UUID = r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# The JSON Schema says what validate says of one field on its own (tests/unit/model/test_schema_agrees.py): an editor that
# accepted `host: localhost` or `unit: kimi-k3.service` sent the user to CI to learn it. These are the schema forms of
# the per-field checks below that are Python code (the patterns are ECMA-262 and Python `re` alike).
_IPV4 = r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV6 = r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?::[0-9.]+)?(?:%[A-Za-z0-9_.-]+)?"  # loose: ipaddress decides
# An IPv4-mapped literal (refused: _refuse_mapped), or a second '::' / ':::' (not an address: _IPV6 is loose).
_NOT_IPV6 = {"anyOf": [{"pattern": r"^(?:0{0,4}:){0,5}:?[fF]{4}:"}, {"pattern": ":::|::.*::"}]}
_NOT_EXPANDED = {"not": {"pattern": r"^~|\$\{?[A-Za-z_]"}}  # rule paths-literal (model/profile_rules/paths.py)
IPV4_SCHEMA = {"type": "string", "pattern": f"^{_IPV4}$"}  # rpc.workers[].bind: rpc-server listens on IPv4 only
HOST_SCHEMA = {
    "type": "string",
    "anyOf": [{"enum": ["loopback", "tailscale"]}, {"pattern": f"^{_IPV4}$"}, {"pattern": f"^{_IPV6}$"}],
    "not": _NOT_IPV6,
}
PATH_SCHEMA = {"type": "string", "minLength": 1, **_NOT_EXPANDED}
ABSOLUTE_SCHEMA = {"type": "string", "pattern": "^/", **_NOT_EXPANDED}
UNIT_SCHEMA = {
    "type": "string",
    "pattern": r"^(?=.{1,64}$)(?!.*\.service$)[A-Za-z0-9][A-Za-z0-9_.-]*(?:@[A-Za-z0-9_.-]+)?$",
}
CpuFeature = Literal["avx512", "avx512_vbmi", "avx512_vnni", "avx512_bf16", "amx"]


def _engine_name(value: Any) -> Any:
    from kimik3_reconciler.model.engine_names import NOT_ENGINES

    if isinstance(value, str) and value in NOT_ENGINES:
        # rule: engine-not-offered
        # A name people use for a route kimik3 deliberately does not deploy: say why and what to write instead, not
        # only the list of choices.
        raise refuse(f"{value!r} {NOT_ENGINES[value]}")
    if not isinstance(value, str) or value not in ENGINES:
        # The registry's names, read when a profile is validated (an engine registered since import counts), said
        # as a Literal of them would say it.
        names = [repr(name) for name in ENGINES]
        expected = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
    return value


def _engine_choices(schema: dict[str, Any]) -> None:
    schema["enum"] = list(ENGINES)


EngineName = Annotated[str, BeforeValidator(_engine_name), WithJsonSchema({"type": "string"})]
CPU_FEATURES: tuple[str, ...] = get_args(CpuFeature)

# strict: YAML `port: "8080"` is a mistake worth naming, not something to coerce.
_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True)


def refuse(message: str) -> PydanticCustomError:
    """A validation error whose message is shown to the user as written."""
    return PydanticCustomError("kimik3", "{reason}", {"reason": message})


def _matching(pattern: str, message: str) -> Any:
    """A `str` type that must fully match `pattern` (shown in the JSON Schema), else `message`."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise refuse(message)
        return value

    return Annotated[str, AfterValidator(check), WithJsonSchema({"type": "string", "pattern": f"^(?:{pattern})$"})]


def _check_sha40(value: str) -> str:
    # Seed 000: pin a commit, not a moving latest; the Hub treats a short sha as a branch name.
    if re.fullmatch(SHA40, value):
        return value
    if re.fullmatch(r"[0-9a-fA-F]{40}", value):
        raise refuse("a commit sha is 40 *lowercase* hex characters; write it in lowercase")
    if re.fullmatch(r"[0-9a-fA-F]{4,39}", value):
        raise refuse(f"a short sha ({len(value)} characters) is ambiguous: write the full 40-hex commit")
    raise refuse("must be a full 40-hex commit sha; branch and tag names move, so they are refused")


# A branch or tag the hub resolves (`kimik3 pin` writes its commit): git's ref-name shape, never all hex nor 40 letters
# and digits (a sha, short or mistyped: the hub would take a short one as a branch name).
REF_NAME = (
    r"(?![0-9a-fA-F]{4,}$)(?![0-9A-Za-z]{40}$)(?!.*\.\.)(?!.*//)(?!.*/$)(?!.*\.lock$)[A-Za-z0-9][A-Za-z0-9._/-]{0,99}"
)


def _check_revision(value: str) -> str:
    # A commit is what is served; a branch or tag is accepted here and refused by plan and apply until `kimik3 pin`
    # resolves it (model/pinning.py): the profile records the name a person chose, the lock its commit.
    if re.fullmatch(REF_NAME, value):
        return value
    try:
        return _check_sha40(value)
    except PydanticCustomError:
        if re.fullmatch(r"[0-9a-fA-F]+", value):
            raise
    raise refuse(
        "must be a full 40-hex commit sha, or a branch or tag name (letters, digits, '.', '_', '-', '/') "
        "that `kimik3 pin` resolves to its commit"
    )


def _check_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise refuse("must be an http:// or https:// URL, e.g. https://huggingface.co")
    return value


def _refuse_mapped(value: str) -> str:
    """An IPv4-mapped IPv6 literal (::ffff:a.b.c.d) is refused: every bind rule reads the address as written, and
    `::ffff:0.0.0.0` is not `is_unspecified` nor `::ffff:127.0.0.1` `is_loopback` to Python, while a dual-stack
    socket bound to them listens on every IPv4 interface / on loopback."""
    mapped = ipaddress.ip_address(value)
    if mapped.version == 6 and mapped.ipv4_mapped is not None:
        raise refuse(
            f"{value} is an IPv4-mapped IPv6 address: write the IPv4 address {mapped.ipv4_mapped} (the "
            "mapped form of 0.0.0.0 binds every interface without being seen as the wildcard)"
        )
    return value


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address literal `text` is, or None (a name, or not an address)."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _check_host(value: str) -> str:
    if value in ("loopback", "tailscale"):
        return value
    if _ip(value) is None:
        hint = " (write 'loopback')" if value == "localhost" else ""
        raise refuse(f"must be 'loopback', 'tailscale' or an IP address literal{hint}")
    return _refuse_mapped(value)


def _check_unit(value: str) -> str:
    if value.endswith(".service"):
        raise refuse("write the unit name without '.service'")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}", value):
        raise refuse("must be a systemd unit name: letters, digits, '-', '_', '.', '@'")
    if value.endswith("@") or value.count("@") > 1:
        # 'name@' is a template (systemctl cannot start it without an instance: 'name@instance'), and systemd
        # allows one '@': the unit file would be written and then refused at `systemctl enable`.
        raise refuse(
            "a template name ('name@') or a second '@' is not a unit systemd can start: write 'name' or 'name@instance'"
        )
    return value


def _check_gpus(value: Any) -> Any:
    if value in ("all", "none"):
        return value
    if isinstance(value, list) and value:
        for item in value:
            is_index = type(item) is int and item >= 0
            if not (is_index or (isinstance(item, str) and re.fullmatch(GPU_UUID, item))):
                raise refuse(f"{item!r} is neither a GPU index (0, 1, ...) nor a GPU UUID (GPU-xxxxxxxx-...)")
        for item in value:
            if isinstance(item, str) and item[4:] != item[4:].lower():
                # GPU-AB… and GPU-ab… are one GPU; Docker gets the UUID as written and NVML reports lowercase.
                raise refuse(f"{item!r}: write the UUID in lowercase, as `nvidia-smi -L` prints it")
        if len(set(value)) != len(value):
            raise refuse("lists a GPU twice")
        return value
    if value == []:
        raise refuse("an empty list selects no GPU: write 'none' (CPU variant) or list the GPUs")
    raise refuse("must be 'all', 'none' or a list of GPU indices/UUIDs, e.g. [0, 1, 2, 3]")


def _check_fit_target(value: Any) -> Any:
    def is_mib(item: Any) -> bool:
        return type(item) is int and 0 <= item <= INT32_MAX

    if is_mib(value) or (isinstance(value, list) and value and all(is_mib(v) for v in value)):
        return value
    raise refuse(
        f"must be a margin in MiB (an integer >= 0, at most {INT32_MAX}) or a non-empty list of them, one per GPU"
    )


def _check_cpu_features(value: Any) -> Any:
    if value == "auto":
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        unknown = [v for v in value if v not in CPU_FEATURES]
        if unknown:
            raise refuse(f"unknown CPU feature {unknown[0]!r}; known: {', '.join(CPU_FEATURES)}")
        if len(set(value)) != len(value):
            raise refuse("lists a feature twice")
        return value
    raise refuse(f"must be 'auto' or a list from: {', '.join(CPU_FEATURES)}")


Sha40 = Annotated[str, AfterValidator(_check_sha40), WithJsonSchema({"type": "string", "pattern": f"^{SHA40}$"})]
Sha256 = _matching(r"[0-9a-f]{64}", "must be a sha256: 64 lowercase hex characters")
HubRevision = Annotated[
    str, AfterValidator(_check_revision), WithJsonSchema({"type": "string", "pattern": f"^(?:{SHA40}|{REF_NAME})$"})
]
PROFILE_NAME = r"[a-z0-9][a-z0-9-]{0,62}"
ProfileName = _matching(
    PROFILE_NAME,
    "must be 1-63 characters of a-z, 0-9 and '-', not starting with '-' (it names the container and unit)",
)
RepoId = _matching(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*", "must be a Hub repo id 'org/name'")
QuantName = _matching(r"[A-Za-z0-9][A-Za-z0-9._-]*", "must be a quant folder of the repo, e.g. UD-Q2_K_XL")
CudaArch = _matching(
    r"[0-9]{2,3}[a-z]?(-real|-virtual)?",
    'must be a CUDA architecture like "120", "90" or "120a-real" (quote it: a string)',
)
EnvName = _matching(r"[A-Za-z_][A-Za-z0-9_]*", "must be an environment variable name (letters, digits, '_')")
# Docker's reference grammar (distribution/reference): [domain[:port]/]path[/path...][:tag][@sha256:digest]. The
# build passes it as FROM; anything else reached Docker and came back as a 400 (exit 1) after the plan said ok.
_DOMAIN_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
IMAGE_REF = (
    rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
ImageRef = _matching(
    IMAGE_REF,
    "must be an image reference like nvidia/cuda:13.0.0-devel-ubuntu24.04, pinned or not by "
    "digest (nvidia/cuda:13.0.0-devel-ubuntu24.04@sha256:<64 hex>)",
)
DraftDevice = _matching(r"auto|CUDA[0-9]+", "must be 'auto' or a CUDA device like CUDA7")
NonEmpty = Annotated[str, Field(min_length=1)]
HttpUrl = Annotated[
    str, AfterValidator(_check_url), WithJsonSchema({"type": "string", "pattern": "^[hH][tT][tT][pP][sS]?://[^/?#]"})
]
HostPath = Annotated[NonEmpty, WithJsonSchema(PATH_SCHEMA)]
UnitName = Annotated[str, AfterValidator(_check_unit), WithJsonSchema(UNIT_SCHEMA)]
# llama-server and rpc-server parse their numbers into 32-bit ints: a larger value is refused here, not at launch.
INT32_MAX = 2**31 - 1
MiB = Annotated[int, Field(ge=0, le=INT32_MAX)]
Count = Annotated[int, Field(ge=1, le=INT32_MAX)]
GpuRef = Union[  # noqa: UP007 - a type alias of Annotated members: JSON Schema and messages unchanged this way
    Annotated[int, Field(ge=0)],
    Annotated[
        str,
        Field(pattern=f"^{GPU_UUID}$"),
        WithJsonSchema(
            # lowercase only, as _check_gpus requires (NVML reports lowercase; Docker gets the UUID as written)
            {"type": "string", "pattern": "^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"}
        ),
    ],
]
GpuList = Annotated[list[GpuRef], Field(min_length=1, json_schema_extra={"uniqueItems": True})]


def _check_repo_file(value: str) -> str:
    # It names a file in the repo and becomes a cache/state path: no absolute paths, no `..`.
    if value.startswith("/") or ".." in value.split("/") or "\\" in value:
        raise refuse(f"must be a file path inside the repo, not {value!r}")
    return value


RepoFilePath = Annotated[
    NonEmpty,
    AfterValidator(_check_repo_file),
    WithJsonSchema({"type": "string", "minLength": 1, "not": {"pattern": r"^/|\\|(?:^|/)\.\.(?:/|$)"}}),
]


class TokenizerSpec(BaseModel):
    """Non-weight files (tokenizer/config) of the original repo, for benchmark clients (seed 000 step 3)."""

    model_config = _CONFIG
    repo: RepoId
    revision: HubRevision


class ModelSpec(BaseModel):
    """Which model to serve: repo@revision, and for llama.cpp the GGUF quant folder; from the HF hub cache."""

    model_config = _CONFIG
    repo: RepoId
    revision: HubRevision
    quant: QuantName | None = Field(
        None,
        description="llamacpp (required there): the GGUF quant folder; vllm and "
        "sglang serve the repo's safetensors checkpoint (refused)",
    )
    mmproj: RepoFilePath | None = Field(None, description="vision projector file in the repo; fork builds only")
    tokenizer: TokenizerSpec | None = None
    cache_dir: HostPath | None = Field(None, description="HF hub cache; default: huggingface_hub's own")
    endpoint: HttpUrl | None = Field(None, description="hub URL (a mirror); default: HF_ENDPOINT or the Hub")
    local_path: HostPath | None = Field(
        None,
        description="a GGUF made or converted on this host: one .gguf file, or a folder of one quant's shards; "
        "served from there (verified by the sha256 manifest kimik3 records, mounted read-only) "
        "instead of the hub's quant folder",
    )


class BaseImages(BaseModel):
    """The build and runtime base images of the llama.cpp image."""

    model_config = _CONFIG
    build: ImageRef = "nvidia/cuda:13.0.0-devel-ubuntu24.04"
    runtime: ImageRef = "nvidia/cuda:13.0.0-runtime-ubuntu24.04"


def _check_archive(value: str) -> str:
    # kimik3 fetches http:// and https:// (lower case, as observe/local_inputs tells a URL from a path); any other
    # `scheme://` (file://, ftp://, HTTPS://) was taken for a relative path: "not found (resolved to ./ftp:/...)".
    if not value:
        raise refuse("must not be empty")
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", value)
    if scheme and scheme.group(1) not in ("http", "https"):
        lower = scheme.group(1).lower()
        hint = f" (write {lower}:// in lower case)" if lower in ("http", "https") else ""
        raise refuse(f"{scheme.group(1)}:// is not fetched: give an http:// or https:// URL, or a local path{hint}")
    return value


def _refuse_repeats(value: list[str]) -> list[str]:
    # The list is a set in kimik3's order (model/builtin_patches.py): a repeated name builds nothing more, and the
    # schema says uniqueItems, so validate says the same instead of accepting what an editor flags.
    if len(set(value)) != len(value):
        raise refuse("lists a patch twice")
    return value


class BuildSpec(BaseModel):
    """How the llama.cpp image is built: source pin, kernels, patches (all part of its fingerprint)."""

    model_config = _CONFIG
    source: Literal["fork", "mainline"] = "fork"
    commit: Sha40 | None = Field(None, description="default: the pin table (kimik3_reconciler/model/pins.py)")
    variant: Literal["cuda", "cpu"] = "cuda"
    cuda_architectures: Annotated[list[CudaArch], Field(min_length=1)] = ["120"]
    cpu_features: Annotated[
        Literal["auto"] | Annotated[list[CpuFeature], Field(json_schema_extra={"uniqueItems": True})],
        BeforeValidator(_check_cpu_features),
    ] = "auto"
    patches: list[HostPath] = []
    builtin_patches: (
        Annotated[
            list[NonEmpty],
            AfterValidator(_refuse_repeats),
            WithJsonSchema({"type": "array", "uniqueItems": True, "items": {"enum": list(BUILTIN_PATCH_NAMES)}}),
        ]
        | None
    ) = Field(
        None,
        description="kimik3's own llama.cpp patches by name (model/builtin_patches.py); default: the default "
        "ones for the variant (opt-in ones only when named); [] builds the source as it is",
    )
    archive: (
        Annotated[
            NonEmpty,
            AfterValidator(_check_archive),
            WithJsonSchema(
                {
                    "type": "string",
                    "minLength": 1,
                    "not": {"pattern": r"^~|^(?!.*://).*\$\{?[A-Za-z_]|^(?!https?://)[A-Za-z][A-Za-z0-9+.-]*://"},
                }
            ),
        ]
        | None
    ) = Field(None, description="path (relative to the profile) or http(s) URL of the source archive")
    archive_sha256: Sha256 | None = None
    build_number: MiB | None = None  # bounded like MiB (0..int32): cmake's LLAMA_BUILD_NUMBER is an int
    base_images: BaseImages = BaseImages()


class SpecDraft(BaseModel):
    """A speculative-decoding draft model (seed 000: DSpark, on the GPU holding output.weight)."""

    model_config = _CONFIG
    model: NonEmpty = Field(description="a local GGUF path (relative to the profile), or repo/file with revision")
    revision: Sha40 | None = None
    device: DraftDevice = "auto"
    # llama.cpp b11434 auto-detects only MTP and DFlash drafts; a plain draft needs draft-simple.
    type: Literal["draft-simple", "draft-dspark", "draft-eagle3", "draft-mtp", "draft-dflash"] = Field(
        "draft-dspark", description="--spec-type (seed 000 deploys the RadixArk DSpark draft)"
    )


# Linux refuses to exec a program when one argv or environment string ("NAME=value") is MAX_ARG_STRLEN bytes or more
# (32 pages: 131072, with its NUL): llama-server never starts ("argument list too long", exit 1 at once), after a
# plan that said ok and an apply that then waited on /health. The profile (256 KiB) can hold such a string.
MAX_ARG_STRLEN = 131072


def _fits_exec(value: str) -> str:
    if len(value.encode()) >= MAX_ARG_STRLEN:
        raise refuse(
            f"is {len(value.encode())} bytes: Linux execs no program with an argument or environment "
            f"string of {MAX_ARG_STRLEN} bytes or more (MAX_ARG_STRLEN); put a long text in a file "
            "(e.g. --chat-template-file)"
        )
    return value


def _env_fits_exec(value: dict[str, str]) -> dict[str, str]:
    for name, text in value.items():
        _fits_exec(f"{name}={text}")
    return value


ExecString = Annotated[
    str,
    AfterValidator(_fits_exec),
    WithJsonSchema({"type": "string", "pattern": r"\S", "maxLength": MAX_ARG_STRLEN - 1}),
]


class ServeSpec(BaseModel):
    """How llama-server runs: address, batching, placement, slots; fixed flags are not here."""

    model_config = _CONFIG
    host: Annotated[str, AfterValidator(_check_host), WithJsonSchema(HOST_SCHEMA)] = "loopback"
    port: Annotated[int, Field(ge=1, le=65535)] = 8080
    batch: Count | None = Field(None, description="default: 4096 hybrid, 2048 all-VRAM (never below ubatch)")
    ubatch: Count | None = Field(None, description="default: 4096 hybrid, 2048 all-VRAM")
    fit_target: (
        Annotated[MiB | Annotated[list[MiB], Field(min_length=1)], BeforeValidator(_check_fit_target)] | None
    ) = Field(
        None,
        description="MiB per GPU; default per quant: 4096 hybrid, the quant's measured all-VRAM "
        "margin (6144 for UD-IQ2_XXS and unmeasured quants, 4096 for REAP770)",
    )
    n_cpu_moe: MiB | None = None  # a layer count; bounded like MiB (0..int32)
    # The total over all slots (llama.cpp's -c); each slot gets ctx_size/parallel, at most the trained context
    # (rule ctx-size-limit, which validate applies per slot).
    ctx_size: Annotated[int, Field(gt=0, le=INT32_MAX)] | None = Field(
        None,
        description="tokens over all slots (llama.cpp -c); each request gets ctx_size/parallel. Default: "
        "131072 per slot (seed 001) x parallel, capped at the model's trained context per slot",
    )
    parallel: Count = 8
    cache_ram: MiB | None = None
    slot_save: bool = Field(
        False,
        description="llama-server saves and restores slots' prompt caches (--slot-save-path, in the Docker volume "
        "kimik3-slots-<name>): a fleet rollout then keeps them through the server swap. Off by default: the files "
        "hold users' conversations' KV cache on the host's disk",
    )
    api_key_file: HostPath | None = None
    env: Annotated[
        dict[EnvName, Annotated[str, Field(json_schema_extra={"maxLength": MAX_ARG_STRLEN - 3})]],
        AfterValidator(_env_fits_exec),
        Field(json_schema_extra={"additionalProperties": False}),
    ] = {}
    extra_args: list[ExecString] = []
    spec_draft: SpecDraft | None = None
    load_mode: Annotated[NonEmpty, WithJsonSchema({"enum": ["none", "dio"]})] = Field(
        "none",
        description="none (read into allocated memory, the default) or dio "
        "(direct I/O, around the page cache); mmap/auto are refused",
    )


class QuantGate(BaseModel):
    """The PPL/KLD gate a quant passes before it is first served (seed 000 "Quant gate")."""

    model_config = _CONFIG
    reference_quant: QuantName = catalog.REFERENCE_QUANT
    max_kld: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.5  # .inf: a gate nothing fails
    min_top_token_agreement: Annotated[float, Field(ge=0, le=1)] = 0.80


class GateSpec(BaseModel):
    """Checks an image or a quant must pass before kimik3 serves it."""

    model_config = _CONFIG
    smoke: bool = True
    quant: QuantGate | None = None


class SystemdSpec(BaseModel):
    """Optional productionization as a systemd unit (seed 000 step 7)."""

    model_config = _CONFIG
    unit: UnitName | None = Field(None, description="default: the profile name")
    enable: bool = Field(False, description="false = on-demand, true = boot-enabled")
    conflicts: list[UnitName] = []


_DOCKER_URL_FORMS = "must be ssh://user@host[:port] (the docker SDK over ssh) or tcp://host:port with tls_dir"
# A DNS name, an ssh config alias (paramiko reads ~/.ssh/config: `Host gpu_box` is legal) or an IPv4 literal.
_URL_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


_HOST_PATTERN = r"(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\])"
_PORT_PATTERN = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
DOCKER_URL_SCHEMA = {
    "type": "string",
    "pattern": rf"^(?:ssh://[A-Za-z0-9_][A-Za-z0-9_.-]*@{_HOST_PATTERN}(?::"
    rf"{_PORT_PATTERN})?|tcp://{_HOST_PATTERN}:{_PORT_PATTERN})/?$",
}


def _check_docker_url(value: str) -> str:
    # The docker SDK's two remote transports: ssh (the daemon's socket over an ssh login) or TLS tcp.
    parts = urlsplit(value)
    if parts.scheme not in ("ssh", "tcp"):
        raise refuse(_DOCKER_URL_FORMS)
    try:
        port = parts.port  # urlsplit checks the port's range (0-65535) only when asked; asked here, not at connect
    except ValueError:
        port = -1
    # Port 0 is no port to connect to, and an empty one ('host:') is a typo the SDK reads as its default port.
    if port == -1 or port == 0 or (port is None and parts.netloc.endswith(":")):
        raise refuse(f"{_DOCKER_URL_FORMS}; its port must be 1-65535")
    host = parts.hostname or ""
    # The URL's user and host reach the `ssh` command line (docker SDK: ssh -l USER -p PORT -- HOST ...): a value
    # starting with '-' would read as an ssh option wherever that `--` is missing; a path, query or fragment is
    # dropped silently by the SDK. Only plain names: letters, digits, '.', '-', '_' (an IPv6 host in brackets).
    plain_host = bool(_URL_HOST.fullmatch(host)) or (host != "" and _ip(host) is not None)
    if parts.path not in ("", "/") or parts.query or parts.fragment or not plain_host:
        raise refuse(f"{_DOCKER_URL_FORMS}: no path, query or fragment, and the host a plain name or IP address")
    if parts.scheme == "ssh" and parts.username and _SSH_USER.fullmatch(parts.username):
        return value
    if parts.scheme == "tcp" and parts.port:
        return value
    raise refuse(_DOCKER_URL_FORMS)


def _check_absolute(value: str) -> str:
    if not value.startswith("/"):
        raise refuse("must be an absolute path")
    return value


def _check_bind(value: str) -> str:
    if _ip(value) is None:
        raise refuse("must be an IP address literal: the one address rpc-server binds on its host")
    return _refuse_mapped(value)


DockerUrl = Annotated[str, AfterValidator(_check_docker_url), WithJsonSchema(DOCKER_URL_SCHEMA)]
AbsolutePath = Annotated[NonEmpty, AfterValidator(_check_absolute), WithJsonSchema(ABSOLUTE_SCHEMA)]
WorkerName = _matching(
    r"[a-z0-9][a-z0-9-]{0,30}", "must be 1-31 characters of a-z, 0-9 and '-' (it names the worker's container)"
)
RpcDevice = _matching(r"[A-Za-z]+[0-9]*", "must be a ggml device name like CUDA0 or CPU")


class RemoteHost(BaseModel):
    """Another host of the deployment, reached through its own Docker (an RPC worker, a cluster's node)."""

    model_config = _CONFIG
    name: WorkerName
    docker: DockerUrl = Field(
        description="how kimik3 reaches this host's Docker: ssh://user@host[:port] or tcp://host:port (TLS)"
    )
    tls_dir: AbsolutePath | None = Field(
        None, description="tcp:// only: absolute path of a folder with ca.pem, cert.pem, key.pem"
    )


class RpcWorker(RemoteHost):
    """One host running rpc-server (llama.cpp's RPC backend) for the main server (issue 18)."""

    bind: Annotated[str, AfterValidator(_check_bind), WithJsonSchema(IPV4_SCHEMA)] = Field(
        description="the address rpc-server binds and the main server connects to: loopback or a private address"
    )
    port: Annotated[int, Field(ge=1, le=65535)] = 50052
    devices: Annotated[list[RpcDevice], Field(min_length=1)] | None = Field(
        None, description="rpc-server --device; default: every accelerator of the host, else its CPU"
    )
    gpus: Annotated[Literal["all", "none"] | GpuList, BeforeValidator(_check_gpus)] = Field(
        "none", description="GPUs the worker's container gets (as the profile's gpus)"
    )
    threads: Count | None = Field(None, description="rpc-server -t (CPU device threads)")
    cache: bool = Field(
        True, description="rpc-server -c: keep received tensors on the worker, so a reload does not resend them"
    )
    # Absolute, as tls_dir: a bind mount on the worker's Docker has no folder a relative path could be relative to
    # (a relative one passed validate and plan, then failed the worker's container create).
    cache_dir: Annotated[NonEmpty, AfterValidator(_check_absolute), WithJsonSchema(ABSOLUTE_SCHEMA)] | None = Field(
        None, description="host folder of the tensor cache on the worker (absolute); default: a Docker volume"
    )


class RpcSpec(BaseModel):
    """Workers whose devices llama-server uses through --rpc (llama.cpp's RPC backend)."""

    model_config = _CONFIG
    workers: Annotated[list[RpcWorker], Field(min_length=1)]


def _check_member_bind(value: str) -> str:
    # IPv4 only: Ray's --node-ip-address and SGLang's --dist-init-addr (host:port, split at its last ':') are IPv4 in
    # every multi-node guide of theirs; an IPv6 literal there is not tested by either project.
    address = _ip(value)
    if address is None or address.version != 4:
        raise refuse("must be an IPv4 address literal: the address the cluster's members reach this host at")
    return value


MemberBind = Annotated[str, AfterValidator(_check_member_bind), WithJsonSchema(IPV4_SCHEMA)]


class ClusterNode(RemoteHost):
    """One more host of a replica that spans hosts (vllm.cluster, sglang.cluster): it runs the engine's member
    processes (vLLM: a Ray worker; SGLang: the server at its node rank)."""

    bind: MemberBind = Field(description="the node's address the other members reach: loopback or a private address")
    gpus: Annotated[Literal["all", "none"] | GpuList, BeforeValidator(_check_gpus)] = Field(
        "all",
        description="GPUs the node's container gets (as the profile's gpus); none where the profile's gpus is none",
    )


class ClusterSpec(BaseModel):
    """A replica over several hosts: this host is the head (node rank 0), `nodes` the others, in rank order."""

    model_config = _CONFIG
    bind: MemberBind = Field(
        description="this (head) host's address the nodes reach: Ray's head (vllm), --dist-init-addr (sglang)"
    )
    port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None, description="the head's port: Ray's GCS (vllm, default 6379), --dist-init-addr's (sglang, default 20000)"
    )
    allow_public: bool = Field(
        False,
        description="true: let bind addresses be public (Ray and torch.distributed have no authentication: "
        "refused unless written)",
    )
    nodes: Annotated[list[ClusterNode], Field(min_length=1)]


class HandoverSpec(BaseModel):
    """Drain, hold and hand over (issue 29): while kimik3 replaces the server, the front (kimik3's proxy, a process
    of its own on serve.port) lets in-flight requests finish, holds new ones and sends them to the new server."""

    model_config = _CONFIG
    drain_s: Annotated[int, Field(ge=0, le=3600)] = Field(
        60, description="how long in-flight requests may run on the old server before it is stopped"
    )
    queue: Annotated[int, Field(ge=0, le=100000)] = Field(
        64, description="requests held at most while the server is replaced; past it: 503 with Retry-After"
    )
    wait_s: Annotated[int, Field(ge=1, le=7200)] = Field(
        900, description="longest a held request waits; past it: 503 with Retry-After"
    )


class MetricsSpec(BaseModel):
    """The exporter kimik3 runs next to the server (issue 17): one Prometheus port for the whole deployment.

    No `metrics:` section = no exporter: a new process and port on a shared host is asked for, never
    started by a kimik3 upgrade (two profiles on one host would also fight over any default port)."""

    model_config = _CONFIG
    port: Annotated[int, Field(ge=1, le=65535)] = Field(description="the exporter's port (/metrics, /healthz)")
    bind: Annotated[str, AfterValidator(_check_host), WithJsonSchema(HOST_SCHEMA)] = Field(
        "loopback", description="loopback (default: the node's Prometheus scrapes locally), tailscale or an IP"
    )
    proxy: bool = Field(
        False, description="put a latency-recording proxy on serve.port; llama-server moves to 127.0.0.1:server_port"
    )
    server_port: Annotated[int, Field(ge=1, le=65535)] | None = Field(
        None, description="with proxy: llama-server's loopback port (default: serve.port + 10000, or - 10000)"
    )
    handover: HandoverSpec | None = Field(
        None,
        description="with proxy: the proxy runs on its own (kimik3 front-serve) and holds requests while a "
        "replacement runs, so serve.port never closes (issue 29)",
    )


class HostSpec(BaseModel):
    """Host preparation (issue 27 item 5): what seed 000 requires of the kernel, set and persisted by kimik3.

    Opt-in: a host setting outlives the deployment and touches every process on the host, so it is asked for."""

    model_config = _CONFIG
    prepare: bool = Field(
        False,
        description="write /etc/sysctl.d/90-kimik3.conf (kernel.numa_balancing = 0, seed "
        "000) and load it with systemd-sysctl; false: the host gate only checks",
    )


# An image is pulled by digest (vllm, sglang): the tag is for people, the digest is what runs (seed 001's
# `vllm/vllm-openai:kimi-k3` moves under its tag).
# A tag alone is accepted here and refused by plan and apply until `kimik3 pin` writes the digest the registry serves
# for it (model/pinning.py); a name with neither tag nor digest is refused (which `latest` was meant is unknowable).
_IMAGE_NAME = IMAGE_REF.removesuffix(r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")
PinnedImageRef = _matching(
    _IMAGE_NAME + r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(?:@sha256:[0-9a-f]{64})?"
    r"|@sha256:[0-9a-f]{64})",
    "must be an image reference pinned by digest, e.g. vllm/vllm-openai:kimi-k3@sha256:<64 "
    "hex>, or by a tag that `kimik3 pin` resolves to its digest (vllm/vllm-openai:kimi-k3)",
)
ParserName = _matching(r"[A-Za-z0-9][A-Za-z0-9_.-]*", "must be a parser name like kimi_k3")
BackendName = _matching(r"[A-Z0-9][A-Z0-9_]*", "must be an attention backend name like TOKENSPEED_MLA")
# vLLM 0.32's --kv-cache-dtype choices, as its vllm/config/cache.py `CacheDType` lists them (the real parser checks
# a rendered argv: tests/unit/engines/test_vllm_render.py)
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)
# Seed 001's --attention-config for TOKENSPEED_MLA (the vLLM Kimi K3 recipe, 2026-09-10), as the default.
SEED_ATTENTION_CONFIG: dict[str, Any] = {
    "use_prefill_query_quantization": True,
    "mla_prefill_backend": "TOKENSPEED_MLA",
}
JsonScalar = Union[bool, int, float, str]  # noqa: UP007 - pydantic tries the members in this order


class ImageSpec(BaseModel):
    """The serving image, pulled by digest (vllm, sglang); llama.cpp's is built (`build:`)."""

    model_config = _CONFIG
    ref: PinnedImageRef = Field(
        description="repo[:tag]@sha256:<64 hex>; the digest is what is pulled and run (a tag "
        "alone: `kimik3 pin` writes its digest; plan and apply refuse it)"
    )


class VllmSpec(BaseModel):
    """vLLM's own knobs (engine: vllm). The defaults are seed 001's TP8 recipe (profiles/vllm-tp8.yaml)."""

    model_config = _CONFIG
    tensor_parallel_size: Count = Field(8, description="--tensor-parallel-size")
    max_model_len: Annotated[int, Field(ge=1, le=1048576)] = Field(
        131072, description="--max-model-len (at most Kimi-K3's trained 1,048,576)"
    )
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        0.95, description="--gpu-memory-utilization: the share of each GPU's memory vLLM takes"
    )
    kv_cache_dtype: Literal[KV_CACHE_DTYPES] = Field("fp8", description="--kv-cache-dtype")  # type: ignore[valid-type]
    max_num_seqs: Count | None = Field(None, description="--max-num-seqs; default: vLLM's")
    max_num_batched_tokens: Count | None = Field(None, description="--max-num-batched-tokens; default: vLLM's")
    enable_prefix_caching: bool = Field(True, description="--enable-prefix-caching (false: --no-enable-prefix-caching)")
    prefix_match_unit: Count | None = Field(128, description="--prefix-match-unit; null: vLLM's default")
    attention_backend: BackendName | None = Field(
        "TOKENSPEED_MLA", description="--attention-backend; null: vLLM chooses (the CPU image has its own)"
    )
    attention_config: Annotated[dict[NonEmpty, JsonScalar], Field(min_length=1)] | None = Field(
        default_factory=lambda: dict(SEED_ATTENTION_CONFIG), description="--attention-config, as JSON; null: none"
    )
    tool_call_parser: ParserName | None = Field(
        "kimi_k3", description="--tool-call-parser with --enable-auto-tool-choice; null: no tool calls parsed"
    )
    reasoning_parser: ParserName | None = Field("kimi_k3", description="--reasoning-parser; null: none")
    v2_model_runner: bool = Field(True, description="env VLLM_USE_V2_MODEL_RUNNER=1 (seed 001's recipe)")
    enforce_eager: bool = Field(False, description="--enforce-eager (no CUDA graphs; the CPU test image needs it)")
    pipeline_parallel_size: Count | None = Field(
        None, description="--pipeline-parallel-size (usually the node count of a cluster); null: vLLM's (1)"
    )
    cluster: ClusterSpec | None = Field(None, description="a replica over several hosts, on Ray (null: this host only)")
    any_gpu: bool = Field(
        False,
        description="true: run the recipe on GPUs other than seed 001's B300/GB300 (the "
        "host gate refuses them otherwise; the recipe was not measured there)",
    )


def _refuse_placeholder(value: Any) -> Any:
    if isinstance(value, str):
        # rule: sglang-memory-ratio
        # Seed 001 writes `--mamba-full-memory-ratio <value-from-official-calculator>`: copied as is, SGLang refuses
        # it at launch, after the checkpoint download.
        raise refuse(
            "must be a number from SGLang's Kimi-K3 cookbook calculator (it depends on the average input "
            f"plus output length of your workload), not {value!r}"
        )
    return value


class SglangWorkload(BaseModel):
    """The average request sglang.mamba_full_memory_ratio was computed for (seed 001: the cookbook's calculator takes
    the workload's average input plus output length)."""

    model_config = _CONFIG
    prompt_tokens: Count = Field(description="average input (prompt) tokens of a request")
    output_tokens: Count = Field(description="average output tokens of a request")


class SglangSpec(BaseModel):
    """SGLang's own knobs (engine: sglang): seed 001's TP8/DCP8 recipe on 8x B300."""

    model_config = _CONFIG
    tp_size: Count = Field(8, description="--tp-size")
    dcp_size: Count = Field(8, description="--dcp-size")
    mem_fraction_static: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        0.85, description="--mem-fraction-static"
    )
    mamba_full_memory_ratio: Annotated[
        float, BeforeValidator(_refuse_placeholder), Field(gt=0, allow_inf_nan=False)
    ] = Field(description="--mamba-full-memory-ratio: required, from SGLang's cookbook calculator for your workload")
    workload: SglangWorkload | None = Field(
        None,
        description="the average request mamba_full_memory_ratio was "
        "computed for; without it the plan warns that the ratio is not tied "
        "to a workload",
    )
    pp_size: Count | None = Field(None, description="--pp-size (pipeline parallel); null: SGLang's (1)")
    cluster: ClusterSpec | None = Field(
        None, description="a replica over several hosts (--nnodes, --node-rank, --dist-init-addr; null: this host only)"
    )
    tool_call_parser: ParserName | None = Field("kimi_k3", description="--tool-call-parser; null: none")
    reasoning_parser: ParserName | None = Field("kimi_k3", description="--reasoning-parser; null: none")
    any_gpu: bool = Field(
        False,
        description="true: run the profile on GPUs other than the cookbook's B300 (the "
        "host gate refuses them otherwise; seed 001: do not copy this topology)",
    )


def _engine_schema() -> list[dict[str, Any]]:
    """JSON Schema `allOf` items, one per registered engine: one that builds its image (llamacpp) requires
    model.quant and refuses the sections of the others (`image`, `vllm`, `sglang`); one that pulls refuses what only
    another engine reads (`own_fields`: llama.cpp's) and the sections of another engine. The default engine's item
    also holds for a profile without `engine:`."""

    def absent(paths: Any) -> dict[str, Any]:
        top = [p[0] for p in paths if len(p) == 1]
        nested: dict[str, list[str]] = {}
        for p in paths:
            if len(p) == 2:
                nested.setdefault(p[0], []).append(p[1])
        return {
            "not": {"anyOf": [{"required": [name]} for name in top]},
            "properties": {
                section: {"not": {"anyOf": [{"required": [f]} for f in fields]}} for section, fields in nested.items()
            },
        }

    sections = engine_sections()
    items = []
    for name, entry in ENGINES.items():
        other = [(s,) for s, engines in sections.items() if name not in engines]
        is_name = {"properties": {"engine": {"const": name}}}
        if entry.image == "build":
            named = {"anyOf": [{"not": {"required": ["engine"]}}, is_name]} if name == DEFAULT_ENGINE else None
            quant = {"model": {"required": ["quant"], "properties": {"quant": {"type": "string"}}}}
            items.append(
                {"if": named or {"required": ["engine"], **is_name}, "then": {**absent(other), "properties": quant}}
            )
            continue
        required = ["image", *entry.required]
        items.append(
            {
                "if": {"required": ["engine"], **is_name},
                "then": {**absent([*own_fields(name), *other]), "required": required},
            }
        )
    return items


class Profile(BaseModel):
    """What should be running on one host: one YAML file, validated, planned and converged."""

    model_config = ConfigDict(**_CONFIG, json_schema_extra=lambda schema: schema.update(allOf=_engine_schema()))
    api_version: Literal["kimik3/v1"] = Field(alias="apiVersion")
    name: ProfileName
    engine: EngineName = Field(
        DEFAULT_ENGINE,
        json_schema_extra=_engine_choices,
        description="the serving engine: llamacpp (llama-server on GGUF quants, "
        "the image built), vllm (the safetensors checkpoint, the "
        "image pulled by digest)",
    )
    model: ModelSpec
    image: ImageSpec | None = Field(None, description="vllm, sglang (required there): the image, by digest")
    build: BuildSpec = BuildSpec()
    gpus: Annotated[Literal["all", "none"] | GpuList, BeforeValidator(_check_gpus)] = "all"
    share_gpus: bool = Field(False, description="allow other processes' memory on the requested GPUs (shared pool)")
    serve: ServeSpec = ServeSpec()
    gate: GateSpec = GateSpec()
    systemd: SystemdSpec | None = None
    rpc: RpcSpec | None = None
    metrics: MetricsSpec | None = None
    host: HostSpec = HostSpec()
    vllm: VllmSpec | None = Field(None, description="engine: vllm only: vLLM's knobs (default: seed 001's recipe)")
    sglang: SglangSpec | None = Field(None, description="engine: sglang only (required there): SGLang's knobs")

    @model_validator(mode="before")
    @classmethod
    def _engine_knobs(cls, data: Any) -> Any:
        # `engine: vllm` without a `vllm:` section (an engine's section it need not write) runs seed 001's recipe: the section's defaults, as values (the
        # planners read profile.vllm, never a default of their own).
        engine = data.get("engine") if isinstance(data, dict) else None
        entry = ENGINES.get(engine) if isinstance(engine, str) else None
        if entry is None:
            return data
        return {**data, **{s: {} for s in entry.sections if s not in entry.required and data.get(s) is None}}


def profile_json_schema() -> dict[str, Any]:
    """The JSON Schema of a profile file (docs/profile.schema.json is generated from this)."""
    schema = Profile.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "kimik3/v1/profile", **schema}


def to_tree(value: Any) -> Any:
    """A validated profile (or section) as plain JSON data, each model tagged with its class name: what
    model/profile.py builds its values from, and what the profile cache keeps."""
    if isinstance(value, BaseModel):
        return {
            "@model": type(value).__name__,
            "fields": {name: to_tree(getattr(value, name)) for name in type(value).model_fields},
        }
    if isinstance(value, list):
        return [to_tree(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_tree(item) for key, item in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a profile field holds a {type(value).__name__}: give it a JSON form in to_tree")  # e.g. a tuple


def values_of(section: BaseModel) -> Any:
    """model/profile.py's value of a validated section (e.g. a MetricsSpec made by the CLI)."""
    from kimik3_reconciler.model.profile import from_tree

    return from_tree(to_tree(section))
