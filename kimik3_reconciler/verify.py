"""Ask the profile's running llama-server for a chat completion (the start of `kimik3 verify`)."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.engine import Engine
from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.profile_source import LoadedProfile


def chat_once(engine: Engine, loaded: LoadedProfile, prompt: str) -> str:
    observed = engine.observe(loaded)
    container = observed.container
    if container is None or container.state != "running" or container.health != "ok":
        state = "absent" if container is None else f"{container.state}, health {container.health}"
        raise PermanentError(f"{loaded.profile.name} is not serving ({state}); run `kimik3 apply` first")
    base_url = container.inputs and f"http://{_probe(container.inputs)}:{loaded.profile.serve.port}"
    key = None
    if observed.inputs.api_key_file:
        # Read at the last moment, held only for the request, never logged.
        lines = Path(observed.inputs.api_key_file).read_text().splitlines()
        key = next((ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")), None)
    return engine.ports.http.chat(base_url, loaded.profile.name, prompt, key)


def _probe(inputs: dict[str, object]) -> str:
    bind = str(inputs.get("host.bind", "127.0.0.1"))
    if bind in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{bind}]" if ":" in bind else bind
