//! Mutated inputs against the parsers and validators (issue 26): thousands of seeded mutations of a
//! program file, the experiment files, a shard's safetensors header, config.json and the index. Every
//! one must come back as Ok or a one-line error: zero panics. Seeded and deterministic, so a failure
//! names the mutation that broke it.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use mk::model::synth::Rng;

/// One mutation of `text`: a character replaced, inserted or deleted, or a number changed to an
/// extreme (the alphabet is what RON and JSON are made of).
fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut b: Vec<u8> = text.as_bytes().to_vec();
    let at = (rng.next_u64() % b.len().max(1) as u64) as usize;
    const ALPHABET: &[u8] = b"0123456789-.,:()[]{}\"eExNS_ az";
    let c = ALPHABET[(rng.next_u64() % ALPHABET.len() as u64) as usize];
    match rng.next_u64() % 5 {
        0 => b[at] = c,
        1 => b.insert(at, c),
        2 if !b.is_empty() => {
            b.remove(at);
        }
        3 => {
            // a number's digits replaced by a big or negative one
            let big: &[&[u8]] = &[b"4294967295", b"65535", b"0", b"-1", b"18446744073709551615", b"99999999999"];
            let s = big[(rng.next_u64() % big.len() as u64) as usize];
            let end = (at..b.len()).find(|&i| !b[i].is_ascii_digit()).unwrap_or(b.len());
            if at < end {
                b.splice(at..end, s.iter().copied());
            }
        }
        _ => b.truncate(at),
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn no_panic(what: &str, i: usize, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        panic!("{what}: mutation {i} panicked (seeded: rerun this test to reproduce)");
    }
}

#[test]
fn mutated_programs_never_panic_the_reader_validator_or_listing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("programs/tiny.ron")).unwrap();
    let mut rng = Rng::new(26);
    let (mut ok, mut refused) = (0, 0);
    for i in 0..3000 {
        let m = mutate(&text, &mut rng);
        no_panic("program", i, || match mk::isa::Program::from_ron(&m) {
            Ok(p) => {
                ok += 1;
                let _ = mk::isa::validate::validate(&p);
                let _ = mk::isa::report::show(&p);
                let _ = mk::isa::report::stats(&p);
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        });
    }
    assert!(ok > 100 && refused > 100, "the mutations reach both outcomes: {ok} read, {refused} refused");
}

#[test]
fn mutated_experiment_files_never_panic_the_parser() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let mut rng = Rng::new(27);
    let mut files: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.path()).collect();
    files.retain(|p| p.extension().is_some_and(|x| x == "ron"));
    files.sort();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for i in 0..300 {
            let m = mutate(&text, &mut rng);
            no_panic(&f.display().to_string(), i, || {
                let _ = mk::experiment::spec::Experiment::parse(&m);
            });
        }
    }
}

#[test]
fn mutated_checkpoint_headers_configs_and_indexes_never_panic_the_loader() {
    let d = common::copy_of_tiny("fuzz");
    // The small shard (copied, not linked): its header mutated in place, byte by byte.
    let shard = d.join("model-00002-of-00004.safetensors");
    let orig = std::fs::read(&shard).unwrap();
    let hlen = u64::from_le_bytes(orig[..8].try_into().unwrap()) as usize;
    let mut rng = Rng::new(28);
    for i in 0..600 {
        let mut b = orig.clone();
        for _ in 0..1 + rng.next_u64() % 3 {
            let at = (rng.next_u64() % (8 + hlen) as u64) as usize;
            b[at] = if rng.next_u64() % 2 == 0 {
                b"0123456789\"{}[],:ex "[(rng.next_u64() % 20) as usize]
            } else {
                rng.next_u64() as u8
            };
        }
        std::fs::write(&shard, &b).unwrap();
        no_panic("shard header", i, || {
            let _ = mk::model::checkpoint::Checkpoint::open(&d);
        });
    }
    std::fs::write(&shard, &orig).unwrap();
    for name in ["config.json", "model.safetensors.index.json"] {
        let p = d.join(name);
        let text = std::fs::read_to_string(&p).unwrap();
        for i in 0..300 {
            std::fs::write(&p, mutate(&text, &mut rng)).unwrap();
            no_panic(name, i, || {
                let _ = mk::model::checkpoint::Checkpoint::open(&d);
            });
        }
        std::fs::write(&p, &text).unwrap();
    }
    assert!(mk::model::checkpoint::Checkpoint::open(&d).is_ok(), "the restored copy loads again");
}
