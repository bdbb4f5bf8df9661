"""adapters/slot_cache.py's reading of a server's answers: whatever comes back, a warm request fails as
SlotCacheError (the warm step counts it and the rollout goes on), never as another exception that would stop
`router: in` before the host is back in the router."""

from __future__ import annotations

import httpx
import pytest

from kimik3_reconciler.adapters import slot_cache
from kimik3_reconciler.adapters.slot_cache import SlotCacheError


def test_a_200_that_is_not_json_is_a_failed_request() -> None:
    with pytest.raises(SlotCacheError, match="GET /slots: the answer is not JSON"):
        slot_cache._json(httpx.Response(200, text="<html>proxy</html>"), "GET /slots")


def test_a_refusal_names_its_status() -> None:
    with pytest.raises(SlotCacheError, match="save slot 0: HTTP 401"):
        slot_cache._json(httpx.Response(401, text='{"error": "Invalid API Key"}'), "save slot 0")


def test_a_template_answer_without_a_prompt_is_not_prefilled(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = []

    def answer(method: str, url: str, **kwargs: object) -> httpx.Response:
        sent.append(url)
        return httpx.Response(200, json={"unexpected": True})

    monkeypatch.setattr(httpx, "request", answer)
    with pytest.raises(SlotCacheError, match="holds no prompt"):
        slot_cache.prefill("http://h:8080", None, "m", {"messages": []}, exact=True)
    assert sent == ["http://h:8080/apply-template"]  # nothing sent to /completion


@pytest.mark.parametrize(
    ("exact", "route"),
    [(True, ["/apply-template", "/completion"]), (False, ["/v1/chat/completions"])],
)
def test_the_engines_exact_prefill_chooses_the_route(
    exact: bool, route: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """engines/base.py `exact_prefill`: llama-server's template-rendered prefix processed with nothing generated, or a
    chat request generating one token (vLLM, SGLang)."""
    sent = []

    def answer(method: str, url: str, **kwargs: object) -> httpx.Response:
        sent.append((url.removeprefix("http://h:8080"), kwargs.get("json")))
        return httpx.Response(200, json={"prompt": "<|im_system|>…"})

    monkeypatch.setattr(httpx, "request", answer)
    slot_cache.prefill("http://h:8080", None, "m", {"messages": [{"role": "user", "content": "hi"}]}, exact=exact)
    assert [path for path, _ in sent] == route
    last = sent[-1][1]
    assert (last["n_predict"], last["prompt"]) == (0, "<|im_system|>…") if exact else last["max_tokens"] == 1
