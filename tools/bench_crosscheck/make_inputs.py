"""llama-benchy's inputs without the internet: a byte-level tokenizer.json matching the demo GGUF's vocabulary
(token id = byte value, as the demo server's /tokenize answers) and the text it would download, pre-seeded in
its cache under the md5 of a made-up URL."""

import hashlib
import os
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def bytes_to_unicode() -> dict[int, str]:  # GPT-2's byte <-> printable character table
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


table = bytes_to_unicode()
tok = Tokenizer(models.BPE(vocab={table[b]: b for b in range(256)}, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
tok.decoder = decoders.ByteLevel()
tok.save("tokenizer.json")
cache = Path(os.path.expanduser("~/.cache/llama-benchy"))
cache.mkdir(parents=True, exist_ok=True)
book = os.environ.get("BOOK") or str(Path(__file__).resolve().parents[2] / "docs" / "design.md")
text = Path(book).read_text() * 3
(cache / (hashlib.md5(b"file:///local/book.txt").hexdigest() + ".txt")).write_text(text)
