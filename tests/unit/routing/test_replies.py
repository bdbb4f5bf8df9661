"""routing/replies.py: a request's conversation prefixes and a reply's cache counts, as kimik3's router reads them
(the SSE stream cut at any byte, the whole JSON, OpenAI's usage where a server sends no timings)."""

from __future__ import annotations

import json

import pytest

from kimik3_reconciler.routing.replies import BLOCK, ReplyReader, block_keys, cache_counts, request_keys

CHAT = "/v1/chat/completions"


def test_a_chat_request_is_keyed_by_its_message_prefixes_and_the_next_turn_holds_them() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    later = [*first, {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
    keys = request_keys(CHAT, json.dumps({"messages": first}).encode())
    assert keys is not None and len(keys) == 2
    assert request_keys(CHAT, json.dumps({"messages": later}).encode())[:2] == keys


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, b"not json"),
        (CHAT, b"[]"),
        (CHAT, json.dumps({"messages": []}).encode()),
        (CHAT, json.dumps({"messages": ["text"]}).encode()),
        ("/v1/completions", json.dumps({"prompt": ["a", "b"]}).encode()),
        # nested deeper than Python's JSON can parse or write back (a hostile client): not a 500 and a traceback
        (CHAT, b'{"messages":[{"role":"user","content":' + b"[" * 100_000 + b"]" * 100_000 + b"}]}"),
        (CHAT, b'{"messages":[{"role":"user","content":' + b"[" * 5_000 + b"]" * 5_000 + b"}]}"),
        ("/v1/embeddings", json.dumps({"input": "x"}).encode()),
    ],
)
def test_what_cannot_be_keyed_is_none(path: str, body: bytes) -> None:
    assert request_keys(path, body) is None


def test_a_completion_prompt_keeps_its_whole_blocks_keys_when_it_grows() -> None:
    prompt = "x" * (2 * BLOCK + 10)
    grown = prompt + "y" * BLOCK
    assert len(block_keys(prompt)) == 2
    assert block_keys(grown)[:2] == block_keys(prompt)
    assert len(block_keys("short")) == 1
    assert request_keys("/v1/completions", json.dumps({"prompt": prompt}).encode()) == block_keys(prompt)


def test_cache_counts_from_timings_else_usage() -> None:
    assert cache_counts({"timings": {"cache_n": 90, "prompt_n": 10}}) == (90, 10)
    usage = {"usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}}}
    assert cache_counts(usage) == (64, 36)
    assert cache_counts({"timings": {"cache_n": True, "prompt_n": 1}}) is None
    assert cache_counts({"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}}) is None
    assert cache_counts([]) is None


def test_a_stream_cut_anywhere_gives_the_last_events_counts() -> None:
    stream = (
        b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
        b'data: {"choices":[],"timings":{"cache_n":7,"prompt_n":3}}\n\n'
        b"data: [DONE]\n\n"
    )
    for cut in range(1, len(stream)):
        reader = ReplyReader()
        reader.response(200, "text/event-stream")
        reader.chunk(stream[:cut])
        reader.chunk(stream[cut:])
        reader.finish()
        assert reader.counts == (7, 3), cut


def test_a_whole_reply_is_read_at_its_end_and_an_error_says_nothing() -> None:
    body = json.dumps({"timings": {"cache_n": 5, "prompt_n": 5}}).encode()
    reader = ReplyReader()
    reader.response(200, "application/json")
    reader.chunk(body[:9])
    reader.chunk(body[9:])
    reader.finish()
    assert reader.counts == (5, 5)
    failed = ReplyReader()
    failed.response(500, "application/json")
    failed.chunk(body)
    failed.finish()
    assert failed.counts is None
