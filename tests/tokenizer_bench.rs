//! Encode throughput of the tokenizer on the verification corpus (ignored by default: a measurement,
//! not a check). Run: cargo test --release --test tokenizer_bench -- --ignored --nocapture
//! scripts/tokenizer_bench.py measures tiktoken (the reference) on the same strings.
//! Owns: timing only; correctness is tests/tokenizer.rs.

use mk::tokenizer::pretok::{Splitter, QWEN35_PATTERN};
use mk::tokenizer::{Options, Tokenizer};

fn corpus_texts() -> Vec<String> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("goldens/tokenizer/corpus.bin");
    let data = std::fs::read(p).unwrap();
    let mut r = &data[8..];
    let varint = |r: &mut &[u8]| {
        let (mut v, mut s) = (0usize, 0);
        loop {
            let b = r[0];
            *r = &r[1..];
            v |= ((b & 0x7f) as usize) << s;
            if b < 0x80 {
                return v;
            }
            s += 7;
        }
    };
    let n = varint(&mut r);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        r = &r[1..];
        let len = varint(&mut r);
        out.push(String::from_utf8(r[..len].to_vec()).unwrap());
        r = &r[len..];
        let k = varint(&mut r);
        for _ in 0..k {
            varint(&mut r);
        }
        r = &r[8..];
    }
    out
}

/// Best of `reps` runs of `f`, in MB/s of UTF-8 input.
fn best_mbs(bytes: usize, reps: usize, mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut n = 0;
    for _ in 0..reps {
        let t = std::time::Instant::now();
        n = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (bytes as f64 / 1e6 / best, n)
}

#[test]
#[ignore]
fn encode_throughput() {
    let texts = corpus_texts();
    let joined: String = texts.concat();
    let bytes = joined.len();
    for (name, tok) in [
        ("mk (hand-written splitter)", Tokenizer::qwen35().unwrap()),
        (
            "mk (fancy-regex splitter)",
            Tokenizer::with_options(Options { nfc: true, splitter: Splitter::regex(QWEN35_PATTERN).unwrap() }).unwrap(),
        ),
    ] {
        let (each, n1) = best_mbs(bytes, 5, || texts.iter().map(|t| tok.encode(t).unwrap().len()).sum());
        let (one, n2) = best_mbs(bytes, 5, || tok.encode(&joined).unwrap().len());
        println!(
            "{name}: {} strings one by one {each:.2} MB/s ({n1} ids); as one text {one:.2} MB/s ({n2} ids); {:.2} MB",
            texts.len(),
            bytes as f64 / 1e6
        );
    }
}
