"""ChatPort through the openai client: llama-server's /v1/models, /v1/chat/completions and /apply-template as
plain dicts.

The client never retries a completion by itself (max_retries=0): verify counts and bounds its own retries
of an unparsed tool call, and an SDK retry would hide one (llama-server answers HTTP 500 when the model's
output does not match the chat format) and double a generation that takes minutes on a real quant.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from kimik3_reconciler.adapters.translate import translated
from kimik3_reconciler.errors import Kimik3Error, PermanentError, TransientError
from kimik3_reconciler.ports import ChatRequest

# llama-server serves one model and answers to any name (checked on b11434); vLLM only to its served name (404
# otherwise): verify sends the profile's name, which both serve under (--alias, --served-model-name). A caller
# without one gets this fixed name (llama-server only).
_MODEL = "kimik3-verify"
# The reasoning is `reasoning_content` from llama-server, `reasoning` from vLLM (engines/base.py reasoning_field).
_MESSAGE_FIELDS = ("role", "content", "reasoning_content", "reasoning", "tool_calls")
# A real quant thinks, then answers: 1024 tokens at the hybrid's 5.8 tok/s (seed 000) is ~3 minutes.
_TIMEOUT_S = 600.0

if TYPE_CHECKING:
    import openai


def _openai() -> Any:
    """Imported on first use: the SDK costs ~0.3 s, and only verify needs it (not plan or a no-op apply)."""
    import openai

    return openai


class OpenAIChat:
    def models(self, base_url: str, api_key: str | None) -> dict[str, Any]:
        # llama-server adds `aliases` (and a top-level `models`) that the typed page drops: keep its raw JSON.
        with _client(base_url, api_key) as client, _translated(base_url, api_key):
            return client.models.with_raw_response.list().http_response.json()

    def chat(self, request: ChatRequest) -> dict[str, Any]:
        base_url, api_key, tools = request.base_url, request.api_key, request.tools
        extra: dict[str, Any] = {"tools": tools, "tool_choice": "auto"} if tools else {}
        if (
            request.thinking_effort
        ):  # the Kimi-K3 chat template's own variable (default "max"), via llama-server's kwargs
            extra["extra_body"] = {"chat_template_kwargs": {"thinking_effort": request.thinking_effort}}
        with _client(base_url, api_key) as client, _translated(base_url, api_key):
            reply = client.chat.completions.create(
                model=request.model or _MODEL, messages=request.messages, max_tokens=request.max_tokens, **extra
            )
        if not reply.choices:
            raise PermanentError(f"{base_url}: the chat completion has no choices")
        choice = reply.choices[0]
        # model_dump keeps fields the SDK does not type (llama-server's reasoning_content, vLLM's reasoning).
        dumped = choice.message.model_dump(exclude_none=True)
        message = {k: dumped[k] for k in _MESSAGE_FIELDS if k in dumped}
        message.setdefault("content", None)
        return {"message": message, "finish_reason": choice.finish_reason}

    def apply_template(self, request: ChatRequest) -> str:
        # llama-server's POST /apply-template (at the root, not under /v1): the prompt its chat template
        # renders from these messages, as a completion would see it; nothing is generated. vLLM has none (404): its
        # POST /tokenize renders the same messages through its chat template, and /detokenize gives the text back.
        base_url, api_key, tools = request.base_url, request.api_key, request.tools
        body: dict[str, Any] = {"messages": request.messages, **({"tools": tools} if tools else {})}
        with _client(base_url, api_key) as client, _translated(base_url, api_key):
            try:
                answer = client.post(f"{base_url}/apply-template", cast_to=object, body=body)
            except _openai().NotFoundError:
                named = {"model": request.model or _MODEL}
                tokens = client.post(
                    f"{base_url}/tokenize", cast_to=object, body={**named, **body, "add_generation_prompt": True}
                )
                if not isinstance(tokens, dict) or not isinstance(tokens.get("tokens"), list):
                    raise PermanentError(f"{base_url}/tokenize: no tokens in the answer") from None
                answer = client.post(
                    f"{base_url}/detokenize", cast_to=object, body={**named, "tokens": tokens["tokens"]}
                )
        if not isinstance(answer, dict) or not isinstance(answer.get("prompt"), str):
            raise PermanentError(f"{base_url}/apply-template: no prompt in the answer")
        return answer["prompt"]


def _client(base_url: str, api_key: str | None) -> openai.OpenAI:
    return _openai().OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "no-key", timeout=_TIMEOUT_S, max_retries=0)


def _translated(base_url: str, api_key: str | None) -> AbstractContextManager[None]:
    """openai's exceptions in kimik3's error tree; the api key reaches neither a message nor a cause."""

    def redact(text: str) -> str:
        return text.replace(api_key, "***") if api_key else text

    def chat_error(exc: Exception) -> Kimik3Error | None:
        openai = _openai()
        if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError: the server may come back
            return TransientError(redact(f"{base_url}: {exc}"))
        if isinstance(exc, openai.APIStatusError):
            return PermanentError(redact(f"{base_url}: HTTP {exc.status_code}: {_server_message(exc)}"))
        if isinstance(exc, (openai.OpenAIError, ValueError)):  # ValueError: a body that is not JSON
            return PermanentError(redact(f"{base_url}: {type(exc).__name__}: {exc}"))
        return None

    return translated(chat_error, hide_cause=True)


def _server_message(exc: openai.APIStatusError) -> str:
    """llama-server's `{"error": {"message": …}}`, else the SDK's text."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(exc)
