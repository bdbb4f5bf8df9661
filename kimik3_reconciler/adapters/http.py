"""HTTP: the health probe (standard library), archive downloads (httpx), chat against llama-server (openai).

The probe runs on every plan (the container's /health): one GET on a socket (adapters/http_wire.py) answers
it in well under a millisecond, where `httpx.get` costs its import, httpcore's and a TLS context (~70 ms on
a 2-core machine) for a plain-HTTP request to this host's own server, and `http.client` ~20 ms of imports
(email, ssl). http.client, httpx, tenacity and openai are imported where they are used.
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path
from urllib.parse import urlsplit

from kimik3_reconciler.adapters import http_wire
from kimik3_reconciler.errors import PermanentError, TransientError
from kimik3_reconciler.model.api_keys import bearer


class HttpClient:
    def health(self, url: str) -> str:
        """GET `url` (http://host:port/path, as the container's health-url label says): 200 ok, 503 loading
        (llama-server while it loads), anything else or no answer within 3 s: unreachable. Straight to the
        address, never through an HTTP proxy: it is a server on this host (or its own network)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            return "unreachable"
        try:
            port = parts.port or 80
            with socket.create_connection((parts.hostname, port), timeout=3.0) as sock:
                host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
                status, _, _ = http_wire.get(
                    sock,
                    host if port == 80 else f"{host}:{port}",
                    (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                    body=False,
                )
        except (OSError, http_wire.MalformedAnswer, ValueError):  # refused, reset, timeout, a bad port
            return "unreachable"
        if status == 200:
            return "ok"
        return "loading" if status == 503 else "unreachable"

    def fetch(self, url: str, dest: Path) -> str:
        """Download `url` to `dest` (its sha256), retried on transient failures (4 tries)."""
        from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

        retried = retry(
            retry=retry_if_exception_type(TransientError),
            stop=stop_after_attempt(4),
            wait=wait_exponential(multiplier=1, max=20),
            reraise=True,
        )(self._fetch_once)
        return retried(url, dest)

    def _fetch_once(self, url: str, dest: Path) -> str:
        import httpx

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
        """GET a plain-HTTP URL on this host (the exporter's /healthz on every plan, the server's /metrics and
        /slots on every scrape) with http.client, as `health`: no httpx import on the plan path, no proxy."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            return 0, f"not a plain-HTTP URL: {url}"
        import http.client  # the exporter's scrapes: a long-running process

        headers = bearer(api_key)
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
        try:
            connection.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", errors="replace")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return 0, f"{type(exc).__name__}: {exc}"
        finally:
            connection.close()

    def free_port(self) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def chat(self, base_url: str, model: str, prompt: str, api_key: str | None) -> str:
        from openai import OpenAI

        client = OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "no-key", timeout=120.0, max_retries=1)
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=16,
            temperature=0.0,
        )
        message = reply.choices[0].message
        return message.content or getattr(message, "reasoning_content", None) or ""
