"""Seed 000's measured limit of speculative decoding that generic code reads: the concurrency at which the draft
lost (the draft rules of engines/llamacpp/rules/drafts.py warn of it; the exporter's watch says when a server decodes
that many together with the draft)."""

from __future__ import annotations

# Seed 000: speculative decoding gained at c1 and lost at c4 (4 concurrent requests).
SPEC_LOSS_CONCURRENCY = 4
