"""A server's prompt cache over HTTP, for a fleet rollout's warm step (fleet/warm.py): llama-server's slot API
(`GET /slots`; `POST /slots/{id}?action=save|restore` {"filename"}: files in its --slot-save-path, checked on
b11434's tools/server/server-context.cpp) and a prefill through the OpenAI chat route any engine answers. Reads no
prompt text: /slots is asked for its counts only (llama-server leaves the text out unless slots debugging is on).
Every call carries the server's API key as `Authorization: Bearer` when it has one (llama-server with
--api-key-file answers 401 on all of these routes but /health and /models); the key is never in a message."""

from __future__ import annotations

from typing import Any

import httpx

from kimik3_reconciler.model.api_keys import bearer

SLOT_FILE = (
    "kimik3-warm-{slot}.bin"  # one file per slot id, overwritten by the next rollout (llama.cpp's filename check)
)
TIMEOUT_S = 600.0  # a Kimi-K3 slot's KV cache is GBs, and a hybrid host prefills on the CPU


class SlotCacheError(Exception):
    """The server refused or did not answer a slot action or a prefill (the message names which)."""


def _json(answer: httpx.Response, what: str) -> Any:
    if answer.status_code != 200:
        raise SlotCacheError(f"{what}: HTTP {answer.status_code} {answer.text[:200]}")
    try:
        return answer.json()
    except ValueError:  # a 200 that is not JSON (a proxy's page): a failed warm request, not a crashed rollout step
        raise SlotCacheError(f"{what}: the answer is not JSON: {answer.text[:200]!r}") from None


def _call(method: str, url: str, what: str, api_key: str | None, **kwargs: Any) -> Any:
    try:
        return _json(httpx.request(method, url, timeout=TIMEOUT_S, headers=bearer(api_key), **kwargs), what)
    except httpx.HTTPError as exc:
        raise SlotCacheError(f"{what}: {exc}") from None


def slots(url: str, api_key: str | None, path: str = "/slots") -> list[dict[str, Any]]:
    return _call("GET", f"{url}{path}", "GET /slots", api_key)


def save(url: str, api_key: str | None, slot: int) -> dict[str, Any]:
    """{"n_saved": tokens, "n_written": bytes, ...}"""
    body = {"filename": SLOT_FILE.format(slot=slot)}
    return _call("POST", f"{url}/slots/{slot}", f"save slot {slot}", api_key, params={"action": "save"}, json=body)


def restore(url: str, api_key: str | None, slot: int) -> dict[str, Any]:
    """{"n_restored": tokens, "n_read": bytes, ...}"""
    body = {"filename": SLOT_FILE.format(slot=slot)}
    return _call(
        "POST", f"{url}/slots/{slot}", f"restore slot {slot}", api_key, params={"action": "restore"}, json=body
    )


def model_path(url: str, api_key: str | None) -> str | None:
    """The model file the server opened (llama-server's /props), None where it does not say."""
    try:
        return _call("GET", f"{url}/props", "GET /props", api_key).get("model_path")
    except SlotCacheError:
        return None


def prefill(url: str, api_key: str | None, model: str, body: dict[str, Any], exact: bool) -> dict[str, Any]:
    """One declared prompt put in the server's cache. `exact` (llama-server: engines/base.py `exact_prefill`): its
    messages and tools rendered by the server's own template without the generation prompt (`POST /apply-template`
    {"add_generation_prompt": false}) and that text processed with nothing generated (`POST /completion`
    {"n_predict": 0}), so the slot holds exactly the prefix a conversation's turn starts with. Why not a chat request:
    its cache ends in the assistant's header and a generated token, which a turn does not share; a model with
    recurrent layers (Kimi-K3's KDA) cannot cut its state back to the shared part, only to a context checkpoint
    before it (seen with the demo model, b11434: a turn took 1,651 of the 2,156 tokens it shared with a chat prefill from
    the cache, all 2,156 after this one). Otherwise (vLLM, SGLang: block prefix caches keep every
    full block of the prompt) a chat request generating one token."""
    if exact:
        rendered = _call(
            "POST", f"{url}/apply-template", "prefill: template", api_key, json={**body, "add_generation_prompt": False}
        )
        if not isinstance(rendered, dict) or not isinstance(rendered.get("prompt"), str):  # not counted as prefilled
            raise SlotCacheError("prefill: template: the server's answer holds no prompt")
        request = {"prompt": rendered["prompt"], "n_predict": 0, "cache_prompt": True}
        return _call("POST", f"{url}/completion", "prefill", api_key, json=request)
    request = {**body, "model": model, "max_tokens": 1, "stream": False, "temperature": 0}
    return _call("POST", f"{url}/v1/chat/completions", "prefill", api_key, json=request)
