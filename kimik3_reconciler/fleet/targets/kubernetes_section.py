"""The fleet file's optional `kubernetes:` section (pydantic, per-field checks, no I/O): what only a Kubernetes
render needs and the profile cannot say: the namespace, the model cache's volume, image references by digest, the
router's image and Service, the pod's CPU and memory, the Secrets that hold the HF token and the API key (by name,
never their values). Checks that need the profile too (an image for a built engine, the GGUF's first file) are
fleet/targets/kubernetes.py's, at render."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kimik3_reconciler.model.profile_schema import _matching, refuse

_CONFIG = ConfigDict(extra="forbid", frozen=True, strict=True)

# A DNS-1123 label: what a namespace, a Secret, a PVC (and the objects kimik3 names from the fleet) must be.
DnsLabel = _matching(
    r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?",
    "must be a Kubernetes name: 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit",
)
SecretKeyName = _matching(r"[-._a-zA-Z0-9]{1,253}", "must be a Secret's key: letters, digits, '-', '_' or '.'")
# The pin: a tag can move under a running fleet; every pod of every group must run the same bytes.
DigestRef = _matching(
    r"[^@\s]+@sha256:[0-9a-f]{64}",
    "must be an image by digest, repository[:tag]@sha256:<64 hex> (a tag alone can move under a running fleet)",
)
# A Kubernetes quantity (resources.requests.memory), e.g. 64Gi, 900G, 512Mi.
Quantity = _matching(
    r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", "must be a Kubernetes quantity, e.g. 64Gi or 900G"
)
AbsolutePath = _matching(r"/[^\x00]*", "must be an absolute path on the node")


class SecretRef(BaseModel):
    """One key of a Secret in the namespace: referenced by the manifests, its value never written there."""

    model_config = _CONFIG
    name: DnsLabel = Field(description="the Secret's name")
    key: SecretKeyName = Field(description="the key in it")


class CacheVolume(BaseModel):
    """The model cache (a Hugging Face cache, as model.cache_dir is on a host): a PersistentVolumeClaim, or a folder
    of the node (hostPath). The server mounts the model's folder of it read-only."""

    model_config = _CONFIG
    claim: DnsLabel | None = Field(None, description="a PersistentVolumeClaim's name (ReadOnlyMany or ReadWriteMany)")
    host_path: AbsolutePath | None = Field(None, description="a folder of each node (hostPath)")

    @model_validator(mode="after")
    def _one(self) -> CacheVolume:
        if (self.claim is None) == (self.host_path is None):
            raise refuse("give one of claim (a PersistentVolumeClaim) or host_path (a folder of the node)")
        return self


class RouterTarget(BaseModel):
    """The router's pod: an image with the fleet's pinned smg on its PATH, and how its Service is exposed."""

    model_config = _CONFIG
    image: DigestRef = Field(description="an image whose PATH has smg at router.version, by digest")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="the router Service's type (ClusterIP: reached inside the cluster only)"
    )


class ModelDownload(BaseModel):
    """An init container that fills the cache with the pinned revision (`hf download`) before the server starts."""

    model_config = _CONFIG
    image: DigestRef = Field(description="an image with huggingface_hub's `hf` command, by digest")


class Secrets(BaseModel):
    """Where the secrets are: Secrets of the namespace, referenced by name and key."""

    model_config = _CONFIG
    hf_token: SecretRef | None = Field(None, description="the Hub token the download uses (HF_TOKEN)")
    api_key: SecretRef | None = Field(None, description="the key serve.api_key_file holds on a host")


class KubernetesSection(BaseModel):
    """`kimik3 fleet render --target kubernetes`: what the render needs beside the profile and the rollout."""

    model_config = _CONFIG
    namespace: DnsLabel = "default"
    cache: CacheVolume = Field(description="the model cache: {claim: PVC} or {host_path: /folder}")
    image: DigestRef | None = Field(
        None,
        description="the serving image by digest: required where the engine builds its image (what `kimik3 fleet "
        "apply --registry` pushed); else the profile's image.ref (a mirror of it: the same digest)",
    )
    model_file: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="the one file of the snapshot the server opens, where its engine opens one (a quant's first "
        "shard: QUANT/NAME-00001-of-000NN.<ext>), relative to the snapshot",
    )
    cpu: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="whole CPU cores of the server pod (requests = limits); the server's threads where its engine "
        "takes the host's cores",
    )
    memory: Quantity | None = Field(None, description="the server pod's memory (requests = limits)")
    gpus: Annotated[int, Field(ge=1)] | None = Field(
        None, description="nvidia.com/gpu per server pod, where the profile's `gpus: all` gives no count"
    )
    max_surge: Annotated[int, Field(ge=0)] = Field(
        0, description="groups added beside the old ones during a rollout (each needs its own GPUs)"
    )
    router: RouterTarget
    download: ModelDownload | None = None
    secrets: Secrets = Secrets()
