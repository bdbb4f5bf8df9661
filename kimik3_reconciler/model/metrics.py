"""The metrics exporter's configuration (issue 17): what `kimik3 metrics-serve NAME` reads, pure values.

The planner renders it from the profile and the observed host (planning/metrics_step.py); its
fingerprint is the exporter's identity: a running exporter with another fingerprint is replaced.
It carries the API key file's *path* (the exporter reads the key to scrape a keyed server), never
the key, and no field of it becomes a metric label except `labels`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE
from kimik3_reconciler.model.helper_config import HelperConfig

# The exporter's own code is part of what runs: a kimik3 upgrade that changes it replaces the exporter
# (seconds, no model reload). Bump when the exposition or the proxy changes behaviour.
EXPORTER_VERSION = 2  # 2: every source bounded per scrape; the server read from the server (issue 30)


@dataclass(frozen=True)
class ExporterConfig(HelperConfig):
    profile: str
    labels: dict[str, str]  # profile, quant, build, fingerprint: stamped on every series
    bind: str  # the exporter's listen address
    port: int
    container: str
    server_url: str  # llama-server as the exporter reaches it (http://127.0.0.1:PORT)
    api_key_file: str | None = None  # host path; the exporter sends the key as Bearer, never exports it
    shards: tuple[str, ...] = ()  # host paths of the served GGUF files (page-cache residency)
    gpus: str | tuple[str, ...] = "none"  # the profile's GPUs ("none", "all" or indices/UUIDs as strings)
    quant: str = ""
    repo: str = ""
    revision: str = ""
    image_fingerprint: str = ""  # the smoke and quant gate records are kept per image
    proxy_bind: str | None = None  # with metrics.proxy: the proxy listens on (proxy_bind, proxy_port)
    proxy_port: int | None = None
    version: int = EXPORTER_VERSION
    engine: str = DEFAULT_ENGINE  # the serving engine (its series names, slots, what loading looks like)

    def to_json(self) -> dict[str, Any]:
        data = json.loads(json.dumps(asdict(self)))
        if data["engine"] == DEFAULT_ENGINE:
            # A field added with its default must not move the fingerprint of every running llama.cpp exporter
            # (a replacement on upgrade); from_json gives it back.
            del data["engine"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExporterConfig:
        values = dict(data)
        values["shards"] = tuple(values.get("shards", ()))
        gpus = values.get("gpus", "none")
        values["gpus"] = gpus if isinstance(gpus, str) else tuple(str(g) for g in gpus)
        return cls(**values)

    @property
    def health_url(self) -> str:
        return self.local_url("/healthz")

    def flat(self) -> dict[str, Any]:
        """Named as a diff reads best (`metrics.port`, `labels.fingerprint`), for a replacement's reason."""
        flat: dict[str, Any] = {}
        for key, value in self.to_json().items():
            if isinstance(value, dict):
                flat.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                flat[key] = value
        return flat
