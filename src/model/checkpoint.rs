//! The loader: any real-format checkpoint folder (one shard, or several with
//! `model.safetensors.index.json`), memory-mapped and validated against the config before use.
//!
//! Owns: finding shards, parsing their headers, checking every expected tensor's name, dtype and shape
//! (`tensors::expected_tensors`), checking scales are finite, and handing out tensor bytes in the
//! checkpoint's own byte order (fp8 is never re-laid out). Refuses: anything that does not match, with
//! a one-line error naming the file and the tensor. Never panics on file contents.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::config::ModelConfig;
use super::numerics::{bf16_to_f32, bytes_to_u16};
use super::tensors::{expected_tensors, is_ignored, Dt, Role, TensorSpec};
use crate::bail;
use crate::error::{Context, Result};

#[derive(Debug, Clone)]
struct TensorLoc {
    shard: usize,
    dtype: Dt,
    shape: Vec<usize>,
    /// Absolute byte range in the shard file.
    start: usize,
    end: usize,
}

pub struct Checkpoint {
    pub dir: PathBuf,
    pub config: ModelConfig,
    shard_names: Vec<String>,
    maps: Vec<memmap2::Mmap>,
    tensors: HashMap<String, TensorLoc>,
    specs: Vec<TensorSpec>,
}

impl Checkpoint {
    /// Opens and validates a checkpoint folder. Every error names the file and, where there is one,
    /// the tensor.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        if !dir.is_dir() {
            bail!("checkpoint {}: not a folder", dir.display());
        }
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let (shard_names, index) = find_shards(dir)?;
        let mut maps = Vec::new();
        let mut tensors: HashMap<String, TensorLoc> = HashMap::new();
        for (si, name) in shard_names.iter().enumerate() {
            let path = dir.join(name);
            let file = std::fs::File::open(&path).with_context(|| format!("{name}: cannot open"))?;
            let len = file.metadata().with_context(|| format!("{name}: cannot stat"))?.len();
            if len < 8 {
                bail!("{name}: truncated shard ({len} bytes, no safetensors header)");
            }
            // SAFETY: the mapping is read-only and the engine never writes checkpoint files; a file
            // changed underneath a running engine is outside what it defends against.
            let map = unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("{name}: cannot map"))?;
            for (tname, loc) in parse_shard(name, si, &map)? {
                if let Some(prev) = tensors.get(&tname) {
                    bail!("{name}: tensor {tname} is also in {}", shard_names[prev.shard]);
                }
                if let Some(idx) = &index {
                    match idx.get(&tname) {
                        Some(f) if f == name => {}
                        Some(f) => bail!("{name}: tensor {tname} is listed in the index under {f}"),
                        None => {
                            bail!("{name}: tensor {tname} is not in model.safetensors.index.json")
                        }
                    }
                }
                tensors.insert(tname, loc);
            }
            maps.push(map);
        }
        if let Some(idx) = &index {
            for (tname, file) in idx {
                if !tensors.contains_key(tname) {
                    bail!("{file}: tensor {tname} is in the index but not in the shard");
                }
            }
        }
        let specs = expected_tensors(&config);
        let ck = Checkpoint { dir: dir.to_path_buf(), config, shard_names, maps, tensors, specs };
        ck.validate()?;
        Ok(ck)
    }

    fn file_of(&self, name: &str) -> &str {
        self.tensors.get(name).map(|l| self.shard_names[l.shard].as_str()).unwrap_or("checkpoint")
    }

    /// Names, dtypes and shapes against the config; finite scales.
    fn validate(&self) -> Result<()> {
        let expected: HashMap<&str, &TensorSpec> = self.specs.iter().map(|s| (s.name.as_str(), s)).collect();
        for spec in &self.specs {
            let Some(loc) = self.tensors.get(&spec.name) else {
                bail!("checkpoint {}: missing tensor {} (config.json implies it)", self.dir.display(), spec.name);
            };
            let file = &self.shard_names[loc.shard];
            if loc.dtype != spec.dtype && Some(loc.dtype) != spec.alt_dtype {
                bail!("{file}: tensor {} has dtype {:?}, expected {:?}", spec.name, loc.dtype, spec.dtype);
            }
            if loc.shape != spec.shape {
                bail!("{file}: tensor {} has shape {:?}, config.json implies {:?}", spec.name, loc.shape, spec.shape);
            }
        }
        let mut extra: Vec<&String> =
            self.tensors.keys().filter(|n| !expected.contains_key(n.as_str()) && !is_ignored(n)).collect();
        extra.sort();
        if let Some(n) = extra.first() {
            bail!("{}: unexpected tensor {n} (not part of the model config.json describes)", self.file_of(n));
        }
        for spec in self.specs.iter().filter(|s| s.role == Role::Scale) {
            let v = self.f32_vec(&spec.name);
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                let cols = spec.shape[1];
                bail!(
                    "{}: tensor {} has a non-finite scale at block [{}, {}]",
                    self.file_of(&spec.name),
                    spec.name,
                    i / cols,
                    i % cols
                );
            }
        }
        Ok(())
    }

    /// Scans every byte of every weight for NaN/Inf encodings (slow on 27 GB; `mk check` does it).
    pub fn deep_check(&self) -> Result<()> {
        for spec in &self.specs {
            let b = self.bytes(&spec.name);
            let file = self.file_of(&spec.name);
            let bad = match self.dtype(&spec.name) {
                Dt::F8E4M3 => b.iter().position(|x| x & 0x7F == 0x7F),
                Dt::Bf16 => bytes_to_u16(b).iter().position(|x| x & 0x7F80 == 0x7F80),
                Dt::F32 => b.chunks_exact(4).position(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
            };
            if let Some(i) = bad {
                bail!("{file}: tensor {} has a non-finite value at element {i}", spec.name);
            }
        }
        Ok(())
    }

    pub fn specs(&self) -> &[TensorSpec] {
        &self.specs
    }
    pub fn shard_names(&self) -> &[String] {
        &self.shard_names
    }
    pub fn total_bytes(&self) -> usize {
        self.specs.iter().map(|s| self.bytes(&s.name).len()).sum()
    }

    fn loc(&self, name: &str) -> &TensorLoc {
        // Only names from `expected_tensors` reach here, and `validate` proved each exists.
        match self.tensors.get(name) {
            Some(l) => l,
            None => panic!("internal: tensor {name} requested but not validated"),
        }
    }
    pub fn dtype(&self, name: &str) -> Dt {
        self.loc(name).dtype
    }
    pub fn shape(&self, name: &str) -> &[usize] {
        &self.loc(name).shape
    }
    /// The tensor's bytes, in checkpoint order.
    pub fn bytes(&self, name: &str) -> &[u8] {
        let l = self.loc(name);
        &self.maps[l.shard][l.start..l.end]
    }
    /// A bf16 tensor as u16 bits (zero-copy when aligned).
    pub fn bf16(&self, name: &str) -> Cow<'_, [u16]> {
        bytes_to_u16(self.bytes(name))
    }
    /// A bf16 or f32 tensor widened to f32 (exact).
    pub fn f32_vec(&self, name: &str) -> Vec<f32> {
        let b = self.bytes(name);
        match self.dtype(name) {
            Dt::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            _ => bytes_to_u16(b).iter().map(|x| bf16_to_f32(*x)).collect(),
        }
    }
}

/// The shard files, and the index's tensor -> file map when there is an index.
#[allow(clippy::type_complexity)]
fn find_shards(dir: &Path) -> Result<(Vec<String>, Option<BTreeMap<String, String>>)> {
    let index_path = dir.join("model.safetensors.index.json");
    if index_path.exists() {
        #[derive(serde::Deserialize)]
        struct Index {
            weight_map: BTreeMap<String, String>,
        }
        let text = std::fs::read_to_string(&index_path).context("model.safetensors.index.json: cannot read")?;
        let idx: Index = serde_json::from_str(&text).context("model.safetensors.index.json: corrupt")?;
        let mut files: Vec<String> = idx.weight_map.values().cloned().collect();
        files.sort();
        files.dedup();
        for f in &files {
            if f.contains('/') || f.contains("..") || !dir.join(f).is_file() {
                bail!("model.safetensors.index.json: shard {f} is missing");
            }
        }
        return Ok((files, Some(idx.weight_map)));
    }
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("checkpoint {}: cannot list", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("checkpoint {}: no .safetensors files and no model.safetensors.index.json", dir.display());
    }
    Ok((files, None))
}

/// Parses one shard's header into tensor locations. Checks the header is well-formed JSON, every
/// tensor lies inside the file (a truncated shard names the first tensor cut off), dtypes are ones a
/// Qwen3.5 checkpoint uses, and byte lengths match shapes.
fn parse_shard(name: &str, shard: usize, buf: &[u8]) -> Result<Vec<(String, TensorLoc)>> {
    let n = u64::from_le_bytes(
        buf[..8].try_into().map_err(|_| crate::error::Error::new(format!("{name}: truncated shard")))?,
    );
    if n > (buf.len() - 8) as u64 || n > 100 << 20 {
        bail!("{name}: corrupt header (declares {n} header bytes, file has {})", buf.len());
    }
    let data_start = 8 + n as usize;
    let header: serde_json::Map<String, serde_json::Value> = std::str::from_utf8(&buf[8..data_start])
        .ok()
        .and_then(|s| serde_json::from_str(s).ok())
        .with_context(|| format!("{name}: corrupt header (not a JSON object)"))?;
    let data_len = buf.len() - data_start;
    // Truncation first, with the name of the tensor it cuts.
    let mut ends: Vec<(u64, &String)> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(k, v)| Some((v.get("data_offsets")?.get(1)?.as_u64()?, k)))
        .collect();
    ends.sort();
    if let Some((end, t)) = ends.iter().find(|(e, _)| *e as usize > data_len) {
        bail!("{name}: truncated shard: tensor {t} ends at data byte {end} but the file holds {data_len}");
    }
    // Full structural validation (offsets contiguous, sizes match shapes) by the safetensors crate.
    let (_, meta) = safetensors::SafeTensors::read_metadata(buf)
        .map_err(|e| crate::error::Error::new(format!("{name}: corrupt header: {e}")))?;
    let mut out = Vec::new();
    for (tname, info) in meta.tensors() {
        let dtype = Dt::from_st(info.dtype).with_context(|| {
            format!("{name}: tensor {tname} has dtype {:?}, which no Qwen3.5 checkpoint uses", info.dtype)
        })?;
        let (a, b) = info.data_offsets;
        out.push((
            tname,
            TensorLoc { shard, dtype, shape: info.shape.clone(), start: data_start + a, end: data_start + b },
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
