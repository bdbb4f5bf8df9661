"""HTTP through httpx (health, archive downloads) and the openai client (chat against llama-server)."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import httpx
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from kimik3_reconciler.errors import PermanentError, TransientError


class HttpClient:
    def health(self, url: str) -> str:
        try:
            response = httpx.get(url, timeout=3.0)
        except httpx.HTTPError:
            return "unreachable"
        if response.status_code == 200:
            return "ok"
        return "loading" if response.status_code == 503 else "unreachable"

    @retry(retry=retry_if_exception_type(TransientError), stop=stop_after_attempt(4),
           wait=wait_exponential(multiplier=1, max=20), reraise=True)
    def fetch(self, url: str, dest: Path) -> str:
        partial = dest.with_name(dest.name + ".partial")
        digest = hashlib.sha256()
        try:
            with httpx.stream("GET", url, follow_redirects=True, timeout=60.0) as response:
                if response.status_code >= 500:
                    raise TransientError(f"{url}: HTTP {response.status_code}")
                if response.status_code != 200:
                    raise PermanentError(f"{url}: HTTP {response.status_code}")
                with open(partial, "wb") as out:
                    for block in response.iter_bytes(1 << 20):
                        digest.update(block)
                        out.write(block)
        except httpx.TransportError as exc:
            raise TransientError(f"{url}: {exc}") from exc
        partial.replace(dest)
        return digest.hexdigest()

    def get(self, url: str, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            response = httpx.get(url, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            return 0, f"{type(exc).__name__}: {exc}"
        return response.status_code, response.text

    def free_port(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def chat(self, base_url: str, model: str, prompt: str, api_key: str | None) -> str:
        from openai import OpenAI

        client = OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "no-key", timeout=120.0, max_retries=1)
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=16, temperature=0.0,
        )
        message = reply.choices[0].message
        return message.content or getattr(message, "reasoning_content", None) or ""
