"""The tokenizer test corpus: ~22,000 strings, deterministic from a seed.

Owns: what is tested (many scripts, real sentences, code, emoji, combining marks, whitespace runs,
added tokens inside text, contractions, numbers, random scalars, vocabulary fragments, long inputs)
and the context string of the Unicode sweep. Refuses: running any tokenizer (tokenizer_expected.py).
"""

import base64
import random
import unicodedata
from pathlib import Path

CATEGORIES = [
    "script", "sentence", "code", "emoji", "combining", "whitespace", "special",
    "contraction", "number", "random_unicode", "vocab_mix", "long",
]

# Each scalar X of the sweep is also encoded inside this string: after an apostrophe (contractions),
# after a letter and doubled (marks and letters join words), after a space, a digit and punctuation
# (the optional prefixes), before a newline (whitespace alternatives).
SWEEP_CONTEXT = "'XaXX 1X!X\n"

SCRIPTS = {
    "latin": [(0x61, 0x7A), (0x41, 0x5A), (0xC0, 0xFF), (0x100, 0x17F), (0x180, 0x24F)],
    "vietnamese": [(0x1EA0, 0x1EF9)],
    "greek": [(0x391, 0x3C9), (0x1F00, 0x1FFE)],
    "cyrillic": [(0x400, 0x4FF)],
    "armenian": [(0x531, 0x587)],
    "hebrew": [(0x5D0, 0x5EA), (0x5B0, 0x5C7)],
    "arabic": [(0x620, 0x64A), (0x64B, 0x65F), (0x660, 0x669), (0x671, 0x6D3)],
    "devanagari": [(0x900, 0x97F)],
    "bengali": [(0x980, 0x9FF)],
    "tamil": [(0xB80, 0xBFF)],
    "sinhala": [(0xD80, 0xDFF)],
    "thai": [(0xE01, 0xE5B)],
    "lao": [(0xE81, 0xEDF)],
    "tibetan": [(0xF00, 0xFDA)],
    "myanmar": [(0x1000, 0x109F)],
    "georgian": [(0x10A0, 0x10FF)],
    "hangul_jamo": [(0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2)],
    "ethiopic": [(0x1200, 0x137C)],
    "cherokee": [(0x13A0, 0x13F5)],
    "khmer": [(0x1780, 0x17F9)],
    "mongolian": [(0x1820, 0x1878)],
    "hiragana": [(0x3041, 0x309F)],
    "katakana": [(0x30A0, 0x30FF)],
    "cjk": [(0x4E00, 0x9FFF)],
    "cjk_ext_b": [(0x20000, 0x2A6DF)],
    "hangul": [(0xAC00, 0xD7A3)],
    "fullwidth": [(0xFF01, 0xFF5E)],
    "math_alnum": [(0x1D400, 0x1D7FF)],
    "runic": [(0x16A0, 0x16F8)],
}
PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`") + ["。", "、", "،", "।", "¿", "¡", "…", "—", "«", "»", "“", "”", "‘", "’", "・", "!!", "?!"]
MARKS = [(0x300, 0x36F), (0x1AB0, 0x1ACE), (0x1DC0, 0x1DFF), (0x20D0, 0x20F0), (0xFE20, 0xFE2F),
         (0x93A, 0x94F), (0x9BC, 0x9D7), (0xE31, 0xE3A), (0xE47, 0xE4E), (0x5B0, 0x5C7), (0x64B, 0x65F)]
WS = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680",
      "\u2002", "\u2003", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
      "\u200b", "\x1c", "\x1f", "\ufeff"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
            "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
            "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
            "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
            "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
            "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
            "<tts_text_bos_single>", "<|audio_pad|>"]
NEAR_SPECIALS = ["<|im_start", "<|im_start|", "im_start|>", "<|IM_START|>", "<think >", "<<think>>",
                 "</think", "<tool_call", "<|endoftext|", "<|extra_0|>", "<tts_text_bos_singl>", "<|>", "<>",
                 "<|im_end|\u0338>", "<function=get>", "<parameter=x>"]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "Hello, world! How's it going?",
    "I can't believe it's already 2026; we'll see what they've done.",
    "Der schnelle braune Fuchs springt über den faulen Hund.", "Voix ambiguë d'un cœur qui, au zéphyr, préfère les jattes de kiwis.",
    "¿Dónde está la biblioteca? ¡Aquí!", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο.", "ظهرت نتائج الانتخابات في ١٢ مدينة.",
    "עטלף אבק נס דרך מזגן שהתפוצץ כי חם.", "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।",
    "আমি বাংলায় গান গাই।", "யாமறிந்த மொழிகளிலே தமிழ்மொழி போல் இனிதாவது எங்கும் காணோம்.",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน", "ພາສາລາວ ເປັນພາສາທາງການ",
    "我能吞下玻璃而不伤身体。", "いろはにほへと ちりぬるを わかよたれそ つねならむ", "カタカナとひらがなと漢字を混ぜた文。",
    "다람쥐 헌 쳇바퀴에 타고파", "Tiếng Việt có dấu: Nguyễn Thị Minh Khai, phường Đa Kao.",
    "ᐊᓕᒃᑲᖅ ᓄᓇᕗᒻᒥ", "ሰማይ አይታረስ ንጉሥ አይከሰስ።", "Բարեւ Ձեզ, ինչպե՞ս եք:", "გამარჯობა, როგორ ხარ?",
    "ཀུན་མཁྱེན་ཀློང་ཆེན་པ།", "မင်္ဂလာပါ", "សួស្តី​ពិភពលោក", "Ṫḧë qüïċk ḃṛöẅṅ ḟöẍ",
    "naïve café résumé coöperate façade jalapeño", "Zażółć gęślą jaźń", "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Ğüzel İstanbul'da ılık bir gün.", "Þjóðin á ævintýri æðislegt.", "E = mc² and ∑ᵢ xᵢ² ≤ ∞ ≈ π·r²",
    "Price: $1,234.56 (≈ €1.100,00) — 15% off!!!", "Email me at first.last+tag@example.com or visit https://example.org/a?b=c&d=e#f",
    "C:\\Users\\me\\Documents\\file.txt", "    indented line\n\ttabbed line\r\nwindows line",
    "🙂 emoji 👍🏽 and 👨‍👩‍👧‍👦 family, flag 🇯🇵 and ❤️ heart", "ʻOkina and ʼapostrophe modifier letters",
]
CODE_SNIPPETS = [
    "def {f}(x, y=None):\n    \"\"\"Return {f}.\"\"\"\n    if y is None:\n        return x * 2\n    return x + y\n",
    "fn {f}(v: &[u32]) -> Result<u64, Error> {{\n    let s: u64 = v.iter().map(|&x| x as u64).sum();\n    Ok(s)\n}}\n",
    "function {f}(a, b) {{\n  // TODO: handle edge cases\n  return a === b ? `same ${{a}}` : null;\n}}\n",
    "#include <stdio.h>\nint {f}(int argc, char **argv) {{\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}}\n",
    "{{\"name\": \"{f}\", \"values\": [1, 2.5, -3e-4, true, null], \"nested\": {{\"k\": \"v\"}}}}",
    "<div class=\"{f}\">\n  <a href=\"/x?y=1&amp;z=2\">link</a>\n</div>\n",
    "SELECT id, {f} FROM users WHERE age >= 18 AND name LIKE '%a%' ORDER BY id DESC;",
    "for i in $(seq 1 10); do echo \"$i\" | grep -E '^[0-9]+$' >> /tmp/{f}.log; done",
    "class {f}:\n\tdef __init__(self):\n\t\tself.x = [i**2 for i in range(10) if i % 2 == 0]\n",
    "    let {f} = 0x1F_u8 << 3 | 0b1010;\r\n    assert!({f} != 0);\r\n",
    "x = {{'a': 1, 'b': [1,2,3]}}  # comment with 'quotes' and \"double\"\n",
    "@@ -1,3 +1,4 @@\n-old line\n+new line\n+{f}()\n context\n",
    "```python\nprint('{f}')\n```\n",
    "if (a&&b||!c) {{ x+=1; y-=2; z*=3; w/=4; }} // {f}",
    "import numpy as np\n\n\n{f} = np.zeros((3, 4), dtype=np.float32)\n",
]


def _pick(rng, ranges):
    lo, hi = rng.choice(ranges)
    return chr(rng.randint(lo, hi))


def _word(rng, ranges, lo=1, hi=10):
    return "".join(_pick(rng, ranges) for _ in range(rng.randint(lo, hi)))


def _ident(rng):
    return rng.choice(["x", "foo", "bar_baz", "getValue", "HTTPServer", "_private", "snake_case_name", "i18n", "v2"])


def gen_script(rng):
    name = rng.choice(list(SCRIPTS))
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append(_word(rng, SCRIPTS[name]))
        r = rng.random()
        parts.append(" " if r < 0.6 else rng.choice(PUNCT) if r < 0.8 else rng.choice(WS) if r < 0.9 else str(rng.randint(0, 999)))
    return "".join(parts).rstrip(" ") if rng.random() < 0.7 else "".join(parts)


def gen_sentence(rng):
    s = rng.choice(SENTENCES)
    r = rng.random()
    if r < 0.3:
        return s
    if r < 0.5:
        return s + " " + rng.choice(SENTENCES)
    if r < 0.6:
        return unicodedata.normalize("NFD", s)
    if r < 0.7:
        return s.upper()
    if r < 0.8:
        return s[: rng.randint(1, len(s))]
    return rng.choice(WS) + s + rng.choice(WS)


def gen_code(rng):
    s = "".join(rng.choice(CODE_SNIPPETS).format(f=_ident(rng)) for _ in range(rng.randint(1, 2)))
    if rng.random() < 0.2:
        s = s.replace("    ", "\t")
    if rng.random() < 0.2:
        s = s.replace("\n", "\r\n")
    if rng.random() < 0.2:
        s = "\n".join(" " * rng.randint(0, 12) + line for line in s.split("\n"))
    return s


EMOJI = ["😀", "😂", "🥲", "🙂", "👍", "👍🏽", "👍🏿", "❤️", "❤", "✨", "🔥", "🇺🇸", "🇯🇵", "🇩🇪", "👨‍👩‍👧‍👦", "👩🏽‍💻",
         "🏳️‍🌈", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "©️", "™", "🫠", "🧑‍🤝‍🧑", "🐈‍⬛", "☺︎", "♀", "\u2764\ufe0f\u200d\U0001f525"]


def gen_emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.5:
            parts.append(rng.choice(EMOJI))
        elif r < 0.7:
            parts.append(chr(rng.randint(0x1F300, 0x1FAFF)))
        elif r < 0.85:
            parts.append(" " + _word(rng, SCRIPTS["latin"][:1], 2, 7))
        else:
            parts.append(rng.choice([" ", "", "!", "\n", "\u200d", "\ufe0f"]))
    return "".join(parts)


def gen_combining(rng):
    r = rng.random()
    if r < 0.15:  # decomposed words that NFC composes
        return unicodedata.normalize("NFD", rng.choice(SENTENCES))
    if r < 0.25:  # singletons and composition exclusions
        return "".join(rng.choice(["\u2126", "\u212a", "\u212b", "\u0958", "\u0344", "\u0340", "\u1f71", "\u2000", "\uf900", "\u0374", "\u037e", "e\u0301", "\u1100\u1161\u11a8", "\u1100\u1161", "A\u030a"]) + rng.choice(["", " ", "x"]) for _ in range(rng.randint(1, 5)))
    if r < 0.35:  # a combining mark right after an added token's '>' (NFC composes it into another char)
        return rng.choice(["", "a"]) + rng.choice(SPECIALS) + rng.choice(["\u0338", "\u0301", "\u20d2"]) + rng.choice(["", "x", " y"])
    base = rng.choice(["a", "e", "Z", "ß", "1", " ", "!", "\n", "", "क", "ก", "ア", "한", "😀", "'", "<"])
    parts = [base]
    for _ in range(rng.randint(1, 6)):
        parts.append(_pick(rng, MARKS) if rng.random() < 0.7 else _pick(rng, SCRIPTS[rng.choice(["latin", "devanagari", "thai", "arabic", "hebrew"])]))
        if rng.random() < 0.2:
            parts.append(rng.choice([" ", "1", ".", "\n"]))
    return "".join(parts)


def gen_whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.5:
            parts.append("".join(rng.choice(WS) for _ in range(rng.randint(1, 6))))
        elif r < 0.75:
            parts.append(_word(rng, SCRIPTS[rng.choice(["latin", "cyrillic", "cjk"])], 1, 6))
        elif r < 0.9:
            parts.append(rng.choice(PUNCT))
        else:
            parts.append(str(rng.randint(0, 99)))
    return "".join(parts)


def gen_special(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.35:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.5:
            parts.append(rng.choice(NEAR_SPECIALS))
        elif r < 0.8:
            parts.append(rng.choice(["", " ", "\n", "  "]) + _word(rng, SCRIPTS[rng.choice(["latin", "cjk", "arabic"])], 1, 8))
        else:
            parts.append(rng.choice(WS + PUNCT))
    return "".join(parts)


def gen_contraction(rng):
    words = ["it", "I", "we", "they", "you", "don", "can", "Rock", "rock n", "O", "IT", "ſ"]
    tails = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL", "'d", "'D",
             "'ſ", "'x", "'", "''", "'ss", "'r", "'l", "'v", "’s", "'\u0301s", "'s\u0301", "'S\u0307", "'k", "'\u212a"]
    return "".join(rng.choice(["", " ", "\n"]) + rng.choice(words) + rng.choice(tails) + rng.choice(["", " ", "s", "e", "ll", ".", "1"]) for _ in range(rng.randint(1, 5)))


def gen_number(rng):
    digits = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹⁰", "½¼¾", "ⅠⅡⅢⅫ", "①②③", "𝟎𝟏𝟐", "〇一二"]
    parts = []
    for _ in range(rng.randint(1, 6)):
        ds = rng.choice(digits)
        parts.append("".join(rng.choice(ds) for _ in range(rng.randint(1, 15))))
        parts.append(rng.choice(["", " ", ".", ",", "-", "e", "x", "%", " + ", "/", ":", "\n", "a", "é"]))
    return "".join(parts)


def gen_random_unicode(rng):
    out = []
    for _ in range(rng.randint(1, 20)):
        r = rng.random()
        if r < 0.4:
            cp = rng.randint(0, 0xFFFF)
        elif r < 0.7:
            cp = rng.randint(0x10000, 0x3FFFF)
        else:
            cp = rng.randint(0, 0x10FFFF)
        if not 0xD800 <= cp <= 0xDFFF:
            out.append(chr(cp))
    return "".join(out)


def _vocab_pieces():
    path = Path(__file__).resolve().parent.parent / "src" / "tokenizer" / "data" / "qwen3_6.tiktoken"
    pieces = []
    for line in path.read_bytes().splitlines():
        b = base64.b64decode(line.split()[0])
        try:
            pieces.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return pieces


def gen_vocab_mix(rng, pieces):
    sep = rng.choice(["", "", " ", "\n", "'"])
    return sep.join(rng.choice(pieces) for _ in range(rng.randint(1, 10)))


def gen_long(rng, pieces):
    yield "".join(gen_code(rng) for _ in range(150))
    yield " " * 10000
    yield "\n" * 3000 + "x"
    yield "".join(rng.choice([" ", "\t", "\n", "\r\n"]) for _ in range(6000))
    yield "a" * 8000
    yield "!" * 5000 + " " + "=-" * 2000
    yield "".join(rng.choice("0123456789") for _ in range(20000))
    yield "".join(_pick(rng, SCRIPTS["cjk"]) for _ in range(6000))
    yield " ".join(rng.choice(SENTENCES[13:15]) for _ in range(200))
    yield "👨‍👩‍👧‍👦" * 500
    yield base64.b64encode(bytes(rng.randrange(256) for _ in range(12000))).decode()
    yield "https://example.com/" + "/".join(_word(rng, SCRIPTS["latin"][:1], 3, 9) for _ in range(800))
    yield "".join(rng.choice(pieces) + (rng.choice(["<|im_start|>", "<think>", "</tool_call>"]) if rng.random() < 0.05 else "") for _ in range(4000))
    yield "".join(gen_whitespace(rng) for _ in range(400))
    yield "".join(gen_combining(rng) for _ in range(600))
    yield "e" + "\u0301" * 3000
    yield "".join(gen_script(rng) + "\n" for _ in range(300))
    yield "".join(gen_special(rng) for _ in range(500))
    yield "-" * 7000 + "\n" + "=" * 300
    yield "".join(gen_random_unicode(rng) for _ in range(400))


def make_corpus(seed):
    rng = random.Random(seed)
    pieces = _vocab_pieces()
    plan = [("script", 4000, gen_script), ("sentence", 1000, gen_sentence), ("code", 2500, gen_code),
            ("emoji", 1500, gen_emoji), ("combining", 2500, gen_combining), ("whitespace", 2500, gen_whitespace),
            ("special", 1500, gen_special), ("contraction", 1000, gen_contraction), ("number", 1500, gen_number),
            ("random_unicode", 2000, gen_random_unicode), ("vocab_mix", 2000, lambda r: gen_vocab_mix(r, pieces))]
    corpus = []
    for cat, n, gen in plan:
        corpus.extend((cat, gen(rng)) for _ in range(n))
    corpus.extend(("long", s) for s in gen_long(rng, pieces))
    corpus.append(("special", ""))
    return corpus
