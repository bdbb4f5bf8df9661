"""Benchmark values (pure): one streamed request's timings, a concurrency level's summary, a run, and the
cross-check of the client's figures against the server's own `timings` and `/metrics`.

Load model: closed loop. At concurrency c, c workers each send their next request the moment their
previous one finished (no think time), so c requests are in flight all the time. Latency is measured
from the instant a request is written, so a slow answer is never "omitted" (coordinated omission is a
fault of loops that are meant to send at a fixed *rate*; a closed loop makes no rate claim).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_GRID = (1, 4, 8, 16, 32)  # seed 000's reduced grid for an unknown ceiling
DEFAULT_PROMPTS = 4  # requests per concurrent stream at each level
DEFAULT_PROMPT_TOKENS = 512
DEFAULT_OUTPUT_TOKENS = 128


@dataclass(frozen=True)
class BenchSettings:
    """What a sweep sends: levels, requests per stream, exact prompt/output token counts, repetitions."""

    grid: tuple[int, ...] = DEFAULT_GRID
    prompts: int = DEFAULT_PROMPTS
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    repetitions: int = 1

    def requests(self) -> int:
        return sum(c * self.prompts * self.repetitions for c in self.grid)

    def slot_refusal(self, room: int, said: str) -> str | None:
        """Why a request cannot fit the server (`room` tokens a request, `said`: what sets it, from the engine's
        request_room: llama-server's slot of ctx_size/parallel, vLLM's max_model_len), or None. Without it a
        `--prompt-tokens 8192` sweep on a 2048-token slot sent every request and measured errors (or short outputs)
        for minutes; tune refuses such candidates the same way."""
        need = self.prompt_tokens + self.output_tokens
        if need <= room:
            return None
        return (
            f"--prompt-tokens {self.prompt_tokens} + --output-tokens {self.output_tokens} = {need} tokens a "
            f"request, but {said} = {room}: lower them, or raise it and apply"
        )


@dataclass(frozen=True)
class RequestSample:
    """One streamed request, as the client clocked it (monotonic seconds) and as the server reported it."""

    sent: float  # just before the request was written
    first_token: float | None  # the first chunk that carried a generated token
    last_token: float | None
    tokens: int  # generated tokens the stream carried
    prompt_tokens: int
    error: str | None = None
    server: dict[str, float] = field(default_factory=dict)  # the final chunk's `timings`
    first_tokens: int = 1  # tokens the first chunk accounted for (held-back bytes arrive together)
    streamed_tokens: int | None = None  # the count at the last token-carrying chunk (None: `tokens`)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def decode_rate(self) -> float | None:
        """Tokens per second after the first (the first token's time is prompt processing, not decode)."""
        if self.first_token is None or self.last_token is None:
            return None
        decoded = (self.streamed_tokens or self.tokens) - self.first_tokens
        span = self.last_token - self.first_token
        return decoded / span if span > 0 and decoded > 0 else None


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _ratio(client: float | None, server: float | None) -> float | None:
    """(client - server) / server: the client's disagreement with the server, as a fraction."""
    if client is None or not server:
        return None
    return (client - server) / server


@dataclass(frozen=True)
class LevelResult:
    """One concurrency level: the client's figures, the server's, and how far apart they are."""

    concurrency: int
    requests: int
    errors: int
    wall_s: float
    ttft_p50: float | None
    ttft_p95: float | None
    itl_p50: float | None  # inter-token latency, seconds
    decode_p50: float | None  # per-request decode tok/s (median)
    aggregate: float  # generated tokens / wall time of the level
    prompt_rate: float | None  # prompt tokens / TTFT per request (median)
    server_decode_p50: float | None  # timings.predicted_per_second (median)
    server_prompt_p50: float | None  # timings.prompt_per_second (median)
    metrics_tokens: float | None  # llamacpp:tokens_predicted_total moved by this much during the level
    client_tokens: int
    first_error: str | None = None

    @property
    def decode_disagreement(self) -> float | None:
        return _ratio(self.decode_p50, self.server_decode_p50)

    @property
    def prompt_disagreement(self) -> float | None:
        return _ratio(self.prompt_rate, self.server_prompt_p50)

    @property
    def metrics_disagreement(self) -> float | None:
        return _ratio(float(self.client_tokens), self.metrics_tokens)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            decode_disagreement=self.decode_disagreement,
            prompt_disagreement=self.prompt_disagreement,
            metrics_disagreement=self.metrics_disagreement,
        )
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LevelResult:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def summarise(
    concurrency: int, samples: list[RequestSample], wall_s: float, metrics_tokens: float | None
) -> LevelResult:
    ok = [s for s in samples if s.error is None and s.first_token is not None]
    failed = [s for s in samples if s not in ok]
    ttfts = [s.ttft for s in ok if s.ttft is not None]
    rates = [r for r in (s.decode_rate for s in ok) if r]
    prompt_rates = [s.prompt_tokens / s.ttft for s in ok if s.ttft]
    server_decode = [s.server["predicted_per_second"] for s in ok if s.server.get("predicted_per_second")]
    server_prompt = [s.server["prompt_per_second"] for s in ok if s.server.get("prompt_per_second")]
    tokens = sum(s.tokens for s in ok)
    return LevelResult(
        concurrency=concurrency,
        requests=len(samples),
        errors=len(failed),
        wall_s=wall_s,
        ttft_p50=percentile(ttfts, 0.5),
        ttft_p95=percentile(ttfts, 0.95),
        itl_p50=percentile([1 / r for r in rates], 0.5),
        decode_p50=percentile(rates, 0.5),
        aggregate=tokens / wall_s if wall_s > 0 else 0.0,
        prompt_rate=percentile(prompt_rates, 0.5),
        server_decode_p50=percentile(server_decode, 0.5),
        server_prompt_p50=percentile(server_prompt, 0.5),
        metrics_tokens=metrics_tokens,
        client_tokens=tokens,
        first_error=next((s.error for s in failed if s.error), "no token streamed" if failed else None),
    )


@dataclass(frozen=True)
class BenchRun:
    """One sweep against one deployment (its container fingerprint), as kept in state."""

    profile: str
    fingerprint: str
    date: str
    settings: BenchSettings
    levels: tuple[LevelResult, ...]
    knobs: dict[str, Any] = field(default_factory=dict)  # the knobs it ran with (tune's candidates: serve.*, vllm.*)

    def level(self, concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "fingerprint": self.fingerprint,
            "date": self.date,
            "settings": asdict(self.settings),
            "knobs": self.knobs,
            "levels": [lv.to_json() for lv in self.levels],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchRun:
        settings = dict(data["settings"])
        settings["grid"] = tuple(settings["grid"])
        return cls(
            data["profile"],
            data["fingerprint"],
            data["date"],
            BenchSettings(**settings),
            tuple(LevelResult.from_json(lv) for lv in data["levels"]),
            data.get("knobs", {}),
        )


def bench_index_key(profile: str) -> str:
    """The list of this profile's bench runs (keys and fingerprints), newest last."""
    return f"bench/{profile}/index.json"


def bench_run_key(profile: str, fingerprint: str, stamp: str) -> str:
    """One bench run, kept under the deployment fingerprint it measured."""
    return f"bench/{profile}/{fingerprint}/{stamp}.json"
