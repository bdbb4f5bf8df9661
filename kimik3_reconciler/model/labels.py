"""Label and path names kimik3 stamps on what it creates (observe and plan agree through these)."""

PROFILE_LABEL = "kimik3.profile"
IMAGE_FINGERPRINT = "kimik3.image.fingerprint"
IMAGE_INPUTS = "kimik3.image.inputs"
CONTAINER_FINGERPRINT = "kimik3.container.fingerprint"
CONTAINER_INPUTS = "kimik3.inputs"
MODELS_MOUNT = "/models"
API_KEY_MOUNT = "/run/secrets/kimik3-api-key"
HEALTH_URL = "kimik3.health-url"
# Stamped only where the engine's port refuses connections while it loads (vLLM): a running container whose
# health URL does not answer is loading, not down (observe/docker_objects.py). Absent on llama.cpp's (503).
WHILE_LOADING = "kimik3.while-loading"
BASE_IMAGES = "kimik3.base-images"  # {ref: local image id} the image was built on
BASE_DIGESTS = "kimik3.base-digests"  # {ref: repo digest (sha256:…) or null} the image was built on
SMOKE_MOUNT = "/smoke"
DRAFT_MOUNT = "/drafts"
WORKER_FINGERPRINT = "kimik3.worker.fingerprint"  # an rpc-server container (not a serving one: conflicts skip it)
WORKER_INPUTS = "kimik3.worker.inputs"
# A cluster node's member container (vllm.cluster / sglang.cluster): not a serving one either (conflicts skip it)
MEMBER_FINGERPRINT = "kimik3.member.fingerprint"
MEMBER_INPUTS = "kimik3.member.inputs"
SLOTS_MOUNT = "/slots"  # llama-server's --slot-save-path inside the server's container (serve.slot_save)
RPC_CACHE_MOUNT = "/rpc-cache"  # rpc-server's tensor cache (LLAMA_CACHE) inside the worker's container
