"""Keys of kimik3's own records in the state directory (pure; observe reads, steps write)."""

from __future__ import annotations

import hashlib


def archive_record_key(source: str, commit: str) -> str:
    """The sha256 a pin's source archive had on first use: later uses must match it."""
    return f"archives/{source}-{commit}.json"


def file_hash_key(path: str) -> str:
    """A local file's sha256 with the stat fingerprint it had when hashed (observe/local_inputs.py): a key in
    the cache dir (ports.CachePort, not the state dir), so a no-op plan does not re-read a source archive whose
    stat has not moved, and writes no state. Named by the path's hash."""
    return f"sha256/{hashlib.sha256(path.encode()).hexdigest()[:32]}.json"


def local_model_key(path: str) -> str:
    """The verified sha256 manifest of a local model (`model.local_path`, resolved): its files, sizes, sha256 and
    the stat fingerprints they had when hashed, one record per path (named by the path's hash; the record holds the
    path itself). A plan stats against it and re-hashes only what moved."""
    return f"models/local/{hashlib.sha256(path.encode()).hexdigest()[:32]}.json"


def local_layout_key(digest: str) -> str:
    """The GGUF-header summary of a local model, by its content (the manifest's digest): a changed file is read
    again, an unchanged one never."""
    return f"layout/local/{digest}.json"


LOAD_RATE_KEY = "host/load-rate.json"  # {"bytes", "seconds"} of the last model load measured here (cold)
WARM_LOAD_RATE_KEY = "host/load-rate-warm.json"  # the same, of the last load after a pre-read (page cache warm)


def build_time_key(variant: str, cached: bool) -> str:
    """{"seconds", "date", "fingerprint"} of the last image build of `variant` (cuda, cpu) on this host: a full
    compile, or (`cached`) one whose compile Docker's layer cache answered; the plan predicts the next build from it."""
    return f"host/build-time-{variant}{'-cached' if cached else ''}.json"


def gate_key(repo: str, revision: str, quant: str) -> str:
    """Quant-gate results of one quant, by image fingerprint (a passed gate is not re-run)."""
    return f"gate/{repo.replace('/', '--')}/{revision}/{quant}.json"


def last_good_key(profile_name: str) -> str:
    """The last profile text of this name that converged and passed verify (the revert target)."""
    return f"last-good/{profile_name}.json"


def unverified_key(container: str) -> str:
    """{"fingerprint", "date"} of a container an apply launched or started and has not verified yet: while it
    names the running container, the next apply runs verify (an interrupted health wait still gets checked)."""
    return f"unverified/{container}.json"


def smoke_key(image_fingerprint: str) -> str:
    """The smoke-test result of one image (runs once per image)."""
    return f"smoke/{image_fingerprint}.json"


def layout_key(repo: str, revision: str, quant: str) -> str:
    """The summary of a quant's GGUF headers (the placement forecast's input), read once."""
    return f"layout/{repo.replace('/', '--')}/{revision}/{quant}.json"


def reconcile_loop_key(profile_name: str) -> str:
    """{"holder": LockHolder, "file", "interval_s", "last_pass"} of the `kimik3 reconcile` loop that keeps this
    profile converged: written every pass, removed when the loop stops. A loop for a conflicting profile reads it
    and refuses to stop this profile's container (two loops would stop each other every pass)."""
    return f"reconcile/{profile_name}.json"


def gpu_probe_key(
    driver: str | None, toolkit: str | None, request: str, gpus: str | tuple[str, ...], host_gpus: int
) -> str:
    """A passing GPU-plumbing probe (a real container running nvidia-smi) of one (driver, toolkit, request, GPUs):
    run once; a driver or toolkit upgrade, a switch between CDI and the runtime, or other GPUs probe again.
    `gpus`: the profile's docker device ids, or "all" (then the host's count is part of it): `gpus: [0, 1]`
    passing says nothing of GPU 5, nor of `gpus: all`, nor of a GPU the host gained since."""
    probed = f"all-of-{host_gpus}" if gpus == "all" else "gpus-" + "_".join(gpus)
    return f"gpu-probe/driver-{driver or 'unknown'}/toolkit-{toolkit or 'unknown'}/{request}-{probed}.json"


def apply_key(profile_name: str) -> str:
    """{"date", "result": ok|failed, "error", "fingerprint" (the container it converged to), "reverted" (this apply
    relaunched the last good profile), "reverts" (applies that did, in all) and "reverts_since" (the date that count
    starts from; None: unknown)}: the last apply of this profile, read by the exporter (converged, last apply time
    and result, whether it reverted, revert count)."""
    return f"apply/{profile_name}.json"


def load_key(container: str) -> str:
    """{"bytes", "seconds", "date", "fingerprint"} of this container's last model load (the health wait's end)."""
    return f"load/{container}.json"


def verify_key(profile_name: str) -> str:
    """The last verify report of this profile (check name -> ok/detail, tool-call retries), for the exporter."""
    return f"verify/{profile_name}.json"


# In a helper's process record (the exporter's, the front's): it offers its listening sockets to its replacement
# (adapters/socket_handover.py), so replacing it never closes its ports. Absent: a helper an older kimik3 started.
HANDS_OVER_SOCKETS = "hands_over_sockets"


def exporter_key(profile_name: str) -> str:
    """{"pid", "fingerprint", "config", "date", "hands_over_sockets"}: the exporter process kimik3 started for this
    profile."""
    return f"metrics/{profile_name}/process.json"


def exporter_config_key(profile_name: str) -> str:
    """The exporter's configuration (model/metrics.py ExporterConfig), read by `kimik3 metrics-serve NAME`."""
    return f"metrics/{profile_name}/config.json"


def front_key(profile_name: str) -> str:
    """{"pid", "fingerprint", "config", "date"}: the front process (issue 29, metrics.handover) of this profile."""
    return f"front/{profile_name}/process.json"


def front_config_key(profile_name: str) -> str:
    """The front's configuration (model/front.py FrontConfig), read by `kimik3 front-serve NAME`."""
    return f"front/{profile_name}/config.json"


def front_token_key(profile_name: str) -> str:
    """{"token"}: what an apply sends the front with a hold or release; never in argv, a config or a plan."""
    return f"front/{profile_name}/token.json"


def cluster_members_key(profile_name: str) -> str:
    """{"workers": [...]} as rpc_workers_key's, for a cluster's member containers (vllm.cluster / sglang.cluster
    nodes): every member an apply of this profile launched, removed only once its container is removed. A node the
    profile stops naming is found here: its member would otherwise keep running (vLLM's: a Ray worker that joins the
    head's next Ray at every restart)."""
    return f"cluster-members/{profile_name}.json"


def rpc_workers_key(profile_name: str) -> str:
    """{"workers": [{"name", "docker", "tls_dir", "container"}, ...]}: every RPC worker an apply of this profile
    launched (added at each launch and when an apply converges, removed only once its rpc-server is removed).
    A worker the profile stops naming is found here: its rpc-server would otherwise keep listening."""
    return f"rpc-workers/{profile_name}.json"
