"""FakeLoad (LoadPort): the load generator `kimik3 bench` drives, as a deterministic server."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.ports import LoadLevel


class FakeLoad:
    """LoadPort: a byte tokenizer, a `/metrics` counter that moves by what each level generated, and a
    server that streams every request's tokens at `rate` tok/s after a `ttft` (seconds, per request)."""

    def __init__(self, ttft: float = 0.5, rate: float = 20.0, failing: int = 0) -> None:
        self.ttft, self.rate, self.failing = ttft, rate, failing
        self.predicted = 0
        self.levels: list[tuple[int, list[list[int]], int]] = []
        self.wires: set[str] = set()  # the engines' wires it was driven on

    def tokenize(self, base_url: str, api_key: str | None, text: str, wire: str = "native") -> list[int]:
        self.wires.add(wire)
        return list(text.encode())

    def metrics(self, base_url: str, api_key: str | None) -> str | None:
        if "openai" in self.wires:  # vLLM's counter, labelled as vLLM labels it
            return f'vllm:generation_tokens_total{{engine="0",model_name="k3"}} {self.predicted}.0\n'
        return f"# HELP llamacpp:tokens_predicted_total x\nllamacpp:tokens_predicted_total {self.predicted}\n"

    def run_level(self, level: LoadLevel) -> tuple[list[Any], float]:
        from kimik3_reconciler.model.bench import RequestSample

        prompts, output_tokens, concurrency, wire = level.prompts, level.output_tokens, level.concurrency, level.wire
        self.levels.append((concurrency, prompts, output_tokens))
        self.wires.add(wire)
        samples = []
        span = (output_tokens - 1) / self.rate
        for i, prompt in enumerate(prompts):
            if i < self.failing:
                samples.append(RequestSample(0.0, None, None, 0, len(prompt), "HTTP 503: busy"))
                continue
            start = (i // concurrency) * (self.ttft + span)
            server = {"predicted_per_second": self.rate, "prompt_per_second": len(prompt) / self.ttft}
            samples.append(
                RequestSample(
                    start, start + self.ttft, start + self.ttft + span, output_tokens, len(prompt), None, server
                )
            )
            self.predicted += output_tokens
        rounds = -(-len(prompts) // concurrency)
        return samples, rounds * (self.ttft + span)
