//! Synthetic checkpoints in exactly the real release format, deterministic from a seed.
//!
//! Owns: `mk synth`: `config.json`, safetensors shards named like a release
//! (`model-00001-of-0000N.safetensors`) and `model.safetensors.index.json`, every tensor of
//! `tensors::expected_tensors` with the real name, dtype and shape. Tensors are generated one at a
//! time and streamed to disk (peak memory: the largest tensor), in parallel row blocks whose random
//! streams depend only on (seed, tensor name, block), so the bytes do not depend on the thread count.
//!
//! Refuses: floating-point library calls (exp, log, sin) in generation. Every value comes from integer
//! arithmetic and IEEE basic operations, so the same seed gives the same bytes on every machine
//! (goldens recorded on the GPU machine are checked here against a regenerated checkpoint).
//!
//! ## Magnitudes (why the numbers below)
//! Random values are Irwin-Hall(4) sums of random bytes: a bell shape with unit variance after
//! centring, bounded at +-3.45 sigma. With that:
//! - Projections that read a normalised vector (q/k/v, qkv, z, gate/up, b/a) have std 1/sqrt(in),
//!   so their outputs have unit variance; projections that write into the residual stream (o_proj,
//!   out_proj, down_proj) have std 0.5/sqrt(in), so each of the 2 x 64 additions adds roughly a
//!   quarter of a unit of variance to an embedding of unit variance: the residual stream grows like a
//!   real model's (a few times over 64 layers) and stays finite in bf16.
//! - Norm weights are zero-centred offsets of std 0.1 (used as 1 + w); the GDN gated-norm weight is
//!   1 + 0.1 z (a plain weight). The conv taps have std 0.5 (4 taps: unit output variance).
//! - GDN gates: A = exp(A_log) spans e^-3 .. e^0.5 and dt_bias is about -1.5, so the per-step decay
//!   exp(g) ranges from 0.7 to 0.99: heads with short and long memory, as trained models have.
//! - The lm_head has std LM_GAIN/sqrt(hidden) with a per-row multiplier (1 + z/4)^2: row norms vary
//!   (like token-frequency effects in trained heads), which gives the logit distribution a heavier
//!   upper tail than a Gaussian and so realistic top-1 margins. Measured with `mk stats` (README).
//! - fp8 blocks are scale-to-fit: every 128x128 block's largest |e4m3| is 448 (one element is set to
//!   +-448 if the draw did not reach it); scales vary by +-25 % between blocks.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use super::config::ModelConfig;
use super::numerics::{f32_to_bf16, f32_to_e4m3};
use super::tensors::{expected_tensors, Role, TensorSpec};
use crate::error::{Context, Result};

/// Logit scale of the synthetic lm_head (see the module comment).
pub const LM_GAIN: f32 = 3.0;

/// SplitMix64: tiny, fast, and its output stream is fixed forever (a crate's might change).
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Irwin-Hall(4) byte sum in 0..=1020.
    #[inline(always)]
    fn ih_sum(bits: u32) -> usize {
        ((bits & 0xFF) + ((bits >> 8) & 0xFF) + ((bits >> 16) & 0xFF) + (bits >> 24)) as usize
    }
    /// Approximately standard normal (Irwin-Hall(4), unit variance, |z| <= 3.45).
    pub fn normal(&mut self) -> f32 {
        ih_z(Rng::ih_sum(self.next_u64() as u32))
    }
}

const IH_MEAN: f32 = 510.0;
/// sqrt(4 * (256^2 - 1) / 12): the std of a sum of four uniform bytes.
const IH_STD: f32 = 147.801_22;

fn ih_z(s: usize) -> f32 {
    (s as f32 - IH_MEAN) / IH_STD
}

/// FNV-1a of a name: decorrelates the streams of different tensors.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// The random stream of one row block of one tensor.
fn stream(seed: u64, name: &str, block: u64) -> Rng {
    let mut r = Rng::new(seed ^ fnv1a(name) ^ block.wrapping_mul(0xD1B5_4A32_D192_ED03));
    r.next_u64();
    r
}

/// e4m3 codes of the Irwin-Hall values scaled so that the extreme draw maps to 448, and the std of
/// the code values under the Irwin-Hall distribution (to pick block scales for a target std).
struct Fp8Table {
    code: Vec<u8>,
    code_std: f32,
}

fn fp8_table() -> Fp8Table {
    let zmax = ih_z(1020);
    let code: Vec<u8> = (0..=1020).map(|s| f32_to_e4m3(ih_z(s) * (448.0 / zmax))).collect();
    // Exact Irwin-Hall(4) pmf by integer convolution of four uniform bytes.
    let mut pmf = vec![1u64; 256];
    for _ in 1..4 {
        let mut next = vec![0u64; pmf.len() + 255];
        for (i, p) in pmf.iter().enumerate() {
            for n in next[i..i + 256].iter_mut() {
                *n += p;
            }
        }
        pmf = next;
    }
    let t = super::numerics::e4m3_table();
    let total = (1u64 << 32) as f64;
    let var: f64 = pmf.iter().zip(&code).map(|(p, c)| *p as f64 * (t[*c as usize] as f64).powi(2)).sum::<f64>() / total;
    Fp8Table { code, code_std: var.sqrt() as f32 }
}

/// Rows per parallel work unit (one fp8 scale block row).
const BLOCK_ROWS: usize = 128;

/// A tensor whose bytes are generated when the writer asks for them.
struct LazyTensor<'a> {
    spec: &'a TensorSpec,
    st_shape: Vec<usize>,
    seed: u64,
    fp8: &'a Fp8Table,
}

impl safetensors::View for LazyTensor<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        self.spec.dtype.st()
    }
    fn shape(&self) -> &[usize] {
        &self.st_shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(generate(self.spec, self.seed, self.fp8))
    }
    fn data_len(&self) -> usize {
        self.spec.bytes()
    }
}

/// Fills a tensor's bytes, row blocks in parallel.
fn generate(spec: &TensorSpec, seed: u64, fp8: &Fp8Table) -> Vec<u8> {
    let rows = spec.shape[0];
    let row_bytes = spec.bytes() / rows;
    let mut out = vec![0u8; spec.bytes()];
    let chunk = BLOCK_ROWS * row_bytes;
    let blocks: Vec<(usize, &mut [u8])> = out.chunks_mut(chunk).enumerate().collect();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(blocks.len().max(1));
    let mut per_thread: Vec<Vec<(usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, b) in blocks {
        per_thread[i % threads].push((i, b));
    }
    std::thread::scope(|s| {
        for work in per_thread {
            s.spawn(move || {
                for (blk, bytes) in work {
                    fill_block(spec, seed, fp8, blk, bytes);
                }
            });
        }
    });
    out
}

fn put_bf16(dst: &mut [u8], i: usize, v: f32) {
    dst[2 * i..2 * i + 2].copy_from_slice(&f32_to_bf16(v).to_le_bytes());
}

/// Generates rows [blk*128, blk*128 + n) of a tensor into `dst`.
fn fill_block(spec: &TensorSpec, seed: u64, fp8: &Fp8Table, blk: usize, dst: &mut [u8]) {
    let mut rng = stream(seed, &spec.name, blk as u64);
    let cols: usize = spec.shape[1..].iter().product();
    let n = dst.len() / spec.dtype.bytes();
    match spec.role {
        Role::Linear { fp8: true, .. } => {
            // Codes only; the matching scales come from `fill_scales` with the same block streams.
            for pair in dst.chunks_mut(2) {
                let bits = rng.next_u64();
                pair[0] = fp8.code[Rng::ih_sum(bits as u32)];
                if let Some(d) = pair.get_mut(1) {
                    *d = fp8.code[Rng::ih_sum((bits >> 32) as u32)];
                }
            }
            // Scale-to-fit: make sure every 128x128 block of this row block holds a +-448.
            let rows = dst.len() / cols;
            for cb in 0..cols.div_ceil(128) {
                let (r, c) =
                    ((rng.next_u64() as usize) % rows, cb * 128 + (rng.next_u64() as usize) % 128.min(cols - cb * 128));
                let v = &mut dst[r * cols + c];
                *v = (*v & 0x80) | 0x7E;
            }
        }
        Role::Scale => {
            // One scale per 128x128 block: std / code_std, jittered by +-25 %.
            let Role::Linear { gain, .. } = linear_role_for_scale(spec) else { unreachable!() };
            let in_features = spec.shape[1] * 128;
            let target = gain / (in_features as f32).sqrt();
            for i in 0..n {
                let jitter = 0.75 + 0.5 * rng.uniform();
                put_bf16(dst, i, target / fp8.code_std * jitter);
            }
        }
        Role::LmHead => {
            let sigma = LM_GAIN / (cols as f32).sqrt();
            for r in 0..n / cols {
                let m = 1.0 + 0.25 * rng.normal();
                let row_sigma = sigma * m * m;
                for c in 0..cols {
                    put_bf16(dst, r * cols + c, rng.normal() * row_sigma);
                }
            }
        }
        role => {
            let (offset, sigma, uniform) = match role {
                Role::Linear { gain, .. } => (0.0, gain / (cols as f32).sqrt(), false),
                Role::Embedding => (0.0, 1.0, false),
                Role::NormOffset => (0.0, 0.1, false),
                Role::NormPlain => (1.0, 0.1, false),
                Role::Conv1d => (0.0, 0.5, false),
                // A_log uniform in [-3, 0.5): A = exp(A_log) in [0.05, 1.65].
                Role::ALog => (-3.0, 3.5, true),
                Role::DtBias => (-1.5, 0.5, false),
                Role::Scale | Role::LmHead => unreachable!(),
            };
            for i in 0..n {
                let r = if uniform { rng.uniform() } else { rng.normal() };
                put_bf16(dst, i, offset + sigma * r);
            }
        }
    }
}

/// The scale tensor of `x.weight_scale_inv` takes its gain from the linear `x.weight`.
fn linear_role_for_scale(spec: &TensorSpec) -> Role {
    let name = &spec.name;
    let gain = if name.contains("o_proj") || name.contains("out_proj") || name.contains("down_proj") {
        super::tensors::GAIN_OUT
    } else {
        super::tensors::GAIN_IN
    };
    Role::Linear { fp8: true, gain }
}

/// Groups tensors into shards of at most `target` bytes (whole layers together where they fit).
fn plan_shards(specs: &[TensorSpec], target: usize) -> Vec<Vec<&TensorSpec>> {
    let mut shards: Vec<Vec<&TensorSpec>> = vec![Vec::new()];
    let mut size = 0;
    for s in specs {
        if size > 0 && size + s.bytes() > target {
            shards.push(Vec::new());
            size = 0;
        }
        size += s.bytes();
        if let Some(last) = shards.last_mut() {
            last.push(s);
        }
    }
    shards
}

/// Writes a synthetic checkpoint of `cfg` into `out` (created if missing). Returns bytes written.
/// Refuses to write a checkpoint into a folder that holds files, unless `force` (then its checkpoint
/// files are replaced).
pub fn check_out(out: &Path, force: bool) -> Result<()> {
    let n = std::fs::read_dir(out).map(|d| d.count()).unwrap_or(0);
    if n > 0 && !force {
        crate::bail!("synth: {} is not empty ({n} entries); --force writes into it", out.display());
    }
    Ok(())
}

/// Writes the checkpoint: each shard as `<name>.partial` renamed when complete (a write cut short
/// leaves no shard that looks whole, and the next write removes the partial), then the index and
/// config.json last: a folder with config.json is complete.
pub fn write_checkpoint(cfg: &ModelConfig, seed: u64, out: &Path) -> Result<u64> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let _ = std::fs::remove_file(out.join("config.json")); // (incomplete until written again, last)
    for e in std::fs::read_dir(out).with_context(|| format!("read {}", out.display()))?.flatten() {
        if e.file_name().to_string_lossy().ends_with(".partial") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let specs = expected_tensors(cfg);
    let total: usize = specs.iter().map(|s| s.bytes()).sum();
    // A real release uses ~4-5 GB shards; small models still get several shards so the index path
    // is always exercised.
    let target = (total / 3).clamp(1, 4 << 30);
    let shards = plan_shards(&specs, target);
    let fp8 = fp8_table();
    let mut weight_map = BTreeMap::new();
    let n = shards.len();
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, n);
        let views = shard.iter().map(|s| {
            weight_map.insert(s.name.clone(), file.clone());
            (s.name.clone(), LazyTensor { spec: s, st_shape: s.shape.clone(), seed, fp8: &fp8 })
        });
        let meta = Some([("format".to_string(), "pt".to_string())].into_iter().collect());
        let partial = out.join(format!("{file}.partial"));
        if let Err(e) = safetensors::serialize_to_file(views, meta, &partial) {
            let _ = std::fs::remove_file(&partial);
            crate::bail!("write {file}: {e}");
        }
        std::fs::rename(&partial, out.join(&file)).with_context(|| format!("rename {file}"))?;
    }
    let index = serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
    write_json(&out.join("model.safetensors.index.json"), &index)?;
    // Not part of a real release: says how this one was made (the loader ignores it).
    let made = serde_json::json!({ "generator": "mk synth", "preset": cfg.name, "seed": seed, "lm_gain": LM_GAIN });
    write_json(&out.join("synthetic.json"), &made)?;
    write_json(&out.join("config.json"), &cfg.to_hf_json())?;
    Ok(total as u64)
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).context("serialise JSON")?;
    std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irwin_hall_has_unit_variance_and_fp8_table_hits_448() {
        let t = fp8_table();
        assert_eq!(t.code[1020], 0x7E);
        assert_eq!(t.code[0], 0xFE);
        assert!((t.code_std - 129.8).abs() < 3.0, "{}", t.code_std);
        let mut r = Rng::new(7);
        let n = 200_000;
        let (mut s, mut s2) = (0f64, 0f64);
        for _ in 0..n {
            let z = r.normal() as f64;
            s += z;
            s2 += z * z;
        }
        assert!((s / n as f64).abs() < 0.01 && (s2 / n as f64 - 1.0).abs() < 0.02);
    }

    #[test]
    fn generation_is_deterministic_and_thread_independent() {
        let cfg = ModelConfig::preset("tiny").unwrap();
        let specs = expected_tensors(&cfg);
        let fp8 = fp8_table();
        let q = specs.iter().find(|s| s.name.ends_with("layers.0.mlp.gate_proj.weight")).unwrap();
        let a = generate(q, 5, &fp8);
        let mut b = vec![0u8; a.len()];
        for (blk, chunk) in b.chunks_mut(128 * q.shape[1]).enumerate() {
            fill_block(q, 5, &fp8, blk, chunk);
        }
        assert_eq!(a, b);
        assert_ne!(a, generate(q, 6, &fp8));
        // Every 128x128 block holds a +-448 (scale-to-fit).
        let cols = q.shape[1];
        for br in 0..q.shape[0] / 128 {
            for bc in 0..cols / 128 {
                let hit = (0..128).any(|r| (0..128).any(|c| a[(br * 128 + r) * cols + bc * 128 + c] & 0x7F == 0x7E));
                assert!(hit, "block ({br},{bc}) has no 448");
            }
        }
    }
}
