//! Shared test support: one synthetic tiny checkpoint per test process, and cheap private copies of
//! it (big shards are symlinked, small files copied) that a test may corrupt.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mk::model::{config::ModelConfig, synth};

pub const SEED: u64 = 0;

/// Where the tests' scratch folders live: cargo's per-target temporary folder (target/tmp), never the
/// system's temporary folder (a test run leaves nothing there; `cargo clean` removes this one).
fn scratch_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// This test process's scratch folder. The harness has no teardown, so the first call removes the
/// folders of earlier test processes that are no longer running (each holds a 0.5 GB checkpoint).
pub fn scratch() -> PathBuf {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(sweep_stale_scratch);
    let d = scratch_root().join(format!("mk-tests-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sweep_stale_scratch() {
    if !Path::new("/proc/self").exists() {
        return; // (no process table to ask: leave them)
    }
    let Ok(entries) = std::fs::read_dir(scratch_root()) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("mk-tests-")).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The tiny preset's synthetic checkpoint (seed 0), generated once per test process.
pub fn tiny() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = scratch().join("tiny");
        synth::write_checkpoint(&ModelConfig::preset("tiny").unwrap(), SEED, &d).unwrap();
        d
    })
}

/// A private copy of the tiny checkpoint: files over 50 MB are symlinks (never corrupt those).
pub fn copy_of_tiny(tag: &str) -> PathBuf {
    let src = tiny();
    let dst = scratch().join(tag);
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let to = dst.join(p.file_name().unwrap());
        if std::fs::metadata(&p).unwrap().len() > 50 << 20 {
            std::os::unix::fs::symlink(&p, &to).unwrap();
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
    dst
}

/// The (small, copied) shard holding `tensor`.
pub fn shard_of(dir: &Path, tensor: &str) -> PathBuf {
    let idx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap()).unwrap();
    dir.join(idx["weight_map"][tensor].as_str().unwrap())
}

pub struct RawTensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Reads a shard into raw tensors (in file order).
pub fn read_raw(path: &Path) -> Vec<RawTensor> {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let h: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&b[8..8 + n]).unwrap();
    let mut out: Vec<RawTensor> = h
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let o = v["data_offsets"].as_array().unwrap();
            let (s, e) = (o[0].as_u64().unwrap() as usize, o[1].as_u64().unwrap() as usize);
            RawTensor {
                name: k.clone(),
                dtype: v["dtype"].as_str().unwrap().to_string(),
                shape: v["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect(),
                data: b[8 + n + s..8 + n + e].to_vec(),
            }
        })
        .collect();
    out.sort_by_key(|t| t.data.as_ptr() as usize);
    out
}

/// Writes raw tensors as a safetensors shard (header exactly as declared: shapes are not checked).
pub fn write_raw(path: &Path, tensors: &[RawTensor]) {
    let mut header = serde_json::Map::new();
    let mut off = 0;
    for t in tensors {
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + t.data.len()]}),
        );
        off += t.data.len();
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    for t in tensors {
        out.extend(&t.data);
    }
    let _ = std::fs::remove_file(path);
    std::fs::write(path, out).unwrap();
}

/// Rewrites the index's weight_map from the shards' contents.
pub fn reindex(dir: &Path) {
    let mut map = serde_json::Map::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    for f in files {
        for t in read_raw(&f) {
            map.insert(t.name, serde_json::json!(f.file_name().unwrap().to_string_lossy()));
        }
    }
    let idx = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), serde_json::to_string_pretty(&idx).unwrap()).unwrap();
}

/// The first state of the interpreter `it` whose bits differ from the reference state `st`: every conv
/// ring and recurrent state whole, the KV caches below position `kv_positions` (None: whole).
pub fn state_difference(
    it: &mk::exec::interp::Interp,
    st: &mk::model::forward::State,
    kv_dim: usize,
    kv_positions: Option<usize>,
) -> Option<String> {
    let bits = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let named = |name: &str| it.buffer(name).unwrap().to_vec();
    for (l, ring) in st.conv.iter().enumerate() {
        if !bits(ring, &named(&format!("conv_state.{l}"))) {
            return Some(format!("conv state {l} differs"));
        }
    }
    for (l, rec) in st.recurrent.iter().enumerate() {
        if !bits(rec, &named(&format!("recurrent_state.{l}"))) {
            return Some(format!("recurrent state {l} differs"));
        }
    }
    for (l, (k, v)) in st.k_cache.iter().zip(&st.v_cache).enumerate() {
        let (gk, gv) = (named(&format!("k_cache.{l}")), named(&format!("v_cache.{l}")));
        let n = kv_positions.map_or(k.len(), |p| kv_dim * p);
        if !bits(&k[..n], &gk[..n]) || !bits(&v[..n], &gv[..n]) {
            return Some(format!("KV cache {l} differs"));
        }
    }
    None
}

/// The first state buffer in which `a` differs from `b`, bit for bit (GDN states, KV rows below `n`,
/// the position), or None.
pub fn first_difference(a: &mk::model::forward::State, b: &mk::model::forward::State, n: usize) -> Option<String> {
    let bits = |x: &[f32], y: &[f32]| x.iter().zip(y).position(|(p, q)| p.to_bits() != q.to_bits());
    for l in 0..a.recurrent.len() {
        if let Some(e) = bits(&a.recurrent[l], &b.recurrent[l]) {
            return Some(format!("GDN layer {l} recurrent state, element {e}"));
        }
        if let Some(e) = bits(&a.conv[l], &b.conv[l]) {
            return Some(format!("GDN layer {l} conv state, element {e}"));
        }
    }
    for l in 0..a.k_cache.len() {
        let kv = a.k_cache[l].len() / a.max_context;
        if let Some(e) = bits(&a.k_cache[l][..n * kv], &b.k_cache[l][..n * kv]) {
            return Some(format!("attention layer {l} keys, element {e} (position {})", e / kv));
        }
        if let Some(e) = bits(&a.v_cache[l][..n * kv], &b.v_cache[l][..n * kv]) {
            return Some(format!("attention layer {l} values, element {e} (position {})", e / kv));
        }
    }
    (a.pos != b.pos).then(|| format!("position {} vs {}", a.pos, b.pos))
}
